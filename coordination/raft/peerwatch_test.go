package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core/testkit"
)

// raft's own lines about failing to reach one peer (a failed heartbeat,
// several a second while the peer is down) are details: the member
// reports the peer's reachability itself, so they go to debug. Other
// errors keep their level.
func TestRaftPeerFailureLinesAreDebug(t *testing.T) {
	sink := &logSink{}
	l := newHCLog(slog.New(sink), "raft")
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	srv := hraft.Server{ID: "n2", Address: "127.0.0.1:1"}
	l.Error("failed to heartbeat to", "peer", srv.Address, "backoff time", 10*time.Millisecond, "error", refused)
	l.Error("failed to appendEntries to", "peer", srv, "error", refused)
	l.Named("repl").With("k", "v").Error("failed to pipeline appendEntries", "peer", srv, "error", refused)
	l.Log(hclog.Error, "failed to start pipeline replication to", "peer", srv, "error", refused)
	l.Error("failed to send snapshot to", "peer", srv, "error", refused)
	l.Error("failed to install snapshot", "peer", srv.ID, "id", "1-2-3", "error", refused)
	l.Warn("failed to contact", "server-id", srv.ID, "time", time.Second)
	// Not about reaching a peer: unchanged.
	l.Error("failed to install snapshot", "error", errors.New("disk full"))
	l.Error("failed to take snapshot", "error", errors.New("disk full"))
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "x")

	want := []string{
		"DEBUG failed to heartbeat to",
		"DEBUG failed to appendEntries to",
		"DEBUG failed to pipeline appendEntries",
		"DEBUG failed to start pipeline replication to",
		"DEBUG failed to send snapshot to",
		"DEBUG failed to install snapshot peer=n2",
		"DEBUG failed to contact",
		"ERROR failed to install snapshot error=disk full",
		"ERROR failed to take snapshot",
		"WARN heartbeat timeout reached, starting election",
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.lines) != len(want) {
		t.Fatalf("got %d lines, want %d: %q", len(sink.lines), len(want), sink.lines)
	}
	for i, w := range want {
		if !strings.HasPrefix(sink.lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i, sink.lines[i], w)
		}
	}
}

