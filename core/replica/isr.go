package replica

import (
	"slices"
	"sort"
)

// The in-sync set (docs/ARCHITECTURE.md#replication) is the part of a
// partition's followers whose durable progress a replica-gated confirm may
// count. The owner records it in the coordinator under the assignment's
// epoch, and it holds one invariant there: every confirmed record is
// durable on at least Acks members of the recorded set, Acks being the
// follower copies the policy needs (its required copies minus the
// owner's). Hence, when the owner is gone, among any members but Acks−1
// of them there is one that holds every confirmed record, and the one
// with the highest durable tail holds them all (the followers' logs are
// prefixes of the owner's).
//
// The owner keeps the invariant by the order of its steps: a follower
// joins the recorded set only once it holds every confirmed record, and
// the gate counts a member only after the record names it; a member leaves
// only while the others still hold every confirmed record Acks times.

// Candidate is a follower as the owner sees it when it plans the in-sync
// set.
type Candidate struct {
	ID       string
	Follower bool   // the assignment names it a follower
	Live     bool   // its cluster lease is valid
	Reported bool   // it reported durable progress to this owner
	Next     uint64 // the durable next offset it last reported
}

// InSyncPlan is what the owner knows when it plans the in-sync set.
type InSyncPlan struct {
	Acks      int         // follower copies a confirm needs (0: none)
	Confirmed uint64      // every record below it is confirmed (Gate.Confirmed)
	Behind    uint64      // the owner's durable next isr_timeout ago: a member below it is lagging
	InSync    []string    // the recorded set
	Nodes     []Candidate // the assignment's followers and the recorded set's members
}

// Next returns the in-sync set the owner should record: followers that
// hold every confirmed record and are not lagging join; members that are
// dead, lagging or no longer followers leave, worst first, while the
// invariant allows. (The controller never removes members when it changes
// the followers: only the owner knows who holds what.)
func (p InSyncPlan) Next() []string {
	byID := make(map[string]Candidate, len(p.Nodes))
	for _, f := range p.Nodes {
		byID[f.ID] = f
	}
	var keep, lagging []Candidate
	for _, id := range p.InSync {
		f, ok := byID[id]
		switch {
		case !ok:
			lagging = append(lagging, Candidate{ID: id})
		case !f.Follower || !f.Live || !f.Reported && p.Behind > 0 || f.Next < p.Behind:
			lagging = append(lagging, f)
		default:
			keep = append(keep, f)
		}
	}
	for _, f := range p.Nodes {
		if f.Follower && f.Live && f.Reported && f.Next >= p.Confirmed && f.Next >= p.Behind && !slices.Contains(p.InSync, f.ID) {
			keep = append(keep, f)
		}
	}
	// Try to drop the worst lagging member first; one that cannot go
	// yet stays, and so does every better one after it.
	sort.SliceStable(lagging, func(i, j int) bool { return lagging[i].Next < lagging[j].Next })
	for i := range lagging {
		rest := append(slices.Clone(keep), lagging[i+1:]...)
		if holders(rest, p.Confirmed) < p.Acks {
			keep = append(keep, lagging[i:]...)
			break
		}
	}
	out := make([]string, len(keep))
	for i, f := range keep {
		out[i] = f.ID
	}
	slices.Sort(out)
	return out
}

// holders counts the members that hold every record below confirmed.
func holders(members []Candidate, confirmed uint64) int {
	n := 0
	for _, m := range members {
		if m.Reported && m.Next >= confirmed {
			n++
		}
	}
	return n
}
