package broker

// A repartition on this node (docs/repartition.md): the engine's copy of
// a queue follows the view's partitions (both layouts' while a transition
// runs; applyCatalog), and as the owner of partitions of a queue in
// transition this node holds deliveries that must wait for their sources,
// records each source's cutover offset and, once everything below it is
// settled, that the source drained. Everything here is derived again from
// the view and the engine after a restart or a failover.

import (
	"context"
	"fmt"
	"sync"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
)

// repartition starts a partition count change of a queue (POST
// /admin/api/repartition): in a cluster only (S-122).
func (b *Broker) repartition(ctx context.Context, topic, group string, count uint32, user string) (any, error) {
	c := b.adminCluster.Load()
	if c == nil {
		return nil, core.Errorf(core.ErrNotFound, "repartition exists only in a cluster (coordination.backend set): a standalone broker's queues keep their partition count")
	}
	r, err := c.cl.Repartition(ctx, topic, group, count, user)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"topic": topic, "group": group, "partition_count": count}
	if r == nil {
		out["status"] = "unchanged"
		return out, nil
	}
	out["status"], out["from"], out["to"] = "started", r.From, r.To
	b.log.Info("repartition requested", "queue", queueKey(topic, group).String(), "from", r.From, "to", r.To, "admin_user", user)
	return out, nil
}

// repartitioning is the run goroutine's bookkeeping of the writes and
// watches in flight, so that a view seen again starts none twice.
type repartitioning struct {
	mu        sync.Mutex
	recording map[step]bool                // a cutover or drain record being written
	watches   map[core.PartitionRef]func() // drain watches, by source: their cancel
	// cutovers are the cutover offsets read and not yet in view: a retry
	// records the same offset (run goroutine only).
	cutovers map[core.PartitionRef]uint64
}

// step is one record of one source: its cutover or its drain.
type step struct {
	ref  core.PartitionRef
	what string
}

// holdOf is queue.Options.Holds in a cluster: the hold a partition opens
// with (before it can deliver anything) while its queue is in transition.
func (c *coordinated) holdOf(key queue.Key, n uint32) (uint64, bool) {
	r := c.cl.Snapshot().RepartitionOf(key.Topic, key.Group.Value)
	if r == nil {
		return 0, false
	}
	return holdFor(r, n, 0, false)
}

// holdFor is the hold partition n needs while r runs. A shrink survivor
// holds from its own cutover: the recorded one, else cut when haveCut (read
// by this node and not in view yet), else from 0 until the run goroutine
// reads it and lowers the hold to it.
func holdFor(r *cluster.Repartition, n uint32, cut uint64, haveCut bool) (uint64, bool) {
	srcs := r.SourcesOf(n)
	if len(srcs) == 0 || r.Drained(srcs) {
		return 0, false
	}
	if r.Grow() {
		return 0, true // a new partition delivers nothing before its source drained
	}
	if s, ok := r.Sources[n]; ok {
		return s.Cutover, true
	}
	if haveCut {
		return cut, true
	}
	return 0, true
}

// holdAhead puts in place, before the engine learns a raised partitioning
// version of q, the hold each partition this node owns needs for q's
// transition (holdFor, with no cutover read yet: a shrink's survivor holds
// from 0). A message a producer routed by the new layout while this node
// lagged behind is held by the engine only until the raise (the lag hold,
// core/queue/fence.go); from the raise on, a survivor's own hold must
// already be there, or a delivery made before applyRepartitions reads its
// cutover could overtake an older message of the same key in a merge
// source. It only adds or lowers holds; applyRepartitions sets the exact
// ones right after. Run goroutine, before ApplyQueue.
func (c *coordinated) holdAhead(q *cluster.Queue) {
	r := q.Repartition
	if r == nil {
		return
	}
	if have, ok := c.b.queues.QueueInfo(q.Info.Key); !ok || have.PartitioningVersion >= q.Info.PartitioningVersion {
		return // nothing is raised by this view
	}
	for p := range q.Owned(c.self.ID) {
		from, held := holdFor(r, p.Ref.Partition, 0, false)
		if !held {
			continue
		}
		part, err := c.b.queues.Partition(q.Info.Key, p.Ref.Partition)
		if err != nil {
			continue // not installed yet: opened with Options.Holds
		}
		if cur, isHeld := part.Hold(); !isHeld || cur > from {
			part.SetHold(from)
		}
	}
}

