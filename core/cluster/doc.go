package cluster

import (
	"context"

	"github.com/fibrilgo/fibril/core"
)

// Doc is a core.Document kept at one key of a Coordinator.
type Doc struct {
	C   core.Coordinator
	Key string
}

var _ core.Document = Doc{}

// Load implements core.Document.
func (d Doc) Load(ctx context.Context) ([]byte, uint64, error) {
	kv, err := d.C.Get(ctx, d.Key)
	if err != nil {
		return nil, 0, err
	}
	return kv.Value, kv.Version, nil
}

// Swap implements core.Document.
func (d Doc) Swap(ctx context.Context, data []byte, version uint64) (uint64, error) {
	return d.C.CompareAndSet(ctx, d.Key, data, version)
}

// Watch implements core.Document. The watched prefix is the key itself;
// other keys that merely start with it are ignored.
func (d Doc) Watch(ctx context.Context, after uint64) ([]byte, uint64, uint64, error) {
	kvs, idx, err := d.C.Watch(ctx, d.Key, after)
	if err != nil {
		return nil, 0, 0, err
	}
	for _, kv := range kvs {
		if kv.Key == d.Key {
			return kv.Value, kv.Version, idx, nil
		}
	}
	return nil, 0, idx, nil
}

// Users is the replicated user store document (S-144, S-147).
func (c *Cluster) Users() Doc { return Doc{C: c.coord, Key: KeyUsers} }

// Settings is the runtime settings document (S-167, S-173).
func (c *Cluster) Settings() Doc { return Doc{C: c.coord, Key: KeySettings} }
