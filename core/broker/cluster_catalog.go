package broker

// The cluster's catalog in this node's engine: every declared queue and
// stream is installed as the cluster view changes, and a dead letter goes
// to a partition of its target that this node owns.

import (
	"fmt"
	"slices"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
)

// applyCatalog installs the snapshot's queues and streams in the local
// engine. Snapshots share the *cluster.Queue of every channel a change did
// not touch, so a queue applied without error before is skipped: a
// first-write mark elsewhere does not make every node walk every
// partition again. Run goroutine only.
func (c *coordinated) applyCatalog(snap *cluster.Snapshot) {
	qs := c.b.queues
	applied := make(map[*cluster.Queue]bool, len(snap.Queues))
	for _, q := range snap.Queues {
		if c.applied[q] {
			applied[q] = true
			continue
		}
		if err := c.resizeLocal(q); err != nil {
			c.b.log.Warn("cannot change the partition count of a queue", "queue", q.Info.Key.String(), "partitions", len(q.Parts), "err", err)
			continue
		}
		info := q.Info
		info.PartitionCount = uint32(len(q.Parts)) // both layouts' while a repartition runs
		c.holdAhead(q)
		if _, err := qs.ApplyQueue(info); err != nil {
			c.b.log.Warn("cannot install declared queue", "queue", q.Info.Key.String(), "err", err)
			continue
		}
		// Load (and recover) the partitions this node owns, so their
		// leases, delays and TTLs run before anyone asks for them; the
		// others stay closed on disk (S-138).
		ok := true
		for p := range q.Owned(c.self.ID) {
			if _, err := qs.Partition(q.Info.Key, p.Ref.Partition); err != nil {
				c.b.log.Warn("cannot open an owned partition", "partition", p.Ref.String(), "err", err)
				ok = false
			}
		}
		applied[q] = ok
	}
	c.applied = applied
	for _, st := range snap.Streams {
		if _, err := qs.ApplyStream(st.Info); err != nil {
			c.b.log.Warn("cannot install declared stream", "stream", st.Info.Topic, "err", err)
		}
	}
}

// deadLetterPartition is queue.Options.DeadLetterPartition in coordinated
// mode: a dead letter is appended on this node, so it goes to a partition
// of the target queue that this node owns (and marks it written first, as
// any first append). A target that is not declared in the cluster, or of
// which this node owns nothing, is an error: the message stays in its
// queue and is dead-lettered again later.
func (c *coordinated) deadLetterPartition(target queue.Key) (uint32, error) {
	snap := c.cl.Snapshot()
	q := snap.Queue(target.Topic, target.Group.Value)
	if q == nil {
		return 0, core.Errorf(core.ErrNotFound, "dead-letter target %s is not declared in this cluster", target)
	}
	owned := slices.Collect(q.Owned(c.self.ID))
	if len(owned) == 0 {
		return 0, fmt.Errorf("this broker owns no partition of dead-letter target %s: %w", target, queue.ErrNoLocalPartition)
	}
	if !c.cl.LeaseValid() {
		return 0, core.Errorf(core.ErrUnavailable, "cluster lease not surely valid")
	}
	p := owned[c.dlqRR.Add(1)%uint64(len(owned))]
	if err := c.router.EnsureLocal(snap, p.Ref); err != nil {
		return 0, err
	}
	if err := c.router.MarkWritten(p); err != nil {
		return 0, err
	}
	return p.Ref.Partition, nil
}
