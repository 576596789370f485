package session

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// Exclusive consumer groups (cohorts, docs/semantics.md#s-87 … #s-96): a
// SUBSCRIBE with consumer_group makes the subscription a member's on one
// partition of a queue. Every partition that members subscribed to on
// this broker is assigned to exactly one member (plan); only that member's
// subscription takes deliveries from it, the others stay hot standbys
// (queue.Subscription.SetStandby: the gate, S-90). ASSIGNMENT_CHANGED
// tells each member its set whenever it changes (S-94).
//
// A partition moves to another member only once the member it leaves
// holds none of its deliveries unsettled (a closed subscription holds
// none: they went back to Ready), so the partition's order holds across
// the move.
//
// The registry is per broker. In a cluster an owner sees its own
// partitions' subscriptions only, so it plans every partition of the
// queue, giving one it does not serve to any member it knows (members
// subscribe to every partition), and gates its own; owners that see the
// same members plan alike (docs/semantics.md#s-98).

// cohorts is the server's registry: at most one cohort per queue (S-88).
type cohorts struct {
	mu sync.Mutex
	m  map[cohortKey]*cohort
	// partitions, when set (a cluster broker), is the partition count of
	// a queue: the plan then covers them all.
	partitions func(cohortKey) uint32
}

// cohortKey is a queue: its topic and group.
type cohortKey struct {
	topic string
	group wire.Option[string]
}

// cohort is one exclusive consumer group of a queue on this broker.
type cohort struct {
	key     cohortKey
	id      string // consumer_group
	gen     uint64 // rises with every rebalance that changes an assignment (S-94)
	members map[wire.UUID]*member
	plan    map[uint32]wire.UUID // partition → member
	// moving holds the partitions waiting for their previous member to
	// settle what it holds before the planned one takes deliveries.
	moving   map[uint32]bool
	watching bool // a goroutine checks the moves (watchMoves)
	// retired are member subscriptions replaced by a later one of the
	// same member and partition (a reconnect that did not resume: the old
	// session waits out its grace), kept until they close: what they
	// hold must settle before the partition delivers again.
	retired map[*cohortSub]bool
}

// member is one member of a cohort: a member id and its subscriptions,
// one per partition it subscribed to here.
type member struct {
	id       wire.UUID
	target   uint32 // consumer_target; 0 = none (S-93)
	subs     map[uint32]*cohortSub
	assigned []uint32 // the set last pushed, sorted
	told     bool     // an ASSIGNMENT_CHANGED was pushed to it
}

// cohortSub is a member's engine subscription to one partition. Closing it
// leaves the cohort (S-95).
type cohortSub struct {
	*queue.Subscription
	reg  *cohorts
	c    *cohort
	m    *member
	part uint32
	sess *Session
}

// Close ends the engine subscription (its unsettled deliveries return to
// Ready) and then leaves the cohort, whose partitions move on.
func (cs *cohortSub) Close() {
	cs.Subscription.Close()
	cs.reg.leave(cs)
}

// memberID resolves the member id of an exclusive SUBSCRIBE (S-89): an
// all-zero one is 400; one that differs from the id this session already
// joined with is 409; an absent one is that id, or a new one.
func (s *Session) memberID(asked wire.Option[wire.UUID]) (wire.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := asked.Get(); ok {
		switch {
		case id == (wire.UUID{}):
			return id, core.Errorf(core.ErrBadRequest, "member_id must not be all zero")
		case s.hasMember && id != s.member:
			return id, core.Errorf(core.ErrConflict, "this connection joined its consumer groups as member %x; one member id per connection", s.member)
		}
		s.member, s.hasMember = id, true
		return id, nil
	}
	if !s.hasMember {
		s.member, s.hasMember = newMemberID(), true
	}
	return s.member, nil
}

