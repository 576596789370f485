package raft

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/testkit"
)

// histogramCount reads the sample count of histogram name from g (0 when
// it has none).
func histogramCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

// Raft's commit, apply and leader-contact timings reach the member's
// registry through the go-metrics sink, and stop when the member closes.
func TestRaftTelemetry(t *testing.T) {
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()}
	c := newCluster(t, 3, func(i int, o *Options) { o.Registerer = regs[i] })
	li, m := c.leader()
	mustSet(t, m, "k", "v", 0)
	reg := regs[li]
	for _, name := range []string{"fibril_raft_commit_seconds", "fibril_raft_fsm_apply_seconds", "fibril_raft_leader_last_contact_seconds"} {
		testkit.Eventually(t, 10*time.Second, name+" observed", func() bool { return histogramCount(t, reg, name) > 0 })
	}

	// A closed member's histograms are detached: they no longer count.
	fi, _ := c.follower(li)
	closed := c.member(fi).metrics.telemetry
	c.stop(fi)
	before := commitCount(t, closed.commit)
	leaderBefore := histogramCount(t, reg, "fibril_raft_commit_seconds")
	mustSet(t, m, "k2", "v", 0) // raft observes the commit before it answers
	if histogramCount(t, reg, "fibril_raft_commit_seconds") == leaderBefore {
		t.Fatal("the leader did not count the next commit")
	}
	if after := commitCount(t, closed.commit); after != before {
		t.Errorf("a closed member's commit histogram went from %d to %d", before, after)
	}
}

// commitCount reads the sample count of a commit histogram.
func commitCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	r := prometheus.NewRegistry()
	r.MustRegister(h)
	return histogramCount(t, r, "fibril_raft_commit_seconds")
}
