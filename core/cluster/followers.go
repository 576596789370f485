package cluster

import (
	"slices"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// DefaultTargetFollowers is the built-in replication.target_followers.
const DefaultTargetFollowers = 2

// SetTargetFollowers tells the controller where to read
// replication.target_followers, read at every pass so a change applies
// without a restart. The runtime settings document is opened only after
// the cluster is joined, hence a setter. Until one is set (here or in
// Options) the controller leaves followers as they are rather than plan
// them from a guess it might undo a moment later (each change moves the
// epoch).
func (c *Cluster) SetTargetFollowers(f func() int) { c.targetFollowers.Store(&f) }

// followerTarget is replication.target_followers, and whether it is known.
func (c *Cluster) followerTarget() (int, bool) {
	f := c.targetFollowers.Load()
	if f == nil {
		return 0, false
	}
	return max((*f)(), 0), true
}

// allReadFollowers reports whether every live node can read assignments
// with followers (core.LabelFollowers): until then a record with
// followers would vanish from an older node's view, and with it the
// partition.
func allReadFollowers(snap *Snapshot) bool {
	for _, m := range snap.LiveNodes() {
		if m.Info.Labels[core.LabelFollowers] == "" {
			return false
		}
	}
	return true
}

// followerPlan chooses followers for one pass of the controller (S-133).
// The rules, for a partition whose owner is settled:
//
//   - the target is replication.target_followers, capped at the nodes that
//     could hold a copy besides the owner (live, or dead for less than
//     Margin);
//   - a follower is kept while it is live or dead for less than Margin —
//     the same grace an owner gets, so a node that misses a heartbeat or
//     restarts quickly does not cost its copies; after that it is replaced
//     (or dropped when nobody can replace it);
//   - a draining follower is kept until a replacement exists: a live,
//     non-draining node that holds no copy of the partition. Dropping it
//     earlier would lower the copies for nothing, while replacing it as
//     soon as possible lets the new copy catch up while the draining node
//     still runs;
//   - new followers are live, non-draining nodes distinct from the owner
//     and from each other (no node holds two copies of a partition), the
//     one with the fewest follower roles in the channel first, then the
//     fewest in total, then in rotation — the owners' dealing, so copies
//     spread evenly;
//   - kept followers keep their order, and new ones come after them.
type followerPlan struct {
	snap       *Snapshot
	deadSince  map[core.NodeID]time.Time
	now        time.Time
	margin     time.Duration
	candidates []core.NodeID // live, non-draining, sorted
	target     int
	per, total map[core.NodeID]int // follower roles in the channel, in all
	// presentMembers counts the members present (live, or dead for less
	// than the margin); -1 until counted, once per pass.
	presentMembers int
	states         map[core.NodeID]uint8
}

// settled reports whether prev needs no change for owner: every follower
// present, not the owner, distinct, and none draining while a
// replacement exists.
func (fp *followerPlan) settled(prev []core.NodeID, owner core.NodeID) bool {
	for i, f := range prev {
		if f == owner || !fp.present(f) || slices.Contains(prev[:i], f) {
			return false
		}
		if fp.draining(f) {
			for _, id := range fp.candidates {
				if id != owner && !slices.Contains(prev, id) {
					return false
				}
			}
		}
	}
	return true
}

// Node states, worked out once per pass per node (nodeState): a pass
// asks about the same few nodes for every partition.
const (
	stMember   = 1 << iota // has a member record
	stLive                 // holds a live lease
	stPresent              // live, or dead for less than Margin
	stDraining             // live and draining
)

func (fp *followerPlan) nodeState(id core.NodeID) uint8 {
	if st, ok := fp.states[id]; ok {
		return st
	}
	var st uint8
	if m := fp.snap.Members[id]; m != nil {
		st |= stMember
		if m.Live {
			st |= stLive
			if m.Info.Draining() {
				st |= stDraining
			}
		}
	}
	if st&stLive != 0 {
		st |= stPresent
	} else if since, ok := fp.deadSince[id]; ok && fp.now.Sub(since) < fp.margin {
		st |= stPresent
	}
	if fp.states == nil {
		fp.states = make(map[core.NodeID]uint8)
	}
	fp.states[id] = st
	return st
}

// present reports whether id may still count as a copy: live, or dead
// for less than Margin.
func (fp *followerPlan) present(id core.NodeID) bool { return fp.nodeState(id)&stPresent != 0 }

func (fp *followerPlan) draining(id core.NodeID) bool { return fp.nodeState(id)&stDraining != 0 }

func (fp *followerPlan) live(id core.NodeID) bool { return fp.nodeState(id)&stLive != 0 }

func (fp *followerPlan) member(id core.NodeID) bool { return fp.nodeState(id)&stMember != 0 }

// choose returns the followers of a partition owned by owner whose
// current followers are prev, updating the role counts for the change.
// It returns prev itself when nothing changes.
func (fp *followerPlan) choose(prev []core.NodeID, owner core.NodeID, rotation int) []core.NodeID {
	// The nodes that could hold a copy besides the owner cap the target.
	if fp.presentMembers < 0 {
		fp.presentMembers = 0
		for _, id := range fp.snap.MemberIDs {
			if fp.present(id) {
				fp.presentMembers++
			}
		}
	}
	pool := fp.presentMembers
	if fp.member(owner) && fp.present(owner) {
		pool--
	}
	for _, f := range prev {
		if f != owner && !fp.member(f) && fp.present(f) {
			pool++ // assigned, not registered (yet); counted like a member
		}
	}
	target := min(fp.target, pool)
	if len(prev) == target && fp.settled(prev, owner) {
		return prev // the common case, without allocating
	}

	var kept []core.NodeID
	for _, f := range prev {
		if f != owner && fp.present(f) && !slices.Contains(kept, f) {
			kept = append(kept, f)
		}
	}
	var free []core.NodeID
	for _, id := range fp.candidates {
		if id != owner && !slices.Contains(kept, id) {
			free = append(free, id)
		}
	}
	// A draining follower gives way to a replacement that exists.
	spare := len(free)
	kept = slices.DeleteFunc(kept, func(f core.NodeID) bool {
		if spare > 0 && fp.draining(f) {
			spare--
			return true
		}
		return false
	})
	// Over the target (the setting was lowered, or nodes left): drop the
	// dead first, then the draining, then the last chosen.
	if len(kept) > target {
		rank := func(f core.NodeID) int {
			switch {
			case !fp.live(f):
				return 2
			case fp.draining(f):
				return 1
			}
			return 0
		}
		order := slices.Clone(kept)
		slices.SortStableFunc(order, func(a, b core.NodeID) int { return rank(a) - rank(b) })
		keep := order[:target]
		kept = slices.DeleteFunc(kept, func(f core.NodeID) bool { return !slices.Contains(keep, f) })
	}
	for len(kept) < target && len(free) > 0 {
		n := pick(free, fp.per, fp.total, rotation)
		free = slices.DeleteFunc(free, func(id core.NodeID) bool { return id == n })
		kept = append(kept, n)
	}
	if slices.Equal(kept, prev) {
		return prev
	}
	for _, f := range prev {
		if !slices.Contains(kept, f) {
			fp.per[f]--
			fp.total[f]--
		}
	}
	for _, f := range kept {
		if !slices.Contains(prev, f) {
			fp.per[f]++
			fp.total[f]++
		}
	}
	return kept
}

// UnderReplicated counts the placed partitions with fewer live followers
// than they should have: target (replication.target_followers), or a
// stream's own count (StreamFollowers), capped at the live nodes minus
// one. A follower that is dead, even within the grace before it is
// replaced, is a copy missing now.
func (s *Snapshot) UnderReplicated(target int) int {
	most := max(len(s.LiveNodes())-1, 0)
	n := 0
	count := func(parts []Partition, want int) {
		want = min(max(want, 0), most)
		for _, p := range parts {
			if p.Placed() && s.liveFollowers(p) < want {
				n++
			}
		}
	}
	for _, q := range s.Queues {
		count(q.Parts, target)
	}
	for _, st := range s.Streams {
		count(st.Parts, StreamFollowers(st.Info, target))
	}
	return n
}

// StreamFollowers is how many followers each partition of a stream gets
// (docs/semantics.md#s-85): none for the express tiers, which stay on
// their owner; the declaration's replication_factor when it has one;
// else replication.target_followers, as for a queue.
func StreamFollowers(info queue.StreamInfo, target int) int {
	if !info.Replicated() {
		return 0
	}
	if rf, ok := info.ReplicationFactor.Get(); ok {
		return int(min(rf, 1<<16))
	}
	return target
}

// liveFollowers counts p's followers that hold a live lease.
func (s *Snapshot) liveFollowers(p Partition) int {
	n := 0
	for _, f := range p.Followers {
		if f != p.Node && s.Live(f) {
			n++
		}
	}
	return n
}
