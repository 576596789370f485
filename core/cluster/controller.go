package cluster

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// ElectionPlacement is the election whose leader runs placement.
const ElectionPlacement = "placement"

// controllerLoop campaigns for the placement election and runs the
// controller while it leads. A lost term is final; it campaigns again.
func (c *Cluster) controllerLoop() {
	defer c.wg.Done()
	backoff := 100 * time.Millisecond
	for c.ctx.Err() == nil {
		lead, err := c.coord.Campaign(c.ctx, ElectionPlacement)
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			c.log.Debug("placement campaign failed; retrying", "err", err)
			if !c.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		c.leader.Store(true)
		c.log.Info("placement controller elected", "term", lead.Term())
		c.runController(lead)
		c.leader.Store(false)
		c.stats.UnderReplicated.Store(0)
		c.log.Info("placement controller term ended", "term", lead.Term())
	}
}

func (c *Cluster) runController(lead core.Leadership) {
	deadSince := make(map[core.NodeID]time.Time)
	tick := time.NewTicker(max(c.Margin()/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		changed := c.Changed()
		select {
		case <-lead.Lost():
			return
		default:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.TTL)
		snap := c.Snapshot()
		c.place(ctx, snap, deadSince)
		c.planCohorts(ctx, snap)
		c.finishDeletions(ctx, snap)
		c.advanceRepartitions(ctx, snap)
		cancel()
		select {
		case <-lead.Lost():
			return
		case <-c.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.Heartbeat)
			_ = lead.Resign(ctx)
			cancel()
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// place is one pass of the placement controller over snap (S-133, S-138):
//   - every declared partition gets an owner among live, non-draining
//     nodes, dealt so that a channel's partitions land on distinct nodes
//     before any node gets a second one, then by total load;
//   - a live owner is kept (sticky), draining or not (S-128);
//   - a dead owner's written partitions fail over to an in-sync follower
//     at once (failover.go); those that cannot keep their owner (only it
//     holds the log; the partition answers 503 until it returns);
//   - a dead owner's never-written partitions move once the node has been
//     dead for Margin (its lease ended no earlier than its ValidUntil, and
//     it stopped acting as owner Margin before that);
//   - every placed partition gets followers (followers, below).
//
// A partition that needs an owner is written at once, followers
// included; follower-only changes are written after every owner of the
// pass, so that placing followers never delays an owner a declaration is
// waiting for. Each write moves the epoch (S-134) and carries the written
// mark over; nothing is written for a partition whose plan is unchanged.
// Writes are compare-and-set on the assignment's version, so a racing
// written mark or a deposed controller's stale plan simply fails, and the
// next pass plans again from the newer record.
func (c *Cluster) place(ctx context.Context, snap *Snapshot, deadSince map[core.NodeID]time.Time) {
	now := c.opts.Now()
	var candidates []core.NodeID
	for _, id := range snap.MemberIDs {
		m := snap.Members[id]
		if m.Live {
			delete(deadSince, id)
			if !m.Info.Draining() {
				candidates = append(candidates, id)
			}
		} else if _, ok := deadSince[id]; !ok {
			deadSince[id] = now
		}
	}
	total := make(map[core.NodeID]int)
	ftotal := make(map[core.NodeID]int)
	snap.AllPartitions(func(p Partition) {
		if p.Placed() {
			if _, ok := deadSince[p.Node]; !ok && !snap.Live(p.Node) {
				deadSince[p.Node] = now // assigned to a node that never registered
			}
			total[p.Node]++
			for _, f := range p.Followers {
				if _, ok := deadSince[f]; !ok && !snap.Live(f) {
					deadSince[f] = now
				}
				ftotal[f]++
			}
		}
	})
	target, known := c.followerTarget()
	planFollowers := known && allReadFollowers(snap)
	fp := &followerPlan{snap: snap, deadSince: deadSince, now: now, margin: c.Margin(),
		candidates: candidates, target: target, total: ftotal, presentMembers: -1}
	var later []pendingWrite
	tails := snap.reportedTails()
	usable := func(id core.NodeID) bool { return slices.Contains(candidates, id) }
	channel := func(name string, parts []Partition, followers int) {
		per := make(map[core.NodeID]int)
		fp.per = make(map[core.NodeID]int)
		fp.target = followers
		for _, p := range parts {
			if p.Placed() {
				per[p.Node]++
				for _, f := range p.Followers {
					fp.per[f]++
				}
			}
		}
		h := fnv.New32a()
		h.Write([]byte(name))
		start := int(h.Sum32())
		for i, p := range parts {
			// A written partition fails over as soon as its owner's lease
			// has ended, with no further wait: the owner stopped confirming
			// a margin before its ValidUntil, which the backend never
			// undercuts, so that margin already lies behind us (S-136) —
			// or before, when every in-sync member saw the owner crash and
			// fenced its epoch (fencedByAll).
			if p.Placed() && p.Written && (!snap.Live(p.Node) || fencedByAll(p, tails[p.Ref])) {
				next, ok := promotion(p, tails[p.Ref], usable, func(id core.NodeID) int { return total[id] })
				if !ok {
					continue // it waits for its owner, or for its members' tails
				}
				if planFollowers {
					next.Followers = fp.choose(next.Followers, next.Node, start+i)
				}
				if c.assign(ctx, p, next) != nil {
					continue
				}
				c.stats.Promotions.Add(1)
				c.log.Warn("partition failed over: its owner is dead; an in-sync follower takes it",
					"partition", p.Ref.String(), "from", string(p.Node), "to", string(next.Node), "epoch", next.Epoch,
					"tail", tails[p.Ref][next.Node].Next, "in_sync", next.InSync)
				per[p.Node]--
				total[p.Node]--
				per[next.Node]++
				total[next.Node]++
				continue
			}
			moving := !p.Placed() || !(snap.Live(p.Node) || p.Written || now.Sub(deadSince[p.Node]) < c.Margin())
			next := p.Assignment
			if moving {
				if len(candidates) == 0 {
					return
				}
				next = Assignment{Node: pick(candidates, per, total, start+i), Epoch: p.Epoch + 1, Followers: p.Followers}
			}
			if planFollowers {
				next.Followers = fp.choose(p.Followers, next.Node, start+i)
			} else {
				next.Followers = slices.DeleteFunc(slices.Clone(next.Followers), func(f core.NodeID) bool { return f == next.Node })
			}
			if !moving {
				if slices.Equal(next.Followers, p.Followers) {
					continue
				}
				next.Epoch = p.Epoch + 1
				later = append(later, pendingWrite{p, next})
				continue
			}
			if err := c.assign(ctx, p, next); err != nil {
				continue
			}
			if p.Placed() {
				per[p.Node]--
				total[p.Node]--
			}
			per[next.Node]++
			total[next.Node]++
		}
	}
	for _, q := range snap.Queues {
		channel("q/"+q.Info.Topic+"/"+q.Info.Group.Value, q.Parts, target)
	}
	for _, st := range snap.Streams {
		channel("s/"+st.Info.Topic, st.Parts, StreamFollowers(st.Info, target))
	}
	for _, w := range later {
		_ = c.assign(ctx, w.p, w.next)
	}
	if known {
		c.stats.UnderReplicated.Store(int64(snap.UnderReplicated(target)))
	}
}

// pendingWrite is a follower-only change, written after the pass's owners.
type pendingWrite struct {
	p    Partition
	next Assignment
}

// pick chooses the candidate with the fewest partitions of this channel,
// then the fewest in total, then the first in rotation order from start.
func pick(candidates []core.NodeID, per, total map[core.NodeID]int, start int) core.NodeID {
	var best core.NodeID
	n := len(candidates)
	for j := range n {
		id := candidates[(start%n+n+j)%n]
		if best == "" || per[id] < per[best] || per[id] == per[best] && total[id] < total[best] {
			best = id
		}
	}
	return best
}

// assign writes next, p's new assignment (its epoch already moved).
func (c *Cluster) assign(ctx context.Context, p Partition, next Assignment) error {
	if _, err := c.coord.CompareAndSet(ctx, assignKey(p.Ref), encodeAssignment(next), p.Version); err != nil {
		if !errors.Is(err, core.ErrVersionConflict) && ctx.Err() == nil {
			c.log.Warn("placement write failed", "partition", p.Ref.String(), "node", string(next.Node), "err", err)
		}
		return err
	}
	c.stats.Placements.Add(1)
	switch {
	case !p.Placed():
		c.log.Debug("partition placed", "partition", p.Ref.String(), "node", string(next.Node),
			"followers", next.Followers, "epoch", next.Epoch)
	case p.Node != next.Node:
		c.log.Info("partition re-placed", "partition", p.Ref.String(), "from", string(p.Node), "to", string(next.Node),
			"followers", next.Followers, "epoch", next.Epoch)
	default:
		c.log.Info("partition followers changed", "partition", p.Ref.String(), "owner", string(next.Node),
			"from", p.Followers, "to", next.Followers, "epoch", next.Epoch)
	}
	return nil
}
