package raft

import (
	"strings"
	"testing"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core/testkit"
)

// A group that lost its quorum for good comes back: two of three members
// are gone, the one left cannot write; recovered with itself as the only
// voter, it restarts, leads, and holds what was written before.
func TestRecoverLostQuorum(t *testing.T) {
	c := newCluster(t, 3, nil)
	_, leader := c.leader()
	v := mustSet(t, leader, "k", "before", 0)
	// Every member has the write before two of them go.
	testkit.Eventually(t, waitLong, "the write everywhere", func() bool {
		for i := range 3 {
			if m := c.member(i); m == nil || func() bool { _, idx := m.fsm.get("k"); return idx < v }() {
				return false
			}
		}
		return true
	})
	c.stop(1)
	c.stop(2)
	c.stop(0)
	if err := Recover(c.opts[0].DataDir, []Peer{{ID: c.opts[0].NodeID, Addr: c.opts[0].listener.Addr().String()}}, nil); err != nil {
		t.Fatal(err)
	}
	// Only the first member runs: its peers list still names the others,
	// which are gone; the recovered configuration decides.
	m := c.restart(0)
	testkit.Eventually(t, waitLong, "the recovered member leads", func() bool { return m.raft.State() == hraft.Leader })
	if kv := mustGet(t, m, "k"); string(kv.Value) != "before" {
		t.Fatalf("after recovery k = %q", kv.Value)
	}
	mustSet(t, m, "k", "after", v)

	if err := Recover(t.TempDir(), []Peer{{ID: "x", Addr: "127.0.0.1:1"}}, nil); err == nil || !strings.Contains(err.Error(), "no raft state") {
		t.Fatalf("recover of an empty directory: %v", err)
	}
	if err := Recover(c.opts[0].DataDir, []Peer{{ID: "x", Addr: "127.0.0.1:1"}}, nil); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("recover while the member runs: %v", err)
	}
}
