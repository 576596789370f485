package cluster

import (
	"context"
	"errors"

	"github.com/fibrilgo/fibril/core"
)

// MarkWritten records, under this node's epoch, that the partition has
// been written here (S-138: only a node holding the log may own it). The
// owner calls it before the partition's first append; once it returns nil
// the controller never moves the partition away from this node. It is a
// no-op after the first success. It fails with an error wrapping
// core.ErrUnavailable when this node is not the committed owner (the
// assignment moved, or this node's view is behind) — the caller must then
// not append.
//
// A newer epoch that still names this node as owner is not a move: the
// controller changed the followers (S-134). The mark is then retried on
// the newer record. That is safe because a partition that left this node
// and came back was never written meanwhile (a written partition never
// moves), so an unmarked record naming this node means nobody else holds
// the partition's log.
func (c *Cluster) MarkWritten(ctx context.Context, ref core.PartitionRef) error {
	p, ok := c.Snapshot().Partition(ref)
	if !ok || !p.Placed() || p.Node != c.self {
		return core.Errorf(core.ErrUnavailable, "partition %s is not owned by this broker (anymore)", ref)
	}
	if c.IsWritten(p) {
		return nil
	}
	version, cur := p.Version, p.Assignment
	for range 8 {
		next := cur
		next.Written = true
		b := encodeAssignment(next)
		_, err := c.coord.CompareAndSet(ctx, assignKey(ref), b, version)
		if err == nil {
			c.noteWritten(ref, next.Epoch)
			return nil
		}
		if !errors.Is(err, core.ErrVersionConflict) {
			return core.Errorf(core.ErrUnavailable, "partition %s: cannot record the first write: %v", ref, err)
		}
		kv, err := c.coord.Get(ctx, assignKey(ref))
		if err != nil {
			return core.Errorf(core.ErrUnavailable, "partition %s: cannot record the first write: %v", ref, err)
		}
		if kv.Version == 0 || !decodeInto(kv.Value, &cur) || cur.Node != c.self || cur.Epoch < p.Epoch {
			return core.Errorf(core.ErrUnavailable, "partition %s moved to another broker", ref)
		}
		if cur.Written {
			c.noteWritten(ref, cur.Epoch)
			return nil
		}
		version = kv.Version
	}
	return core.Errorf(core.ErrUnavailable, "partition %s: the first-write mark kept conflicting; retry", ref)
}

// noteWritten remembers that this node marked ref written at epoch (the
// highest such epoch), so the hot path skips the mark while its view
// still shows an older record.
func (c *Cluster) noteWritten(ref core.PartitionRef, epoch uint64) {
	for {
		old, loaded := c.written.LoadOrStore(ref, epoch)
		if !loaded || old.(uint64) >= epoch || c.written.CompareAndSwap(ref, old, epoch) {
			return
		}
	}
}

// IsWritten reports whether this node knows the partition is marked
// written (no I/O): the record says so, or this node marked it at the
// record's epoch or a later one. A later epoch with the same owner only
// changed followers and carries the mark over, so a view that trails the
// mark by a follower change still counts as marked.
func (c *Cluster) IsWritten(p Partition) bool {
	if p.Written {
		return true
	}
	e, ok := c.written.Load(p.Ref)
	return ok && e.(uint64) >= p.Epoch
}

// NewEpoch makes the assignment of ref, which this node owns, carry an
// epoch above above (compare-and-set: owner, followers and the written mark
// stay) and returns it; when it already does, it returns that one. An
// owner that restarts calls it before its first publish (the log's epoch
// history already holds the record's epoch): the records the crash took
// from its log may still be on a follower, and a new epoch is how the
// follower finds where the two logs part (docs/ARCHITECTURE.md#replication).
// It fails with core.ErrUnavailable when this node does not own ref.
func (c *Cluster) NewEpoch(ctx context.Context, ref core.PartitionRef, above uint64) (uint64, error) {
	p, ok := c.Snapshot().Partition(ref)
	if !ok || !p.Placed() || p.Node != c.self {
		return 0, core.Errorf(core.ErrUnavailable, "partition %s is not owned by this broker (anymore)", ref)
	}
	version, cur := p.Version, p.Assignment
	for range 8 {
		if cur.Epoch > above {
			return cur.Epoch, nil
		}
		next := cur
		next.Epoch = above + 1
		_, err := c.coord.CompareAndSet(ctx, assignKey(ref), encodeAssignment(next), version)
		if err == nil {
			c.log.Info("partition takes a new epoch (its owner restarted)", "partition", ref.String(), "epoch", next.Epoch)
			return next.Epoch, nil
		}
		if !errors.Is(err, core.ErrVersionConflict) {
			return 0, core.Errorf(core.ErrUnavailable, "partition %s: cannot move to a new epoch: %v", ref, err)
		}
		kv, err := c.coord.Get(ctx, assignKey(ref))
		if err != nil {
			return 0, core.Errorf(core.ErrUnavailable, "partition %s: cannot move to a new epoch: %v", ref, err)
		}
		if kv.Version == 0 || !decodeInto(kv.Value, &cur) || cur.Node != c.self {
			return 0, core.Errorf(core.ErrUnavailable, "partition %s moved to another broker", ref)
		}
		version = kv.Version
	}
	return 0, core.Errorf(core.ErrUnavailable, "partition %s: the new epoch kept conflicting; retry", ref)
}
