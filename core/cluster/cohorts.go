package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// Exclusive consumer groups across brokers (docs/semantics.md#s-98): each
// broker reports the members of the cohorts subscribed to partitions it
// owns, with those partitions, in its core.LabelCohorts label; the
// controller unions the reports, plans each cohort over every partition
// of its queue (queue.PlanCohort: a member is given only partitions it
// subscribed to), and records the plan with a generation that rises only
// when the plan changes, at cohorts/<topic>/<group>/<id>. Owners gate
// their partitions by the recorded plan: a partition whose planned member
// has no subscription there delivers to nobody, so no partition is ever
// delivered to two members. A new controller starts from the recorded
// plans, so an election reshuffles nothing (S-99).

// CohortRef names a cohort: its queue and its id (consumer_group).
type CohortRef struct {
	Topic, Group, ID string
}

// CohortMember is one member of a cohort as a broker reports it: its
// consumer_target (0: none) and the partitions it subscribed to there.
type CohortMember struct {
	Target uint32   `json:"t,omitempty"`
	Parts  []uint32 `json:"p"`
}

// CohortPlan is a cohort's recorded plan: partition → member id.
type CohortPlan struct {
	Generation uint64
	Assign     map[uint32][16]byte
	Version    uint64 // the record's coordination version
}

const prefixCohorts = "cohorts/"

func cohortKey(c CohortRef) string {
	return prefixCohorts + c.Topic + "/" + groupSeg(c.Group) + "/" + url.PathEscape(c.ID)
}

func parseCohortKey(key string) (CohortRef, bool) {
	rest, ok := strings.CutPrefix(key, prefixCohorts)
	if !ok {
		return CohortRef{}, false
	}
	f := strings.Split(rest, "/")
	if len(f) != 3 {
		return CohortRef{}, false
	}
	id, err := url.PathUnescape(f[2])
	if err != nil {
		return CohortRef{}, false
	}
	return CohortRef{Topic: f[0], Group: groupOf(f[1]), ID: id}, true
}

// cohortReport is the JSON form of one cohort in a LabelCohorts value.
type cohortReport struct {
	Topic   string                  `json:"topic"`
	Group   string                  `json:"group,omitempty"`
	ID      string                  `json:"id"`
	Members map[string]CohortMember `json:"members"` // by hex member id
}

