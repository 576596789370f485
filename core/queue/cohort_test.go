package queue

import (
	"maps"
	"testing"
)

func uuid(b byte) [16]byte { return [16]byte{b} }

// S-91 … S-93: the plan is deterministic, balanced, sticky and covers
// every partition; a member only gets partitions it subscribed to.
func TestPlanCohort(t *testing.T) {
	all := []uint32{0, 1, 2, 3}
	a, b, c := uuid(1), uuid(2), uuid(3)
	two := []CohortMember{{ID: b, Parts: all}, {ID: a, Parts: all}}
	plan := PlanCohort(all, two, nil)
	want := map[uint32][16]byte{0: a, 1: b, 2: a, 3: b}
	if !maps.Equal(plan, want) {
		t.Fatalf("two members: %v, want %v", plan, want)
	}
	// A third member takes one partition; the others keep theirs up to
	// their share (S-92): only one partition moves.
	three := []CohortMember{{ID: a, Parts: all}, {ID: b, Parts: all}, {ID: c, Parts: all}}
	next := PlanCohort(all, three, plan)
	moved, per := 0, map[[16]byte]int{}
	for p, m := range next {
		per[m]++
		if plan[p] != m {
			moved++
		}
	}
	if len(next) != 4 || moved != 1 || per[c] != 1 || per[a]+per[b] != 3 {
		t.Fatalf("third member joins: %v (moved %d)", next, moved)
	}
	// The same inputs give the same plan (S-91).
	if again := PlanCohort(all, three, plan); !maps.Equal(again, next) {
		t.Fatalf("not deterministic: %v then %v", next, again)
	}
	// A member is only given what it subscribed to; coverage comes first.
	partial := []CohortMember{{ID: a, Parts: []uint32{1}}, {ID: b, Parts: all}}
	plan = PlanCohort(all, partial, nil)
	for p, m := range plan {
		if m == a && p != 1 {
			t.Fatalf("member a got partition %d it did not subscribe to: %v", p, plan)
		}
	}
	if len(plan) != 4 {
		t.Fatalf("not every partition assigned: %v", plan)
	}
	// consumer_target is a soft cap: the others fill up first, and what is
	// left is still assigned (S-93).
	capped := []CohortMember{{ID: a, Target: 1, Parts: all}, {ID: b, Target: 1, Parts: all}}
	if plan := PlanCohort(all, capped, nil); len(plan) != 4 {
		t.Fatalf("under-provisioned cohort left partitions unassigned: %v", plan)
	}
}
