package cluster

import (
	"context"
	"errors"
	"slices"

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
	if ok && c.IsWritten(p) && p.Node == c.self {
		return nil
	}
	a, _, err := c.updateOwned(ctx, ref, "record the first write", func(a *Assignment) (bool, error) {
		if a.Epoch < p.Epoch {
			return false, core.Errorf(core.ErrUnavailable, "partition %s moved to another broker", ref)
		}
		if a.Written {
			return false, nil
		}
		a.Written = true
		return true, nil
	})
	if err != nil {
		return err
	}
	c.noteWritten(ref, a.Epoch)
	return nil
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
// epoch above above (compare-and-set: owner, followers, the in-sync set
// and the written mark stay) and returns it; when it already does, it
// returns that one. An owner that restarts calls it before its first
// publish (the log's epoch history already holds the record's epoch): the
// records the crash took from its log may still be on a follower, and a
// new epoch is how the follower finds where the two logs part
// (docs/ARCHITECTURE.md#replication). It fails with core.ErrUnavailable
// when this node does not own ref.
func (c *Cluster) NewEpoch(ctx context.Context, ref core.PartitionRef, above uint64) (uint64, error) {
	a, _, err := c.updateOwned(ctx, ref, "move to a new epoch", func(a *Assignment) (bool, error) {
		if a.Epoch > above {
			return false, nil
		}
		a.Epoch = above + 1
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	if a.Epoch == above+1 {
		c.log.Info("partition takes a new epoch (its owner restarted)", "partition", ref.String(), "epoch", a.Epoch)
	}
	return a.Epoch, nil
}

// SetInSync records the in-sync set of ref, which this node owns, under
// epoch, with the follower copies every confirmed record has among its
// members (Assignment.InSync), and returns the record's version (the one
// found, when it already said so). It fails with core.ErrUnavailable when the
// assignment moved to another epoch meanwhile: the set was planned for
// that epoch's followers, and the owner plans again from the newer one.
func (c *Cluster) SetInSync(ctx context.Context, ref core.PartitionRef, epoch uint64, inSync []core.NodeID, acks int) (uint64, error) {
	_, version, err := c.updateOwned(ctx, ref, "record the in-sync set", func(a *Assignment) (bool, error) {
		if a.Epoch != epoch {
			return false, core.Errorf(core.ErrUnavailable, "partition %s moved from epoch %d to %d", ref, epoch, a.Epoch)
		}
		if slices.Equal(a.InSync, inSync) && a.Acks == acks {
			return false, nil
		}
		a.InSync, a.Acks = slices.Clone(inSync), acks
		return true, nil
	})
	return version, err
}

// HandOff gives ref, which this node owns under epoch, to its follower
// to with a new epoch (a drain, S-128): to leaves the followers, inSync
// and acks become the new in-sync set (the members that hold everything
// to holds) and its copies, and the partition stays marked written. The
// owner calls it once its fence keeps it from confirming anything to does
// not hold. It fails with core.ErrUnavailable when the assignment moved
// meanwhile.
func (c *Cluster) HandOff(ctx context.Context, ref core.PartitionRef, epoch uint64, to core.NodeID, inSync []core.NodeID, acks int) error {
	_, _, err := c.updateOwned(ctx, ref, "hand the partition over", func(a *Assignment) (bool, error) {
		if a.Epoch != epoch {
			return false, core.Errorf(core.ErrUnavailable, "partition %s moved from epoch %d to %d", ref, epoch, a.Epoch)
		}
		a.Node, a.Epoch, a.Written = to, a.Epoch+1, true
		a.Followers = slices.DeleteFunc(a.Followers, func(f core.NodeID) bool { return f == to })
		a.InSync, a.Acks = slices.Clone(inSync), acks
		return true, nil
	})
	if err == nil {
		c.log.Info("partition handed over (drain)", "partition", ref.String(), "to", string(to), "epoch", epoch+1)
	}
	return err
}

// updateOwned changes the assignment of ref, which this node owns, by
// compare-and-set, reading it again after a conflict. change edits the
// current record and says whether it needs writing, or refuses it. It
// returns the record as written and its version (or as found, when
// nothing needed writing); every failure wraps core.ErrUnavailable and says what, the
// partition moving to another node included.
func (c *Cluster) updateOwned(ctx context.Context, ref core.PartitionRef, what string, change func(*Assignment) (bool, error)) (Assignment, uint64, error) {
	p, ok := c.Snapshot().Partition(ref)
	if !ok || !p.OwnedBy(c.self) {
		return Assignment{}, 0, core.Errorf(core.ErrUnavailable, "partition %s is not owned by this broker (anymore)", ref)
	}
	version, cur := p.Version, p.Assignment
	for range 8 {
		next := cur
		next.Followers, next.InSync = slices.Clone(cur.Followers), slices.Clone(cur.InSync)
		write, err := change(&next)
		if err != nil || !write {
			return next, version, err
		}
		written, err := c.coord.CompareAndSet(ctx, assignKey(ref), encodeAssignment(next), version)
		if err == nil {
			return next, written, nil
		}
		if !errors.Is(err, core.ErrVersionConflict) {
			return Assignment{}, 0, core.Errorf(core.ErrUnavailable, "partition %s: cannot %s: %v", ref, what, err)
		}
		kv, err := c.coord.Get(ctx, assignKey(ref))
		if err != nil {
			return Assignment{}, 0, core.Errorf(core.ErrUnavailable, "partition %s: cannot %s: %v", ref, what, err)
		}
		cur = Assignment{}
		if kv.Version == 0 || !decodeInto(kv.Value, &cur) || cur.Node != c.self {
			return Assignment{}, 0, core.Errorf(core.ErrUnavailable, "partition %s moved to another broker", ref)
		}
		version = kv.Version
	}
	return Assignment{}, 0, core.Errorf(core.ErrUnavailable, "partition %s: cannot %s: the record kept changing; retry", ref, what)
}