// newMemberID mints a random (version 4) UUID.
func newMemberID() wire.UUID {
	var id wire.UUID
	_, _ = rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// join makes q, the standby engine subscription of sess to partition part
// of a queue, a member's in the cohort id (req's consumer_group). A queue
// whose live cohort has another id refuses it (409, S-88). The plan is
// made when the subscription is announced (rebalance), so that its
// ASSIGNMENT_CHANGED follows its SUBSCRIBE_OK.
func (reg *cohorts) join(sess *Session, req wire.Subscribe, q *queue.Subscription) (*cohortSub, error) {
	key := cohortKey{req.Topic, req.Group}
	id := req.ConsumerGroup.Value
	mid := req.MemberID.Value
	reg.mu.Lock()
	defer reg.mu.Unlock()
	c := reg.m[key]
	if c != nil && c.id != id {
		return nil, core.Errorf(core.ErrConflict, "queue %s already has the exclusive consumer group %q; one per queue", queue.Key{Topic: req.Topic, Group: req.Group}, c.id)
	}
	if c == nil {
		c = &cohort{key: key, id: id, members: map[wire.UUID]*member{}, plan: map[uint32]wire.UUID{}, moving: map[uint32]bool{}}
		if reg.m == nil {
			reg.m = make(map[cohortKey]*cohort)
		}
		reg.m[key] = c
	}
	m := c.members[mid]
	if m == nil {
		m = &member{id: mid, subs: map[uint32]*cohortSub{}}
		c.members[mid] = m
	}
	m.target = req.ConsumerTarget.Value
	cs := &cohortSub{Subscription: q, reg: reg, c: c, m: m, part: req.Partition, sess: sess}
	if old := m.subs[req.Partition]; old != nil {
		old.SetStandby(true) // the member's earlier subscription there (an earlier connection of it)
		if c.retired == nil {
			c.retired = make(map[*cohortSub]bool)
		}
		c.retired[old] = true
	}
	m.subs[req.Partition] = cs
	return cs, nil
}

// leave removes a closed member subscription and plans again; the cohort
// ends with its last member (S-95: its partitions are then consumed
// competitively by whoever else subscribes).
func (reg *cohorts) leave(cs *cohortSub) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	c, m := cs.c, cs.m
	delete(c.retired, cs)
	if m.subs[cs.part] != cs {
		return
	}
	delete(m.subs, cs.part)
	if len(m.subs) == 0 {
		delete(c.members, m.id)
	}
	if len(c.members) == 0 {
		if reg.m[c.key] == c {
			delete(reg.m, c.key)
		}
		return
	}
	reg.rebalanceLocked(c)
}

// rebalance plans cs's cohort again (its subscription was announced).
func (reg *cohorts) rebalance(cs *cohortSub) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if cs.m.subs[cs.part] == cs {
		reg.rebalanceLocked(cs.c)
	}
}

// rebalanceLocked makes a new plan, tells the members whose set changed
// (and a member never told yet, its initial assignment) and moves the
// gates.
func (reg *cohorts) rebalanceLocked(c *cohort) {
	members := make([]planMember, 0, len(c.members))
	parts := map[uint32]bool{}
	for _, m := range c.members {
		pm := planMember{id: m.id, target: m.target}
		for p := range m.subs {
			pm.parts = append(pm.parts, p)
			parts[p] = true
		}
		members = append(members, pm)
	}
	if reg.partitions != nil {
		// Partitions served elsewhere: every member known here may have
		// them (it subscribes there).
		for p := range reg.partitions(c.key) {
			if !parts[p] {
				for i := range members {
					members[i].parts = append(members[i].parts, p)
				}
				parts[p] = false
			}
		}
	}
	plan := planCohort(slices.Sorted(maps.Keys(parts)), members, c.plan)
	changed := false
	for p, mid := range plan {
		if c.plan[p] != mid {
			changed = true
		}
	}
	for p := range c.plan {
		if _, ok := plan[p]; !ok {
			changed = true
		}
	}
	if changed {
		c.gen++
	}
	c.plan = plan
	for _, m := range c.members {
		var set []uint32
		for p, mid := range plan {
			if mid == m.id {
				set = append(set, p)
			}
		}
		slices.Sort(set)
		if m.told && slices.Equal(set, m.assigned) {
			continue
		}
		added, revoked := diffSorted(m.assigned, set)
		m.assigned, m.told = set, true
		body := &wire.AssignmentChanged{Topic: c.key.topic, Group: c.key.group, ConsumerGroup: c.id,
			Generation: c.gen, Assigned: set, Added: added, Revoked: revoked}
		for _, sess := range m.sessions() {
			sess.notify(wire.OpAssignmentChanged, body)
		}
	}
	reg.gateLocked(c)
}

// gateLocked sets every member subscription's gate from the plan: the
// planned member's is active once no other member's subscription to the
// partition holds an unsettled delivery; the others are standbys.
func (reg *cohorts) gateLocked(c *cohort) {
	for _, m := range c.members {
		for p, cs := range m.subs {
			if c.plan[p] != m.id {
				cs.SetStandby(true)
			}
		}
	}
	clear(c.moving)
	for p, mid := range c.plan {
		active := c.members[mid].subs[p]
		if active == nil {
			continue // a partition served by another broker
		}
		if reg.othersHold(c, p, active) {
			active.SetStandby(true)
			c.moving[p] = true
			continue
		}
		active.SetStandby(false)
	}
	if len(c.moving) > 0 && !c.watching {
		c.watching = true
		go reg.watchMoves(c)
	}
}