// A peer that stops answering heartbeats gets one WARN line, a WARN
// reminder once a minute while it stays down (with the failures since the
// last line), and one INFO line when it answers again; nothing in between.
func TestPeerWatchLines(t *testing.T) {
	sink := &logSink{}
	addrs := map[hraft.ServerID]string{"n2": "127.0.0.1:7002", "n3": "127.0.0.1:7003"}
	w := newPeerWatch(slog.New(sink), "n1", time.Minute, func(id hraft.ServerID) string { return addrs[id] })
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	failed := func(id hraft.ServerID, d time.Duration) {
		w.handle(hraft.FailedHeartbeatObservation{PeerID: id, LastContact: t0.Add(-2 * time.Second)}, at(d))
	}
	resumed := func(id hraft.ServerID, d time.Duration) {
		w.handle(hraft.ResumedHeartbeatObservation{PeerID: id}, at(d))
	}

	// n2 goes down for 2m30s; raft fails a heartbeat every 500 ms.
	for d := time.Duration(0); d < 150*time.Second; d += 500 * time.Millisecond {
		failed("n2", d)
	}
	resumed("n2", 150*time.Second)
	resumed("n2", 151*time.Second) // not down: nothing
	resumed("n3", 152*time.Second) // never down: nothing

	// n2 again, much later: a new outage, a new first line.
	failed("n2", 10*time.Minute)
	resumed("n2", 10*time.Minute+time.Second)

	// n3 goes down; this member loses the leadership: the new leader
	// reports on n3 from now on, and this member's heartbeats stop.
	failed("n3", 11*time.Minute)
	w.handle(hraft.LeaderObservation{LeaderID: "n1"}, at(11*time.Minute+time.Second)) // still us: nothing
	w.handle(hraft.LeaderObservation{LeaderID: "n2"}, at(11*time.Minute+2*time.Second))
	// Leading again later, with n3 still down: a first line again.
	failed("n3", 12*time.Minute)
	// n3 is removed from the cluster while down: forgotten, no line.
	w.handle(hraft.PeerObservation{Removed: true, Peer: hraft.Server{ID: "n3"}}, at(12*time.Minute+time.Second))
	resumed("n3", 12*time.Minute+2*time.Second)

	// A resume that never arrived (raft stopped trying: a dropped
	// observation): a failure after more than a minute of silence starts
	// a new outage rather than continuing the old one.
	failed("n2", 20*time.Minute)
	failed("n2", 30*time.Minute)

	want := []string{
		"WARN raft: a peer is unreachable; raft keeps retrying peer=n2 addr=127.0.0.1:7002 last_contact=2s",
		"WARN raft: a peer is still unreachable peer=n2 addr=127.0.0.1:7002 down_for=1m0s failed_heartbeats=120",
		"WARN raft: a peer is still unreachable peer=n2 addr=127.0.0.1:7002 down_for=2m0s failed_heartbeats=120",
		"INFO raft: a peer is reachable again peer=n2 addr=127.0.0.1:7002 down_for=2m30s",
		"WARN raft: a peer is unreachable; raft keeps retrying peer=n2 addr=127.0.0.1:7002 last_contact=10m2s",
		"INFO raft: a peer is reachable again peer=n2 addr=127.0.0.1:7002 down_for=1s",
		"WARN raft: a peer is unreachable; raft keeps retrying peer=n3 addr=127.0.0.1:7003 last_contact=11m2s",
		"INFO raft: no longer the leader; the new leader reports on this unreachable peer peer=n3 addr=127.0.0.1:7003 down_for=2s",
		"WARN raft: a peer is unreachable; raft keeps retrying peer=n3 addr=127.0.0.1:7003 last_contact=12m2s",
		"WARN raft: a peer is unreachable; raft keeps retrying peer=n2 addr=127.0.0.1:7002 last_contact=20m2s",
		"WARN raft: a peer is unreachable; raft keeps retrying peer=n2 addr=127.0.0.1:7002 last_contact=30m2s",
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if got := strings.Join(sink.lines, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// In a real cluster: while a follower is down, the others log no ERROR
// about it (raft's failed heartbeats are at debug), one WARN says it is
// unreachable, and one INFO says it is back once it restarts.
func TestPeerDownIsOneWarningNotErrors(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, _ := c.leader()
	fi, _ := c.follower(li)
	peer := fmt.Sprintf("peer=n%d", fi+1)
	survivors := func(f func(s *logSink) bool) bool {
		for i, s := range c.logs {
			if i != fi && f(s) {
				return true
			}
		}
		return false
	}
	c.stop(fi)
	testkit.Eventually(t, waitLong, "a WARN line that the stopped peer is unreachable", func() bool {
		return survivors(func(s *logSink) bool { return s.contains("WARN raft: a peer is unreachable", peer) })
	})
	// Let raft fail a few heartbeats, so there was noise to keep out.
	testkit.Eventually(t, waitLong, "raft's failed heartbeats at debug", func() bool {
		return survivors(func(s *logSink) bool { return s.count("DEBUG failed to heartbeat to") >= 3 })
	})
	c.restart(fi)
	testkit.Eventually(t, waitLong, "an INFO line that the peer is back", func() bool {
		return survivors(func(s *logSink) bool { return s.contains("INFO raft: a peer is reachable again", peer) })
	})
	for i, s := range c.logs {
		if i == fi {
			continue
		}
		for _, bad := range []string{"ERROR failed to heartbeat", "ERROR failed to appendEntries", "ERROR failed to pipeline", "WARN failed to contact"} {
			if n := s.count(bad); n > 0 {
				t.Errorf("n%d logged %d lines %q", i+1, n, bad)
			}
		}
	}
}

// count is how many logged lines hold every part.
func (s *logSink) count(parts ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			n++
		}
	}
	return n
}

// A peer that accepts the connection but never answers the handshake (a
// hung process, a black hole) is down, not failing authentication: the
// dial says so at debug (the peer watch reports the peer), and "could
// not authenticate" stays for real refusals.
func TestUnansweredHandshakeIsNotAnAuthFailure(t *testing.T) {
	hung := reserve(t, 1)[0] // the kernel completes the connect; nobody reads
	defer hung.Close()
	sink := &logSink{}
	n := newNetwork(nil, Options{NodeID: "n1", Secret: []byte(testSecret), Logger: slog.New(sink)}, "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := n.dial(ctx, hung.Addr().String(), kindRaft, "n2"); err == nil {
		t.Fatal("a dial to a peer that never answers succeeded")
	}
	if sink.contains("could not authenticate") {
		t.Fatalf("an unanswered handshake logged as an authentication failure: %q", sink.lines)
	}
	if !sink.contains("DEBUG raft: a peer did not answer the connection handshake", "expected_node=n2") {
		t.Fatalf("no debug line about the unanswered handshake: %q", sink.lines)
	}
}
