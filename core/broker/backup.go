package broker

// Backups (docs/deploy.md#backup-and-restore): a copy of what this broker
// holds, taken while it serves. Every partition is copied the way a new
// follower copies it — the owner's checkpoint at one instant (the settled
// set and the engine's state: leases, retries, delays, cursors) and the
// records up to it — through the replication code (core/replica) over an
// in-process pipe, into a directory laid out as server.data_dir is, with
// the catalog, the users and the runtime settings next to it, and in a
// cluster the coordination keys (cluster.json, for reference). Restored
// (`fibril restore`), the directory starts a broker that recovers it as
// after a failover. Partitions are copied one after another, each
// consistent in itself; a message settled while the backup ran may come
// back as unsettled (delivered again), and none that was unsettled is
// lost.

import (
	"archive/tar"
	"context"
	"encoding/json"

	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/auth"
	"github.com/fibrilgo/fibril/core/buildinfo"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/replica"
	"github.com/fibrilgo/fibril/core/wire"
)

// BackupManifest is backup.json, the first file of a backup: what it holds.
type BackupManifest struct {
	Format     int             `json:"format"` // the data directory format it restores to
	WrittenBy  string          `json:"written_by"`
	At         time.Time       `json:"at"`
	Node       core.NodeID     `json:"node,omitempty"` // a cluster node's backup: its own partitions only
	Partitions []BackupPart    `json:"partitions"`
	Skipped    []BackupSkipped `json:"skipped,omitempty"`
}

type BackupPart struct {
	Kind      string `json:"kind"`
	Topic     string `json:"topic"`
	Group     string `json:"group,omitempty"`
	Partition uint32 `json:"partition"`
	Records   uint64 `json:"records"` // the next offset the copy holds records up to
}

type BackupSkipped struct {
	Kind   string `json:"kind"`
	Topic  string `json:"topic"`
	Reason string `json:"reason"`
}

// backupTo writes this broker's backup into dir, which must not exist.
func (b *Broker) backupTo(ctx context.Context, dir string) (*BackupManifest, error) {
	qm := b.readyQueues()
	if qm == nil {
		return nil, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, core.Errorf(core.ErrInternal, "backup: %v", err)
	}
	m := &BackupManifest{Format: dataFormat, WrittenBy: buildinfo.Get().Short(), At: time.Now().UTC()}
	c := b.adminCluster.Load()
	owned := func(core.PartitionRef) (uint64, bool) { return 0, true }
	if c != nil {
		m.Node = c.self.ID
		snap := c.cl.Snapshot()
		owned = func(ref core.PartitionRef) (uint64, bool) {
			p, ok := snap.Partition(ref)
			return p.Epoch, ok && p.Node == c.self.ID
		}
	}
	queues := filepath.Join(dir, "queues")
	if err := os.Mkdir(queues, 0o700); err != nil {
		return nil, core.Errorf(core.ErrInternal, "backup: %v", err)
	}
	for _, q := range qm.Queues() {
		for n := range q.PartitionCount {
			ref := core.PartitionRef{Topic: q.Key.Topic, Group: q.Key.Group.Value, Partition: n}
			epoch, ok := owned(ref)
			if !ok {
				continue
			}
			p, err := replicatedOf(qm, ref)
			if err != nil {
				return nil, fmt.Errorf("backup: partition %d of queue %s: %w", n, q.Key, err)
			}
			next, err := copyPartition(ctx, qm, queues, q.Key, n, p, epoch)
			if err != nil {
				return nil, err
			}
			m.Partitions = append(m.Partitions, BackupPart{Kind: "queue", Topic: q.Key.Topic, Group: q.Key.Group.Value, Partition: n, Records: next})
		}
	}
	for _, s := range qm.Streams() {
		if !s.Replicated() {
			m.Skipped = append(m.Skipped, BackupSkipped{Kind: "stream", Topic: s.Topic, Reason: "an express stream keeps no durable copy"})
			continue
		}
		for n := range s.PartitionCount {
			ref := core.PartitionRef{Topic: s.Topic, Partition: n}
			epoch, ok := owned(ref)
			if !ok {
				continue
			}
			p, err := replicatedOf(qm, ref)
			if err != nil {
				return nil, fmt.Errorf("backup: partition %d of stream %s: %w", n, s.Topic, err)
			}
			next, err := copyPartition(ctx, qm, queues, queue.Key{Topic: s.Topic}, n, p, epoch)
			if err != nil {
				return nil, err
			}
			m.Partitions = append(m.Partitions, BackupPart{Kind: "stream", Topic: s.Topic, Partition: n, Records: next})
		}
	}
	if err := qm.WriteBackupCatalog(queues); err != nil {
		return nil, err
	}
	if s := b.adminUsers.Load(); s != nil {
		if err := s.WriteCopy(filepath.Join(dir, auth.StoreFile)); err != nil {
			return nil, core.Errorf(core.ErrInternal, "backup: users: %v", err)
		}
	}
	if s := b.adminSettings.Load(); s != nil {
		if err := writeJSONFile(filepath.Join(dir, "runtime-settings.json"), s.Current()); err != nil {
			return nil, err
		}
	}
	if c != nil {
		kvs, idx, err := c.coord.List(ctx, "")
		if err != nil {
			return nil, core.Errorf(core.ErrUnavailable, "backup: the coordination keys: %v", err)
		}
		if err := writeJSONFile(filepath.Join(dir, "cluster.json"), map[string]any{"index": idx, "keys": kvs}); err != nil {
			return nil, err
		}
	}
	if err := writeJSONFile(filepath.Join(dir, "backup.json"), m); err != nil {
		return nil, err
	}
	return m, nil
}

