package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
)

// restoredClusterFile holds, in a data directory restored from a cluster
// node's backup, the coordination keys the backup saved (its cluster.json).
const restoredClusterFile = "restore-cluster.json"

// restoreClusterMetadata puts a restored backup's coordination keys into
// the cluster this broker joined (docs/deploy.md#backup-and-restore): the
// catalog, kind claims, assignments (without followers: see
// cluster.Restorable), cohort plans, tombstones, users and settings, each
// written only where the cluster has no such key
// (compare-and-set on version 0), so that brokers restored at the same
// time agree on the first writer's. A cluster whose catalog already holds
// something is left alone: a backup never overwrites a live cluster. The
// file is renamed afterwards (.applied or .skipped), so this happens
// once.
func (b *Broker) restoreClusterMetadata(ctx context.Context) error {
	path := filepath.Join(b.cfg.Server.DataDir, restoredClusterFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var dump struct {
		Index uint64    `json:"index"`
		Keys  []core.KV `json:"keys"`
	}
	if err := json.Unmarshal(data, &dump); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	has, err := b.cluster.cl.HasCatalog(ctx)
	if err != nil {
		return err
	}
	if has {
		b.log.Warn("the cluster already has a catalog: the restored backup's cluster metadata is not applied", "file", path)
		return os.Rename(path, path+".skipped")
	}
	written := 0
	for _, kv := range dump.Keys {
		value, ok := cluster.Restorable(kv.Key, kv.Value)
		if !ok {
			continue
		}
		if _, err := b.cluster.coord.CompareAndSet(ctx, kv.Key, value, 0); errors.Is(err, core.ErrVersionConflict) {
			continue // another restored broker wrote it first
		} else if err != nil {
			return fmt.Errorf("restoring the cluster metadata (%s): %w", kv.Key, err)
		}
		written++
	}
	b.log.Warn("restored the cluster metadata of a backup", "keys", written, "backup_index", dump.Index)
	return os.Rename(path, path+".applied")
}
