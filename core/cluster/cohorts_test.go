package cluster

import (
	"context"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// S-98, S-99: the controller unions the members the owners report, plans
// the cohort over every partition of its queue (a member only gets
// partitions it subscribed to), records the plan with generation 1, writes
// nothing when the reports do not change the plan (a new controller reading
// the recorded plan included), and records the next generation when a
// member leaves.
func TestControllerPlansCohorts(t *testing.T) {
	a, b := [16]byte{0xa}, [16]byte{0xb}
	ref := CohortRef{Topic: "jobs", ID: "workers"}
	report := func(members map[[16]byte]CohortMember) string {
		return FormatCohortMembers(map[CohortRef]map[[16]byte]CohortMember{ref: members})
	}
	node := func(id core.NodeID, label string) core.NodeInfo {
		return core.NodeInfo{ID: id, PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelCohorts: label}}
	}
	fixture := func(n1, n2 string) *Fixture {
		return NewFixture().
			Node(node("n1", n1), true).
			Node(node("n2", n2), true).
			Queue(queue.QueueInfo{Key: queue.Key{Topic: "jobs"}, PartitionCount: 4})
	}
	// n1 owns partitions 0 and 1, n2 owns 2 and 3; a subscribed to all,
	// b only to n2's.
	f := fixture(report(map[[16]byte]CohortMember{a: {Parts: []uint32{0, 1}}}),
		report(map[[16]byte]CohortMember{a: {Parts: []uint32{2, 3}}, b: {Parts: []uint32{2, 3}}}))
	rec := &casRecorder{writes: map[string][]byte{}}
	c := &Cluster{coord: rec, opts: Options{Now: time.Now, Heartbeat: time.Second}, log: slog.New(slog.DiscardHandler)}
	c.planCohorts(context.Background(), f.Snapshot())
	v, ok := rec.writes[cohortKey(ref)]
	if !ok {
		t.Fatal("no plan recorded")
	}
	plan, ok := decodePlan(v, 1)
	if !ok || plan.Generation != 1 || len(plan.Assign) != 4 {
		t.Fatalf("plan %+v", plan)
	}
	for p, id := range plan.Assign {
		if id == b && p < 2 {
			t.Fatalf("b was given partition %d it did not subscribe to: %v", p, plan.Assign)
		}
	}
	perMember := map[[16]byte]int{}
	for _, id := range plan.Assign {
		perMember[id]++
	}
	if perMember[a] != 2 || perMember[b] != 2 {
		t.Fatalf("not balanced: %v", plan.Assign)
	}
	// The same reports, with the plan recorded: nothing to write — also
	// for a new controller (S-99).
	f.put(cohortKey(ref), v)
	rec2 := &casRecorder{writes: map[string][]byte{}}
	c2 := &Cluster{coord: rec2, opts: c.opts, log: c.log}
	c2.planCohorts(context.Background(), f.Snapshot())
	if len(rec2.writes) != 0 {
		t.Fatalf("an unchanged plan was written again: %s", rec2.writes[cohortKey(ref)])
	}
	// b leaves: a gets everything, at generation 2.
	f2 := fixture(report(map[[16]byte]CohortMember{a: {Parts: []uint32{0, 1}}}), report(map[[16]byte]CohortMember{a: {Parts: []uint32{2, 3}}}))
	f2.put(cohortKey(ref), v)
	c2.planCohorts(context.Background(), f2.Snapshot())
	next, ok := decodePlan(rec2.writes[cohortKey(ref)], 2)
	want := map[uint32][16]byte{0: a, 1: a, 2: a, 3: a}
	if !ok || next.Generation != 2 || !maps.Equal(next.Assign, want) {
		t.Fatalf("after b left: %+v", next)
	}
	// Round trip of the snapshot's view of a plan.
	if got, ok := f2.Snapshot().Cohort(ref); !ok || !maps.Equal(got.Assign, plan.Assign) {
		t.Fatalf("snapshot plan %+v", got)
	}
}