// FormatCohortMembers renders a broker's cohort members as the
// LabelCohorts value ("" for none), in a stable order.
func FormatCohortMembers(m map[CohortRef]map[[16]byte]CohortMember) string {
	if len(m) == 0 {
		return ""
	}
	refs := slices.SortedFunc(maps.Keys(m), func(a, b CohortRef) int { return strings.Compare(cohortKey(a), cohortKey(b)) })
	out := make([]cohortReport, 0, len(refs))
	for _, ref := range refs {
		r := cohortReport{Topic: ref.Topic, Group: ref.Group, ID: ref.ID, Members: map[string]CohortMember{}}
		for id, mem := range m[ref] {
			slices.Sort(mem.Parts)
			r.Members[hex.EncodeToString(id[:])] = mem
		}
		out = append(out, r)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// ParseCohortMembers reads a LabelCohorts value; what it cannot read is
// skipped.
func ParseCohortMembers(v string) map[CohortRef]map[[16]byte]CohortMember {
	var in []cohortReport
	if v == "" || json.Unmarshal([]byte(v), &in) != nil {
		return nil
	}
	out := make(map[CohortRef]map[[16]byte]CohortMember, len(in))
	for _, r := range in {
		ref := CohortRef{Topic: r.Topic, Group: r.Group, ID: r.ID}
		for h, mem := range r.Members {
			var id [16]byte
			if b, err := hex.DecodeString(h); err == nil && len(b) == 16 {
				copy(id[:], b)
				if out[ref] == nil {
					out[ref] = make(map[[16]byte]CohortMember)
				}
				out[ref][id] = mem
			}
		}
	}
	return out
}

type planRecord struct {
	Generation uint64            `json:"gen"`
	Assign     map[string]string `json:"assign"` // partition → hex member id
}

func encodePlan(p CohortPlan) []byte {
	r := planRecord{Generation: p.Generation, Assign: make(map[string]string, len(p.Assign))}
	for n, id := range p.Assign {
		r.Assign[strconv.FormatUint(uint64(n), 10)] = hex.EncodeToString(id[:])
	}
	b, _ := json.Marshal(r)
	return b
}

func decodePlan(b []byte, version uint64) (*CohortPlan, bool) {
	var r planRecord
	if json.Unmarshal(b, &r) != nil {
		return nil, false
	}
	p := &CohortPlan{Generation: r.Generation, Assign: make(map[uint32][16]byte, len(r.Assign)), Version: version}
	for k, h := range r.Assign {
		n, err := strconv.ParseUint(k, 10, 32)
		raw, err2 := hex.DecodeString(h)
		if err != nil || err2 != nil || len(raw) != 16 {
			return nil, false
		}
		var id [16]byte
		copy(id[:], raw)
		p.Assign[uint32(n)] = id
	}
	return p, true
}

// Cohort returns the recorded plan of a cohort, if any.
func (s *Snapshot) Cohort(ref CohortRef) (*CohortPlan, bool) {
	p, ok := s.cohorts[ref]
	return p, ok
}

// Cohorts calls f for every recorded cohort plan.
func (s *Snapshot) Cohorts(f func(CohortRef, *CohortPlan)) {
	for ref, p := range s.cohorts {
		f(ref, p)
	}
}

// reportedCohorts unions the cohort members live brokers report.
func (s *Snapshot) reportedCohorts() map[CohortRef]map[[16]byte]CohortMember {
	var out map[CohortRef]map[[16]byte]CohortMember
	s.eachLiveLabel(core.LabelCohorts, func(_ core.NodeID, v string) {
		if out == nil {
			out = make(map[CohortRef]map[[16]byte]CohortMember)
		}
		for ref, members := range ParseCohortMembers(v) {
			if out[ref] == nil {
				out[ref] = make(map[[16]byte]CohortMember)
			}
			for mid, mem := range members {
				have := out[ref][mid]
				have.Target = max(have.Target, mem.Target)
				for _, p := range mem.Parts {
					if !slices.Contains(have.Parts, p) {
						have.Parts = append(have.Parts, p)
					}
				}
				out[ref][mid] = have
			}
		}
	})
	return out
}

// planCohorts is the controller's cohort pass: every cohort some broker
// reports gets a plan over all its queue's partitions, sticky from the
// recorded one; a plan that changes is recorded with the next generation
// (compare-and-set on the record's version, so a deposed controller's
// write fails). A cohort nobody reports any more keeps its record, which
// owners ignore without members; it is planned again on its next member.
func (c *Cluster) planCohorts(ctx context.Context, snap *Snapshot) {
	for ref, members := range snap.reportedCohorts() {
		q := snap.Queue(ref.Topic, ref.Group)
		if q == nil || len(members) == 0 {
			continue
		}
		parts := make([]uint32, len(q.Parts))
		for i := range parts {
			parts[i] = uint32(i)
		}
		in := make([]queue.CohortMember, 0, len(members))
		for id, m := range members {
			in = append(in, queue.CohortMember{ID: id, Target: m.Target, Parts: m.Parts})
		}
		var prev map[uint32][16]byte
		cur, ok := snap.cohorts[ref]
		if ok {
			prev = cur.Assign
		}
		next := queue.PlanCohort(parts, in, prev)
		if ok && maps.Equal(next, prev) {
			continue
		}
		plan := CohortPlan{Assign: next, Generation: 1}
		var version uint64
		if ok {
			plan.Generation, version = cur.Generation+1, cur.Version
		}
		if _, err := c.coord.CompareAndSet(ctx, cohortKey(ref), encodePlan(plan), version); err != nil {
			if !errors.Is(err, core.ErrVersionConflict) && ctx.Err() == nil {
				c.log.Warn("cohort plan write failed", "queue", ref.Topic, "group", ref.Group, "cohort", ref.ID, "err", err)
			}
			continue
		}
		c.log.Debug("cohort planned", "queue", ref.Topic, "group", ref.Group, "cohort", ref.ID, "generation", plan.Generation, "members", len(members))
	}
}
