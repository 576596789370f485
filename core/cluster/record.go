package cluster

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/fibrilgo/fibril/core"
)

// readRecord reads the JSON record at key linearizably and decodes it with
// its version (nil: no record). what names the kind of record in errors.
func readRecord[T any](ctx context.Context, c *Cluster, key, what string, decode func([]byte, uint64) (*T, bool)) (*T, error) {
	r, _, err := getRecord(ctx, c, key, what, decode)
	return r, err
}

// getRecord is readRecord that also returns the version read (0: none).
func getRecord[T any](ctx context.Context, c *Cluster, key, what string, decode func([]byte, uint64) (*T, bool)) (*T, uint64, error) {
	kv, err := c.coord.Get(ctx, key)
	if err != nil {
		return nil, 0, unavailable(err)
	}
	if kv.Version == 0 {
		return nil, 0, nil
	}
	r, ok := decode(kv.Value, kv.Version)
	if !ok {
		return nil, 0, core.Errorf(core.ErrInternal, "%s record %s is unreadable", what, key)
	}
	return r, kv.Version, nil
}

// updateRecord is the compare-and-set loop of one edit to the record at
// key: read it, let change edit it (false: nothing to write), write it
// back on the version read. A conflicting concurrent write makes it read
// and decide again; without a record there is nothing to do.
func updateRecord[T any](ctx context.Context, c *Cluster, key, what string, decode func([]byte, uint64) (*T, bool), change func(*T) bool) error {
	for range maxDeclareRounds {
		cur, version, err := getRecord(ctx, c, key, what, decode)
		if err != nil || cur == nil || !change(cur) {
			return err
		}
		b, err := json.Marshal(cur)
		if err != nil {
			return core.Errorf(core.ErrInternal, "encode %s record %s: %v", what, key, err)
		}
		if _, err := c.coord.CompareAndSet(ctx, key, b, version); err == nil {
			return nil
		} else if !errors.Is(err, core.ErrVersionConflict) {
			return unavailable(err)
		}
	}
	return core.Errorf(core.ErrUnavailable, "updating the %s record %s kept conflicting; retrying later", what, key)
}
