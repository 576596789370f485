package session

import (
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
// On a standalone broker the registry plans its cohorts itself. In a
// cluster the controller plans each cohort over all its queue's
// partitions from the members every owner reports (CohortMembers); each
// owner gates its own partitions by that plan, and a partition whose
// planned member has no subscription here delivers to nobody
// (docs/semantics.md#s-98).

// cohorts is the server's registry: at most one cohort per queue (S-88).
type cohorts struct {
	mu sync.Mutex
	m  map[cohortKey]*cohort
	// clustered: the plans are the controller's (ApplyCohortPlans), made
	// from the members every owner reports (CohortMembers), instead of
	// this broker's own.
	clustered bool
	plans     map[planKey]CohortPlan
	// changed, when set, hears that the members changed (a member's
	// subscription joined or left), so the report reaches the controller
	// without waiting for the next heartbeat.
	changed func()
}

// OnCohortChange sets the function that hears that the exclusive
// consumer group members here changed (CohortMembers). It runs on its
// own goroutine and must not block for long.
func (s *Server) OnCohortChange(f func()) {
	s.cohorts.mu.Lock()
	s.cohorts.changed = f
	s.cohorts.mu.Unlock()
}

// noteChangeLocked tells the listener that the members changed.
func (reg *cohorts) noteChangeLocked() {
	if f := reg.changed; f != nil {
		go f()
	}
}

// planKey names a cohort in the controller's plans.
type planKey struct{ topic, group, id string }

// CohortPlan is the controller's plan of one cohort (docs/semantics.md#s-98).
type CohortPlan struct {
	Topic, Group, ID string
	Generation       uint64
	Assign           map[uint32]wire.UUID
}

// CohortMembers are the members of one cohort subscribed here, with their
// consumer_target and the partitions they subscribed to here: what a
// cluster broker reports for the controller's plan.
type CohortMembers struct {
	Topic, Group, ID string
	Members          map[wire.UUID]CohortMemberReport
}

// CohortMemberReport is one member in CohortMembers.
type CohortMemberReport struct {
	Target uint32
	Parts  []uint32
}

// CohortMembers lists the cohorts with members here.
func (s *Server) CohortMembers() []CohortMembers {
	reg := &s.cohorts
	reg.mu.Lock()
	defer reg.mu.Unlock()
	out := make([]CohortMembers, 0, len(reg.m))
	for _, c := range reg.m {
		cm := CohortMembers{Topic: c.key.topic, Group: c.key.group.Value, ID: c.id, Members: map[wire.UUID]CohortMemberReport{}}
		for id, m := range c.members {
			cm.Members[id] = CohortMemberReport{Target: m.target, Parts: slices.Sorted(maps.Keys(m.subs))}
		}
		out = append(out, cm)
	}
	return out
}

// ApplyCohortPlans installs the controller's plans (a cluster broker, on
// every new view): each cohort here whose plan changed is gated and told
// again. Plans of cohorts without members here are kept for when members
// join.
func (s *Server) ApplyCohortPlans(plans []CohortPlan) {
	reg := &s.cohorts
	reg.mu.Lock()
	defer reg.mu.Unlock()
	next := make(map[planKey]CohortPlan, len(plans))
	for _, p := range plans {
		next[planKey{p.Topic, p.Group, p.ID}] = p
	}
	old := reg.plans
	reg.plans = next
	for _, c := range reg.m {
		k := planKey{c.key.topic, c.key.group.Value, c.id}
		if o, n := old[k], next[k]; o.Generation != n.Generation || !maps.Equal(o.Assign, n.Assign) {
			reg.rebalanceLocked(c)
		}
	}
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
	reg.noteChangeLocked()
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
	reg.noteChangeLocked()
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

// rebalanceLocked makes a new plan — or, in a cluster, takes the
// controller's — tells the members whose set changed (and a member never
// told yet, its initial assignment) and moves the gates.
func (reg *cohorts) rebalanceLocked(c *cohort) {
	var plan map[uint32]wire.UUID
	if reg.clustered {
		ext := reg.plans[planKey{c.key.topic, c.key.group.Value, c.id}]
		plan, c.gen = ext.Assign, ext.Generation
	} else {
		plan = reg.localPlan(c)
		if !maps.Equal(plan, c.plan) {
			c.gen++
		}
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

// localPlan plans c on a standalone broker: the partitions its members
// subscribed to, sticky from c's current plan.
func (reg *cohorts) localPlan(c *cohort) map[uint32]wire.UUID {
	members := make([]queue.CohortMember, 0, len(c.members))
	parts := map[uint32]bool{}
	for _, m := range c.members {
		pm := queue.CohortMember{ID: m.id, Target: m.target}
		for p := range m.subs {
			pm.Parts = append(pm.Parts, p)
			parts[p] = true
		}
		members = append(members, pm)
	}
	prev := make(map[uint32][16]byte, len(c.plan))
	for p, id := range c.plan {
		prev[p] = id
	}
	out := make(map[uint32]wire.UUID)
	for p, id := range queue.PlanCohort(slices.Sorted(maps.Keys(parts)), members, prev) {
		out[p] = id
	}
	return out
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
		m := c.members[mid]
		if m == nil || m.subs[p] == nil {
			continue // served by another broker, or its member is not subscribed here: nobody gets it here
		}
		active := m.subs[p]
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