// copyPartition copies partition n of key (rp, the engine's) into root,
// as a follower would: the owner's checkpoint, and the records up to it.
// It returns the copy's next offset.
func copyPartition(ctx context.Context, qm *queue.Manager, root string, key queue.Key, n uint32, rp replicatedPartition, epoch uint64) (uint64, error) {
	what := fmt.Sprintf("partition %d of %s", n, key)
	log, err := rp.ReplicationLog()
	if err != nil {
		return 0, fmt.Errorf("backup: %s: %w", what, err)
	}
	dst, err := qm.OpenBackupPartition(root, key, n)
	if err != nil {
		return 0, fmt.Errorf("backup: %s: %w", what, err)
	}
	defer dst.Close()
	src := &replica.Source{Lookup: func(wire.QueueKey, string) (replica.Owned, error) {
		return replica.Owned{Log: log, Epoch: epoch, Checkpoint: rp.ReplicationCheckpoint}, nil
	}}
	var stats replica.FollowerStats
	f := &replica.Follower{Key: wire.QueueKey{Topic: key.Topic, Group: key.Group, Partition: n}, NodeID: "@backup", Log: dst, Stats: &stats}
	ours, theirs := net.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = replica.Serve(ctx, theirs, src, 64<<20) }()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, ours) }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for stats.CheckpointInstalls.Load() == 0 { // the checkpoint is installed once every record below it is copied
		select {
		case err := <-done:
			return 0, fmt.Errorf("backup: %s: %v", what, err)
		case <-ctx.Done():
			return 0, fmt.Errorf("backup: %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
	cancel()
	<-done
	if err := dst.Sync(); err != nil {
		return 0, fmt.Errorf("backup: %s: %w", what, err)
	}
	_, next := dst.Bounds()
	return next, nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return core.Errorf(core.ErrInternal, "backup: %v", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return core.Errorf(core.ErrInternal, "backup: %v", err)
	}
	return nil
}

// Backup streams a backup of this broker as a tar archive to w (POST
// /admin/api/backup): it is written to a directory under server.data_dir
// first, then sent, then removed. The manifest (backup.json) says what it
// holds.
func (b *Broker) Backup(ctx context.Context, w io.Writer) error {
	dir := filepath.Join(b.cfg.Server.DataDir, fmt.Sprintf(".backup-%d", time.Now().UnixNano()))
	defer os.RemoveAll(dir)
	m, err := b.backupTo(ctx, dir)
	if err != nil {
		return err
	}
	if err := writeTar(w, dir); err != nil {
		return err
	}
	b.log.Info("backup sent", "partitions", len(m.Partitions), "skipped", len(m.Skipped))
	return nil
}

// writeTar writes dir's files to w as a tar archive of paths relative to
// dir, backup.json first.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	add := func(path string, info fs.FileInfo) error {
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	}
	manifest := filepath.Join(dir, "backup.json")
	info, err := os.Stat(manifest)
	if err != nil {
		return err
	}
	if err := add(manifest, info); err != nil {
		return err
	}
	err = filepath.Walk(dir, func(path string, info fs.FileInfo, err error) error {
		if err != nil || path == manifest {
			return err
		}
		return add(path, info)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