// othersHold reports whether a member subscription to partition p other
// than active holds unsettled deliveries.
func (reg *cohorts) othersHold(c *cohort, p uint32, active *cohortSub) bool {
	for _, m := range c.members {
		if cs := m.subs[p]; cs != nil && cs != active && cs.Unsettled() > 0 {
			return true
		}
	}
	for cs := range c.retired {
		if cs.part == p && cs.Unsettled() > 0 {
			return true
		}
	}
	return false
}

// watchMoves activates the moving partitions' members as the members they
// leave settle (or their leases run out, or they close), checking every
// moveCheck; it ends when nothing moves.
func (reg *cohorts) watchMoves(c *cohort) {
	for {
		time.Sleep(moveCheck)
		reg.mu.Lock()
		for p := range c.moving {
			mid, ok := c.plan[p]
			m := c.members[mid]
			if !ok || m == nil || m.subs[p] == nil {
				delete(c.moving, p)
				continue
			}
			if active := m.subs[p]; !reg.othersHold(c, p, active) {
				active.SetStandby(false)
				delete(c.moving, p)
			}
		}
		if len(c.moving) == 0 || reg.m[c.key] != c {
			c.watching = false
			reg.mu.Unlock()
			return
		}
		reg.mu.Unlock()
	}
}

// moveCheck is how often a moving partition's previous member is checked.
const moveCheck = 5 * time.Millisecond

// sessions lists the sessions of a member's subscriptions (one, unless the
// member id is used on several connections).
func (m *member) sessions() []*Session {
	var out []*Session
	for _, cs := range m.subs {
		if !slices.Contains(out, cs.sess) {
			out = append(out, cs.sess)
		}
	}
	return out
}

// planMember is a member as the plan sees it: its id, consumer_target and
// the partitions it subscribed to.
type planMember struct {
	id     wire.UUID
	target uint32
	parts  []uint32
}

// planCohort assigns each of parts (sorted) to one member that subscribed
// to it (S-91 … S-93):
//   - deterministic: members are taken in id order;
//   - balanced: each member's share is len(parts)/len(members), and the
//     remainder goes one each to the members holding the most now, then in
//     id order; a consumer_target lowers a member's share;
//   - sticky: a member keeps its current partitions up to its share (S-92);
//   - coverage first: a partition left over goes to the member with the
//     fewest, under its share first, preferring member p mod n, so that
//     owners planning their own partitions alike spread them over the
//     members.
func planCohort(parts []uint32, members []planMember, prev map[uint32]wire.UUID) map[uint32]wire.UUID {
	plan := make(map[uint32]wire.UUID, len(parts))
	if len(members) == 0 || len(parts) == 0 {
		return plan
	}
	slices.SortFunc(members, func(a, b planMember) int { return bytes.Compare(a.id[:], b.id[:]) })
	n := len(members)
	held := make(map[wire.UUID]int, n)
	for _, mid := range prev {
		held[mid]++
	}
	share := make(map[wire.UUID]int, n)
	order := make([]int, n) // who gets the remainder first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(held[members[b].id], held[members[a].id]) })
	for rank, i := range order {
		s := len(parts) / n
		if rank < len(parts)%n {
			s++
		}
		if t := members[i].target; t > 0 {
			s = min(s, int(t))
		}
		share[members[i].id] = s
	}
	subscribed := func(i int, p uint32) bool { return slices.Contains(members[i].parts, p) }
	index := make(map[wire.UUID]int, n)
	for i, m := range members {
		index[m.id] = i
	}
	count := make(map[wire.UUID]int, n)
	var left []uint32
	for _, p := range parts {
		if mid, ok := prev[p]; ok {
			if i, ok := index[mid]; ok && subscribed(i, p) && count[mid] < share[mid] {
				plan[p] = mid
				count[mid]++
				continue
			}
		}
		left = append(left, p)
	}
	for _, p := range left {
		best := -1
		better := func(i int) bool {
			if best < 0 {
				return true
			}
			a, b := members[i].id, members[best].id
			underA, underB := count[a] < share[a], count[b] < share[b]
			if underA != underB {
				return underA
			}
			return count[a] < count[b]
		}
		pref := int(p) % n
		if subscribed(pref, p) && count[members[pref].id] < share[members[pref].id] {
			best = pref
		} else {
			for i := range members {
				if subscribed(i, p) && better(i) {
					best = i
				}
			}
		}
		if best < 0 {
			continue // nobody here subscribed to p (cannot happen: parts come from the members)
		}
		plan[p] = members[best].id
		count[members[best].id]++
	}
	return plan
}

// diffSorted returns what b adds to a and what it drops from it (both
// sorted).
func diffSorted(a, b []uint32) (added, removed []uint32) {
	for _, x := range b {
		if _, ok := slices.BinarySearch(a, x); !ok {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			removed = append(removed, x)
		}
	}
	return added, removed
}
