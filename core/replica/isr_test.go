package replica

import (
	"slices"
	"testing"
)

func TestInSyncPlan(t *testing.T) {
	up := func(id string, next uint64) Candidate {
		return Candidate{ID: id, Follower: true, Live: true, Reported: true, Next: next}
	}
	dead := func(id string, next uint64) Candidate {
		return Candidate{ID: id, Follower: true, Reported: true, Next: next}
	}
	cases := []struct {
		name string
		plan InSyncPlan
		want []string
	}{
		{"fresh partition: reporting followers join",
			InSyncPlan{Acks: 1, Nodes: []Candidate{up("b", 0), up("c", 0)}}, []string{"b", "c"}},
		{"a follower that has not reported does not join",
			InSyncPlan{Acks: 1, Nodes: []Candidate{up("b", 0), {ID: "c", Follower: true, Live: true}}}, []string{"b"}},
		{"a follower behind the confirmed records does not join",
			InSyncPlan{Acks: 1, Confirmed: 100, InSync: []string{"b"}, Nodes: []Candidate{up("b", 120), up("c", 99)}}, []string{"b"}},
		{"a follower that holds the confirmed records joins",
			InSyncPlan{Acks: 1, Confirmed: 100, InSync: []string{"b"}, Nodes: []Candidate{up("b", 120), up("c", 100)}}, []string{"b", "c"}},
		{"a dead member leaves when another holds the confirmed records",
			InSyncPlan{Acks: 1, Confirmed: 100, InSync: []string{"b", "c"}, Nodes: []Candidate{dead("b", 120), up("c", 100)}}, []string{"c"}},
		{"a dead member stays while it alone holds confirmed records",
			InSyncPlan{Acks: 1, Confirmed: 100, InSync: []string{"b", "c"}, Nodes: []Candidate{dead("b", 120), up("c", 90)}}, []string{"b", "c"}},
		{"the last member stays while copies are needed",
			InSyncPlan{Acks: 1, Confirmed: 5, InSync: []string{"b"}, Nodes: []Candidate{dead("b", 5)}}, []string{"b"}},
		{"without needed copies every lagging member leaves",
			InSyncPlan{Acks: 0, Confirmed: 5, InSync: []string{"b", "c"}, Nodes: []Candidate{dead("b", 5), up("c", 1)}, Behind: 3}, nil},
		{"a slow member (below the mark of isr_timeout ago) leaves",
			InSyncPlan{Acks: 1, Confirmed: 500, Behind: 400, InSync: []string{"b", "c"}, Nodes: []Candidate{up("b", 300), up("c", 510)}}, []string{"c"}},
		{"a member the controller took away leaves",
			InSyncPlan{Acks: 1, Confirmed: 5, InSync: []string{"b", "x"}, Nodes: []Candidate{up("b", 5)}}, []string{"b"}},
		{"a member the controller took away stays while it alone holds confirmed records",
			InSyncPlan{Acks: 1, Confirmed: 5, InSync: []string{"b", "x"}, Nodes: []Candidate{up("b", 4), {ID: "x", Live: true, Reported: true, Next: 5}}}, []string{"b", "x"}},
		{"two needed copies: a lagging member leaves only when two others hold everything",
			InSyncPlan{Acks: 2, Confirmed: 50, InSync: []string{"b", "c", "d"}, Nodes: []Candidate{dead("b", 60), up("c", 50), up("d", 40)}}, []string{"b", "c", "d"}},
		{"two needed copies, enough holders: the dead one leaves",
			InSyncPlan{Acks: 2, Confirmed: 50, InSync: []string{"b", "c", "d"}, Nodes: []Candidate{dead("b", 60), up("c", 50), up("d", 55)}}, []string{"c", "d"}},
		{"a member that never reported leaves once the owner has a mark",
			InSyncPlan{Acks: 0, Behind: 1, InSync: []string{"b"}, Nodes: []Candidate{{ID: "b", Follower: true, Live: true}}}, nil},
	}
	for _, c := range cases {
		if got := c.plan.Next(); !slices.Equal(got, c.want) {
			t.Errorf("%s: Next() = %v, want %v", c.name, got, c.want)
		}
	}
}
