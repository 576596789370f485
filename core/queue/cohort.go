package queue

import (
	"bytes"
	"cmp"
	"slices"
)

// How an exclusive consumer group's members share a queue's partitions
// (docs/semantics.md#s-91 … #s-93): one pure function, used by an owner
// planning its own cohorts and by the cluster's controller.

// CohortMember is a member of an exclusive consumer group as the plan
// sees it: its id, its consumer_target (0: none) and the partitions it
// may be given.
type CohortMember struct {
	ID     [16]byte // the member id (a UUID)
	Target uint32
	Parts  []uint32
}

// PlanCohort assigns each of parts (sorted) to one member that subscribed
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
func PlanCohort(parts []uint32, members []CohortMember, prev map[uint32][16]byte) map[uint32][16]byte {
	plan := make(map[uint32][16]byte, len(parts))
	if len(members) == 0 || len(parts) == 0 {
		return plan
	}
	slices.SortFunc(members, func(a, b CohortMember) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	n := len(members)
	held := make(map[[16]byte]int, n)
	for _, mid := range prev {
		held[mid]++
	}
	share := make(map[[16]byte]int, n)
	order := make([]int, n) // who gets the remainder first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(held[members[b].ID], held[members[a].ID]) })
	for rank, i := range order {
		s := len(parts) / n
		if rank < len(parts)%n {
			s++
		}
		if t := members[i].Target; t > 0 {
			s = min(s, int(t))
		}
		share[members[i].ID] = s
	}
	subscribed := func(i int, p uint32) bool { return slices.Contains(members[i].Parts, p) }
	index := make(map[[16]byte]int, n)
	for i, m := range members {
		index[m.ID] = i
	}
	count := make(map[[16]byte]int, n)
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
			a, b := members[i].ID, members[best].ID
			underA, underB := count[a] < share[a], count[b] < share[b]
			if underA != underB {
				return underA
			}
			return count[a] < count[b]
		}
		pref := int(p) % n
		if subscribed(pref, p) && count[members[pref].ID] < share[members[pref].ID] {
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
		plan[p] = members[best].ID
		count[members[best].ID]++
	}
	return plan
}
