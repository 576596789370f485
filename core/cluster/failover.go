package cluster

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/fibrilgo/fibril/core"
)

// Failover (docs/ARCHITECTURE.md#replication): once the lease of the
// owner of a written partition has ended, the controller promotes the member
// of its recorded in-sync set with the highest durable tail, with a new
// epoch. The tails come from the followers themselves: each follower of a
// partition whose owner is not live publishes its durable tail there
// (core.LabelTails, FormatTails), so the controller reads them "at that
// moment" rather than from a heartbeat that lags.
//
// It is safe by the in-sync invariant the owner keeps: every confirmed
// record is durable on at least Acks members of the recorded set. With at
// most Acks−1 members missing, one of those that reported holds every
// confirmed record, and since followers' logs are prefixes of the
// owner's, the highest tail holds them all. With Acks 0 (local_durable,
// or nothing confirmed through followers yet) nothing is promoted: the
// partition waits for its owner (S-138).

// Tail is a follower's durable tail of one partition under one epoch.
type Tail struct {
	Epoch uint64
	Next  uint64
	// Fenced: the follower saw the owner crash (its stream dropped and
	// nothing listens on the owner's address any more) and will never
	// again acknowledge a record of this epoch, so Next is final.
	Fenced bool
}

// FormatTails renders tails as the LabelTails value: one line per
// partition, "<epoch> <next> <assign key>" and " fenced" for a fenced
// tail, in key order; "" for none.
func FormatTails(tails map[core.PartitionRef]Tail) string {
	lines := make([]string, 0, len(tails))
	for ref, t := range tails {
		line := strconv.FormatUint(t.Epoch, 10) + " " + strconv.FormatUint(t.Next, 10) + " " + assignKey(ref)
		if t.Fenced {
			line += " fenced"
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// ParseTails reads a LabelTails value; lines it cannot read are skipped.
func ParseTails(v string) map[core.PartitionRef]Tail {
	out := make(map[core.PartitionRef]Tail)
	for line := range strings.SplitSeq(v, "\n") {
		f := strings.Fields(line)
		fenced := len(f) == 4 && f[3] == "fenced"
		if len(f) != 3 && !fenced {
			continue
		}
		epoch, err1 := strconv.ParseUint(f[0], 10, 64)
		next, err2 := strconv.ParseUint(f[1], 10, 64)
		topic, group, n, ok := parseAssignRef(f[2])
		if err1 != nil || err2 != nil || !ok {
			continue
		}
		out[core.PartitionRef{Topic: topic, Group: group, Partition: n}] = Tail{Epoch: epoch, Next: next, Fenced: fenced}
	}
	return out
}

// reportedTails gathers the tails live members publish, by partition and
// node (nil when none does: the common case costs nothing).
func (s *Snapshot) reportedTails() map[core.PartitionRef]map[core.NodeID]Tail {
	var out map[core.PartitionRef]map[core.NodeID]Tail
	s.eachLiveLabel(core.LabelTails, func(id core.NodeID, v string) {
		if out == nil {
			out = make(map[core.PartitionRef]map[core.NodeID]Tail)
		}
		for ref, t := range ParseTails(v) {
			if out[ref] == nil {
				out[ref] = make(map[core.NodeID]Tail)
			}
			out[ref][id] = t
		}
	})
	return out
}

// eachLiveLabel calls f, in member id order, with every live member's
// value of label key that is not empty.
func (s *Snapshot) eachLiveLabel(key string, f func(id core.NodeID, v string)) {
	for _, id := range s.MemberIDs {
		if m := s.Members[id]; m.Live && m.Info.Labels[key] != "" {
			f(id, m.Info.Labels[key])
		}
	}
}

// fencedByAll reports whether every member of p's recorded in-sync set
// published a fenced tail under p's epoch: each saw the owner crash and
// will acknowledge nothing more of this epoch, so the owner — should it
// still be running — cannot confirm another record (a replica-gated
// confirm needs a member's copy, and shrinking the set is a
// compare-and-set the promotion's own write makes fail, or that makes the
// promotion's fail). The controller then promotes at once instead of
// waiting for the owner's lease to end; a wrong guess costs a move, not a
// confirmed record (docs/ARCHITECTURE.md#replication).
func fencedByAll(p Partition, tails map[core.NodeID]Tail) bool {
	n := 0
	for _, id := range p.InSync {
		if id == p.Node {
			continue
		}
		t, ok := tails[id]
		if !ok || t.Epoch != p.Epoch || !t.Fenced {
			return false
		}
		n++
	}
	return n > 0
}

// promotion plans the failover of p, a written partition whose owner is
// dead: the new assignment, or false when no member can safely take it
// (yet: the tails may still be coming). tails are p's reported tails; a
// tail of another epoch does not count. usable says whether a node may
// own partitions (live and not draining); among members with the highest
// tail the one with the least load (partitions it owns) wins, then the
// first in id order, so that a dead node's partitions spread over its
// followers.
func promotion(p Partition, tails map[core.NodeID]Tail, usable func(core.NodeID) bool, load func(core.NodeID) int) (Assignment, bool) {
	if p.Acks < 1 {
		return Assignment{}, false
	}
	reported := make(map[core.NodeID]uint64)
	for _, id := range p.InSync {
		if t, ok := tails[id]; ok && t.Epoch == p.Epoch && id != p.Node {
			reported[id] = t.Next
		}
	}
	if len(p.InSync)-len(reported) > p.Acks-1 {
		return Assignment{}, false
	}
	var best core.NodeID
	for _, id := range p.InSync { // in id order: ties go to the first
		next, ok := reported[id]
		if !ok || !usable(id) {
			continue
		}
		if best == "" || next > reported[best] || next == reported[best] && load(id) < load(best) {
			best = id
		}
	}
	if best == "" {
		return Assignment{}, false
	}
	// Members as far as the new owner hold everything it holds, so every
	// confirmed record; they stay in sync under the new epoch.
	next := Assignment{Node: best, Epoch: p.Epoch + 1, Written: true}
	for _, id := range p.InSync {
		if id != best && reported[id] >= reported[best] {
			next.InSync = append(next.InSync, id)
		}
	}
	next.Acks = min(p.Acks, len(next.InSync))
	for _, f := range p.Followers {
		if f != best {
			next.Followers = append(next.Followers, f)
		}
	}
	return next, true
}

// PromoteFenced fails over, from this node, each written partition of
// snap of whose recorded in-sync set this node is a member and whose
// members have all fenced (fencedByAll), as the controller would. The
// members have the evidence first, and the controller may be the node
// that crashed: its successor is elected only once its election lease
// ends. Any node may make the write: it is the same compare-and-set on
// the assignment's version the controller makes, so a racing write, a
// lifted fence or a newer plan makes it fail. It returns how many
// partitions it moved.
func (c *Cluster) PromoteFenced(ctx context.Context, snap *Snapshot) int {
	tails := snap.reportedTails()
	if tails == nil {
		return 0
	}
	var load map[core.NodeID]int
	usable := func(id core.NodeID) bool {
		m := snap.Members[id]
		return m != nil && m.Live && !m.Info.Draining()
	}
	moved := 0
	snap.AllPartitions(func(p Partition) {
		if !p.Placed() || !p.Written || !slices.Contains(p.InSync, c.self) || !fencedByAll(p, tails[p.Ref]) {
			return
		}
		if load == nil {
			load = make(map[core.NodeID]int)
			snap.AllPartitions(func(q Partition) {
				if q.Placed() {
					load[q.Node]++
				}
			})
		}
		next, ok := promotion(p, tails[p.Ref], usable, func(id core.NodeID) int { return load[id] })
		if !ok || c.assign(ctx, p, next) != nil {
			return
		}
		moved++
		c.stats.Promotions.Add(1)
		c.log.Warn("partition failed over: every in-sync follower saw its owner crash; one takes it",
			"partition", p.Ref.String(), "from", string(p.Node), "to", string(next.Node), "epoch", next.Epoch,
			"tail", tails[p.Ref][next.Node].Next, "in_sync", next.InSync)
	})
	return moved
}
