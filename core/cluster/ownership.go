package cluster

import (
	"context"
	"errors"

	"github.com/fibrilgo/fibril/core"
)

// MarkWritten records, under this node's epoch, that the partition has
// been written here (S-138: only a node holding the log may own it). The owner calls it
// before the partition's first append; once it returns nil the controller
// never moves the partition away from this node. It is a no-op after the
// first success for an epoch. It fails with an error wrapping
// core.ErrUnavailable when this node is not the committed owner (the
// assignment moved, or this node's view is behind) — the caller must then
// not append.
func (c *Cluster) MarkWritten(ctx context.Context, ref core.PartitionRef) error {
	p, ok := c.Snapshot().Partition(ref)
	if !ok || !p.Placed() || p.Node != c.self {
		return core.Errorf(core.ErrUnavailable, "partition %s is not owned by this broker (anymore)", ref)
	}
	if p.Written {
		return nil
	}
	if e, ok := c.written.Load(ref); ok && e.(uint64) == p.Epoch {
		return nil
	}
	version, cur := p.Version, p.Assignment
	for range 8 {
		next := cur
		next.Written = true
		b := encodeAssignment(next)
		_, err := c.coord.CompareAndSet(ctx, assignKey(ref), b, version)
		if err == nil {
			c.written.Store(ref, p.Epoch)
			return nil
		}
		if !errors.Is(err, core.ErrVersionConflict) {
			return core.Errorf(core.ErrUnavailable, "partition %s: cannot record the first write: %v", ref, err)
		}
		kv, err := c.coord.Get(ctx, assignKey(ref))
		if err != nil {
			return core.Errorf(core.ErrUnavailable, "partition %s: cannot record the first write: %v", ref, err)
		}
		if kv.Version == 0 || !decodeInto(kv.Value, &cur) || cur.Node != c.self || cur.Epoch != p.Epoch {
			return core.Errorf(core.ErrUnavailable, "partition %s moved to another broker", ref)
		}
		if cur.Written {
			c.written.Store(ref, p.Epoch)
			return nil
		}
		version = kv.Version
	}
	return core.Errorf(core.ErrUnavailable, "partition %s: the first-write mark kept conflicting; retry", ref)
}

// IsWritten reports whether this node knows the partition is marked
// written under its current epoch (no I/O).
func (c *Cluster) IsWritten(p Partition) bool {
	if p.Written {
		return true
	}
	e, ok := c.written.Load(p.Ref)
	return ok && e.(uint64) == p.Epoch
}
