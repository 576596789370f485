package main

import (
	"strings"
	"testing"
)

// raft reaches the admin API; a standalone broker has no raft group (404
// that says so). Usage errors are caught before.
func TestRaftStandalone(t *testing.T) {
	if r := ctl(t, "", "raft", "peers"); r.code != exitFail || !strings.Contains(r.stderr, "standalone broker has no raft group") {
		t.Fatalf("raft peers on a standalone broker: %+v", r)
	}
	for _, args := range [][]string{{"raft"}, {"raft", "remove-peer"}, {"raft", "demote", "n1", "--raft-addr", "x:1"}, {"raft", "elect"}} {
		if r := ctl(t, "", args...); r.code != exitUsage {
			t.Errorf("%v: %+v", args, r)
		}
	}
}
