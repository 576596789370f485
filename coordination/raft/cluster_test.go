package raft

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/tlsconf"
)

func TestFollowerForwarding(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, _ := c.leader()
	fi, f := c.follower(li)
	ctx := ctxT(t)

	v := mustSet(t, f, "fwd/k", "from a follower", 0)
	if got := metricValue(t, f.metrics.forwarded.WithLabelValues(rpcApply)); got < 1 {
		t.Fatalf("the follower's write was not forwarded (counter %v)", got)
	}
	// Every member reads it linearizably, followers through the leader.
	for i := range 3 {
		if kv := mustGet(t, c.member(i), "fwd/k"); kv.Version != v || string(kv.Value) != "from a follower" {
			t.Fatalf("member %d reads %+v", i, kv)
		}
	}
	// Leases granted, renewed and bound through a follower.
	l, err := f.GrantLease(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, "fwd/leased", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Watch on the other follower is served from its replica.
	oi := 3 - li - fi
	kvs, idx, err := c.member(oi).Watch(ctx, "fwd/", 0)
	if err != nil {
		t.Fatal(err)
	}
	for idx < v || len(kvs) < 1 {
		if kvs, idx, err = c.member(oi).Watch(ctx, "fwd/", idx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLeaderFailover(t *testing.T) {
	c := newCluster(t, 3, func(_ int, o *Options) { o.LivenessTTL = 4 * time.Second })
	li, _ := c.leader()
	fi, f := c.follower(li)
	ctx := ctxT(t)

	// A renewed lease and an abandoned one, both granted before the crash.
	kept, err := f.GrantLease(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Put(ctx, "nodes/kept", []byte("alive"), 0); err != nil {
		t.Fatal(err)
	}
	dropped, err := f.GrantLease(ctx, f.MinTTL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dropped.Put(ctx, "nodes/dropped", []byte("dead"), 0); err != nil {
		t.Fatal(err)
	}
	before := mustSet(t, f, "data/before", "1", 0)

	// The holder renews in the background, as a broker's heartbeat would;
	// a renewal that fails while there is no leader is retried.
	renewCtx, stopRenew := context.WithCancel(ctx)
	var renewWG sync.WaitGroup
	renewWG.Add(1)
	go func() {
		defer renewWG.Done()
		for renewCtx.Err() == nil {
			rctx, cancel := context.WithTimeout(renewCtx, 300*time.Millisecond)
			err := kept.Renew(rctx)
			cancel()
			if errors.Is(err, core.ErrLeaseLost) {
				t.Errorf("kept lease lost: %v", err)
				return
			}
			select {
			case <-renewCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { stopRenew(); renewWG.Wait() }()

	c.stop(li)
	nli, nl := c.leader()
	if nli == li {
		t.Fatal("the crashed member still leads")
	}
	after := mustSet(t, f, "data/after", "2", 0)
	if after <= before {
		t.Fatalf("versions went backwards across the failover: %d then %d", before, after)
	}
	if kv := mustGet(t, nl, "data/before"); kv.Version != before {
		t.Fatalf("write lost in failover: %+v", kv)
	}
	// The abandoned lease expires under the new leader...
	testkit.Eventually(t, waitLong, "the abandoned lease's key to expire", func() bool { return mustGet(t, nl, "nodes/dropped").Version == 0 })
	// ...while the renewed one has survived and keeps surviving for more
	// than its TTL.
	hold := time.Now().Add(kept.TTL() + 500*time.Millisecond)
	for time.Now().Before(hold) {
		if kv := mustGet(t, f, "nodes/kept"); kv.Version == 0 {
			t.Fatal("a renewed lease's key expired across the leader change")
		}
		select {
		case <-kept.Done():
			t.Fatal("the renewed lease was lost")
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = fi
}

// A lease is never expired by a new leader before the ValidUntil its
// holder computed from a renewal answered by the old leader.
func TestNewLeaderHonoursValidUntil(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, _ := c.leader()
	_, f := c.follower(li)
	ctx := ctxT(t)
	l, err := f.GrantLease(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, "nodes/x", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	validUntil := l.ValidUntil()
	c.stop(li)
	_, nl := c.leader()
	// Until ValidUntil the key must be there; no renewals from here on.
	for time.Now().Before(validUntil.Add(-50 * time.Millisecond)) {
		kv, err := nl.Get(ctx, "nodes/x")
		if err != nil {
			t.Fatal(err)
		}
		if kv.Version == 0 && time.Now().Before(validUntil) {
			t.Fatalf("lease expired %s before its ValidUntil", time.Until(validUntil))
		}
		time.Sleep(50 * time.Millisecond)
	}
	testkit.Eventually(t, waitLong, "expiry after ValidUntil", func() bool { return mustGet(t, nl, "nodes/x").Version == 0 })
}

func TestNoLeaderIsUnavailable(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, _ := c.leader()
	fi, f := c.follower(li)
	c.stop(li)
	c.stop(3 - li - fi)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := f.CompareAndSet(ctx, "k", []byte("v"), 0)
	if !errors.Is(err, core.ErrCoordinationUnavailable) {
		t.Fatalf("write without quorum: %v", err)
	}
	if core.Code(err) != 503 {
		t.Fatalf("code %d", core.Code(err))
	}
	if _, err := f.Get(ctx, "k"); !errors.Is(err, core.ErrCoordinationUnavailable) {
		t.Fatalf("read without quorum: %v", err)
	}
}

func TestWrongSecretCannotJoin(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, l := c.leader()
	lns := reserve(t, 1)
	peers := append(slices.Clone(c.opts[0].Peers), Peer{ID: "n4", Addr: lns[0].Addr().String()})
	o, sink := baseOptions(t, "n4", lns[0], peers, 0)
	o.Secret = []byte("another secret")
	intruder, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.crash()

	testkit.Eventually(t, waitLong, "the refusal to be logged", func() bool {
		return c.logs[li].contains("refused a connection", "claims_node=n4", "cluster secret") ||
			c.logs[0].contains("refused a connection", "claims_node=n4", "cluster secret") ||
			c.logs[1].contains("refused a connection", "claims_node=n4", "cluster secret") ||
			c.logs[2].contains("refused a connection", "claims_node=n4", "cluster secret")
	})
	testkit.Eventually(t, waitLong, "the intruder to log why", func() bool { return sink.contains("could not authenticate", "cluster secret mismatch") })
	for _, s := range servers(l) {
		if s.ID == "n4" {
			t.Fatal("a member with the wrong secret was added")
		}
	}
	if intruder.inConfig() {
		t.Fatal("the intruder thinks it joined")
	}
}

func TestStaleMemberReplacedOnRejoin(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, _ := c.leader()
	// Rebuild a follower: same id, data lost, new address.
	si, _ := c.follower(li)
	c.stop(si)
	if err := os.RemoveAll(c.opts[si].DataDir); err != nil {
		t.Fatal(err)
	}
	lns := reserve(t, 1)
	o := c.opts[si]
	o.listener = lns[0]
	o.Listen = lns[0].Addr().String()
	m, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.members[si] = m
	c.mu.Unlock()

	_, l := c.leader()
	testkit.Eventually(t, waitLong, "the rebuilt member to be in the configuration at its new address", func() bool {
		ss := servers(l)
		return len(ss) == 3 && slices.ContainsFunc(ss, func(s hraft.Server) bool {
			return string(s.ID) == o.NodeID && string(s.Address) == o.Listen && s.Suffrage == hraft.Voter
		})
	})
	testkit.Eventually(t, waitLong, "the rebuilt member to see itself", m.inConfig)
	v := mustSet(t, l, "after/rejoin", "x", 0)
	kvs, idx, err := m.Watch(ctxT(t), "after/", 0)
	for err == nil && idx < v {
		kvs, idx, err = m.Watch(ctxT(t), "after/", idx)
	}
	if err != nil || len(kvs) != 1 {
		t.Fatalf("the rebuilt member does not replicate: %v %+v", err, kvs)
	}
	if !c.logs[0].contains("replacing a stale member") && !c.logs[1].contains("replacing a stale member") && !c.logs[2].contains("replacing a stale member") {
		t.Error("no log line about the replacement")
	}
}

func TestRestartKeepsState(t *testing.T) {
	c := newCluster(t, 3, func(_ int, o *Options) { o.SnapshotThreshold = 16 })
	_, l := c.leader()
	ctx := ctxT(t)
	versions := map[string]uint64{}
	for _, k := range []string{"s/a", "s/b", "s/c"} {
		versions[k] = mustSet(t, l, k, "snap-"+k, 0)
	}
	lease, err := l.GrantLease(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if versions["s/leased"], err = lease.Put(ctx, "s/leased", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	// Snapshot every member, then write more: the restart must combine
	// the snapshot with the log after it.
	for i := range 3 {
		if err := c.member(i).raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
	}
	versions["s/after"] = mustSet(t, l, "s/after", "log", 0)
	delete(versions, "s/b")
	if err := l.CompareAndDelete(ctx, "s/b", core.AnyVersion); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		c.stop(i)
	}
	for i := range 3 {
		c.restart(i)
	}
	_, nl := c.leader()
	kvs, _, err := nl.List(ctx, "s/")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, kv := range kvs {
		got[kv.Key] = kv.Version
	}
	if len(got) != len(versions) {
		t.Fatalf("after restart: %v, want %v", got, versions)
	}
	for k, v := range versions {
		if got[k] != v {
			t.Fatalf("after restart %s is at %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if kv := mustGet(t, nl, "s/leased"); kv.Lease != lease.ID() {
		t.Fatalf("lease binding lost: %+v", kv)
	}
	entries, _ := filepath.Glob(filepath.Join(c.opts[0].DataDir, "snapshots", "*"))
	if len(entries) == 0 {
		t.Fatal("no snapshot on disk")
	}
}

func TestTLSAutoClusterCA(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "cluster-ca.pem")
	c := newCluster(t, 3, func(i int, o *Options) {
		p, err := tlsconf.LoadPeer(tlsconf.PeerOptions{NodeID: o.NodeID, ClusterCAPath: caPath, Dir: filepath.Join(o.DataDir, "tls")})
		if err != nil {
			t.Fatal(err)
		}
		o.TLS = p
	})
	li, _ := c.leader()
	_, f := c.follower(li)
	v := mustSet(t, f, "tls/k", "over mTLS", 0)
	if kv := mustGet(t, f, "tls/k"); kv.Version != v {
		t.Fatalf("read %+v", kv)
	}
	// A member without TLS cannot talk to them.
	lns := reserve(t, 1)
	peers := append(slices.Clone(c.opts[0].Peers), Peer{ID: "n4", Addr: lns[0].Addr().String()})
	o, sink := baseOptions(t, "n4", lns[0], peers, 0)
	plain, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.crash()
	testkit.Eventually(t, waitLong, "the plaintext member to fail", func() bool { return sink.contains("could not authenticate") })
	if plain.inConfig() {
		t.Fatal("a plaintext member joined a TLS cluster")
	}
}

func TestNonVoterJoins(t *testing.T) {
	c := newCluster(t, 3, nil)
	lns := reserve(t, 1)
	o, _ := baseOptions(t, "n4", lns[0], c.opts[0].Peers, 0)
	o.NonVoter = true
	m, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.crash()
	testkit.Eventually(t, waitLong, "the non-voter to join", m.inConfig)
	_, l := c.leader()
	i := slices.IndexFunc(servers(l), func(s hraft.Server) bool { return s.ID == "n4" })
	if i < 0 || servers(l)[i].Suffrage != hraft.Nonvoter {
		t.Fatalf("configuration: %+v", servers(l))
	}
	// It serves reads and writes by forwarding.
	v := mustSet(t, m, "nv/k", "x", 0)
	if kv := mustGet(t, m, "nv/k"); kv.Version != v {
		t.Fatalf("non-voter read %+v", kv)
	}
}

func TestGracefulCloseHandsOverLeadership(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, l := c.leader()
	c.mu.Lock()
	c.members[li] = nil
	c.mu.Unlock()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !c.logs[li].contains("handed leadership over") {
		t.Fatal("no leadership transfer on Close")
	}
	nli, _ := c.leader()
	if nli == li {
		t.Fatal("closed member leads")
	}
}