// applyRepartitions is this node's part as an owner. Run goroutine, after
// applyCatalog (which gave the engine the raised partitioning version).
func (c *coordinated) applyRepartitions(snap *cluster.Snapshot) {
	qs := c.b.queues
	live := map[core.PartitionRef]bool{}
	cutovers := map[core.PartitionRef]uint64{}
	for _, q := range snap.Queues {
		r := q.Repartition
		for p := range q.Owned(c.self.ID) {
			n := p.Ref.Partition
			part, err := qs.Partition(q.Info.Key, n)
			if err != nil {
				continue
			}
			var from uint64
			var held bool
			if r != nil {
				// A source of a cut-over transition: its cutover, read
				// exactly where the engine's fence turned
				// (Partition.Cutover), and recorded once.
				var cut uint64
				var haveCut bool
				source := n < r.From && r.CutOver(q.Info)
				if src, ok := r.Sources[n]; source && !ok {
					if cut, haveCut = c.repart.cutovers[p.Ref]; !haveCut {
						shrinkSurvivor := !r.Grow() && len(r.SourcesOf(n)) > 0
						cut, haveCut = part.Cutover(shrinkSurvivor), true
					}
					cutovers[p.Ref] = cut
					c.recordCutover(p.Ref, p.Epoch, cut)
				} else if source && !src.Drained {
					live[p.Ref] = true
					c.watchDrain(p.Ref, part, src.Cutover)
				}
				from, held = holdFor(r, n, cut, haveCut)
			}
			cur, isHeld := part.Hold()
			switch {
			case held && (!isHeld || cur != from):
				part.SetHold(from)
			case !held && isHeld:
				part.ReleaseHold()
			}
		}
	}
	c.repart.cutovers = cutovers
	c.repart.mu.Lock()
	for ref, cancel := range c.repart.watches {
		if !live[ref] {
			cancel()
			delete(c.repart.watches, ref)
		}
	}
	c.repart.mu.Unlock()
}

// recordCutover writes a source's cutover in the background; the next
// view shows it (or, failing, lacks it, and the write is tried again).
func (c *coordinated) recordCutover(ref core.PartitionRef, epoch, off uint64) {
	c.background(ref, "cutover", func(ctx context.Context) error { return c.cl.RecordCutover(ctx, ref, epoch, off) })
}

// watchDrain records that a source drained once everything below its
// cutover is settled.
func (c *coordinated) watchDrain(ref core.PartitionRef, part *queue.Partition, cutover uint64) {
	c.repart.mu.Lock()
	defer c.repart.mu.Unlock()
	if c.repart.watches == nil {
		c.repart.watches = make(map[core.PartitionRef]func())
	}
	if _, ok := c.repart.watches[ref]; ok {
		return
	}
	c.repart.watches[ref] = part.OnSettledBelow(cutover, func() {
		c.background(ref, "drained", func(ctx context.Context) error { return c.cl.RecordDrained(ctx, ref) })
	})
}

// background runs one coordination write of a repartition, at most one
// per source and step at a time; a failure is logged and the next view
// retries (the drain watch is dropped so that it fires again).
func (c *coordinated) background(ref core.PartitionRef, what string, write func(context.Context) error) {
	key := step{ref, what}
	c.repart.mu.Lock()
	if c.repart.recording == nil {
		c.repart.recording = make(map[step]bool)
	}
	if c.repart.recording[key] {
		c.repart.mu.Unlock()
		return
	}
	c.repart.recording[key] = true
	c.repart.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cl.Margin())
		err := write(ctx)
		cancel()
		c.repart.mu.Lock()
		delete(c.repart.recording, key)
		if err != nil {
			delete(c.repart.watches, ref)
		}
		c.repart.mu.Unlock()
		if err != nil {
			c.b.log.Warn("could not record a repartition step; the next view retries", "partition", ref.String(), "step", what, "err", err)
		}
	}()
}

// resizeLocal makes the engine's copy of q hold the view's partitions:
// a grow's new ones as soon as the marker is in view, and a shrink's
// retired ones dropped once the marker is gone (their subscriptions end
// with topic_deleted first, so that consumers hear why).
func (c *coordinated) resizeLocal(q *cluster.Queue) error {
	qs := c.b.queues
	local, ok := qs.QueueInfo(q.Info.Key)
	if !ok {
		return nil // ApplyQueue creates it with the view's count
	}
	want := uint32(len(q.Parts))
	switch {
	case want > local.PartitionCount:
		_, err := qs.GrowQueue(q.Info.Key, want, q.Info.PartitioningVersion)
		return err
	case want < local.PartitionCount && q.Repartition == nil:
		if s := c.b.adminSessions.Load(); s != nil {
			s.CloseSubscriptions(func(t, g string, n uint32) bool {
				return t == q.Info.Topic && g == q.Info.Group.Value && n >= want
			}, queue.ReasonRetired, fmt.Sprintf("partition retired: queue %s now has %d partitions", q.Info.Key, want))
		}
		_, err := qs.ShrinkQueue(q.Info.Key, want, q.Info.PartitioningVersion)
		return err
	}
	return nil
}
