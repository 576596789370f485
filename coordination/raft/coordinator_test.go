package raft

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
)

func TestKeyValueSingleNode(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	ctx := ctxT(t)

	if kv := mustGet(t, m, "a/b"); kv.Version != 0 || kv.Key != "a/b" {
		t.Fatalf("missing key: %+v", kv)
	}
	v1 := mustSet(t, m, "a/b", "one", 0)
	if _, err := m.CompareAndSet(ctx, "a/b", []byte("x"), 0); !errors.Is(err, core.ErrVersionConflict) {
		t.Fatalf("create over an existing key: %v", err)
	}
	v2 := mustSet(t, m, "a/b", "two", v1)
	if v2 <= v1 {
		t.Fatalf("versions do not grow: %d then %d", v1, v2)
	}
	v3 := mustSet(t, m, "a/c", "three", core.AnyVersion)
	mustSet(t, m, "b", "other", 0)
	kvs, idx, err := m.List(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 2 || kvs[0].Key != "a/b" || string(kvs[0].Value) != "two" || kvs[1].Key != "a/c" || kvs[1].Version != v3 {
		t.Fatalf("list: %+v", kvs)
	}
	if idx < v3 {
		t.Fatalf("list index %d below the last write %d", idx, v3)
	}
	if err := m.CompareAndDelete(ctx, "a/b", v1); !errors.Is(err, core.ErrVersionConflict) {
		t.Fatalf("delete at a stale version: %v", err)
	}
	if err := m.CompareAndDelete(ctx, "a/b", v2); err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{0, core.AnyVersion} {
		if err := m.CompareAndDelete(ctx, "absent", v); err != nil {
			t.Fatalf("delete absent with %d: %v", v, err)
		}
	}
	if err := m.CompareAndDelete(ctx, "absent", 7); !errors.Is(err, core.ErrVersionConflict) {
		t.Fatalf("delete absent at version 7: %v", err)
	}
	for _, bad := range []string{"", "/a", "\xff"} {
		if _, err := m.CompareAndSet(ctx, bad, nil, 0); !errors.Is(err, core.ErrBadRequest) {
			t.Errorf("key %q accepted: %v", bad, err)
		}
	}
	if _, err := m.CompareAndSet(ctx, "_elections/x", nil, 0); !errors.Is(err, core.ErrBadRequest) {
		t.Errorf("reserved key accepted: %v", err)
	}
}

func TestWatchBlocksUntilIndexPasses(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	v := mustSet(t, m, "w/a", "1", 0)

	// Already past: at once.
	kvs, idx, err := m.Watch(ctxT(t), "w/", v-1)
	if err != nil || idx < v || len(kvs) != 1 {
		t.Fatalf("watch behind: %v %d %+v", err, idx, kvs)
	}
	// Not past: blocks until a write.
	got := make(chan uint64, 1)
	go func() {
		_, idx, err := m.Watch(ctxT(t), "w/", idx)
		if err != nil {
			t.Error(err)
		}
		got <- idx
	}()
	select {
	case i := <-got:
		t.Fatalf("watch returned %d without a write", i)
	case <-time.After(50 * time.Millisecond):
	}
	v2 := mustSet(t, m, "w/b", "2", 0)
	select {
	case i := <-got:
		if i < v2 {
			t.Fatalf("watch returned index %d before the write at %d", i, v2)
		}
	case <-time.After(waitLong):
		t.Fatal("watch did not wake")
	}
	// A cancelled context ends the watch.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := m.Watch(ctx, "w/", v2+1000); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled watch: %v", err)
	}
}

func TestLeasesSingleNode(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	ctx := ctxT(t)

	if got, want := m.MinTTL(), 2*testRaftTimeout; got != want {
		t.Fatalf("MinTTL %s, want %s", got, want)
	}
	l, err := m.GrantLease(ctx, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != m.MinTTL() {
		t.Fatalf("TTL %s not raised to MinTTL %s", l.TTL(), m.MinTTL())
	}
	v, err := l.Put(ctx, "nodes/n1", []byte("up"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if kv := mustGet(t, m, "nodes/n1"); kv.Lease != l.ID() || kv.Version != v {
		t.Fatalf("bound key: %+v", kv)
	}
	before := time.Now()
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if vu := l.ValidUntil(); vu.Before(before.Add(l.TTL())) {
		t.Fatalf("ValidUntil %s earlier than renew time + TTL", vu)
	}
	// CompareAndSet unbinds the key from the lease.
	mustSet(t, m, "nodes/n1", "mine now", v)
	if kv := mustGet(t, m, "nodes/n1"); kv.Lease != "" {
		t.Fatalf("CAS kept the lease: %+v", kv)
	}
	if _, err := l.Put(ctx, "nodes/n1b", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open after Revoke")
	}
	if kv := mustGet(t, m, "nodes/n1b"); kv.Version != 0 {
		t.Fatalf("revoked lease's key survived: %+v", kv)
	}
	if kv := mustGet(t, m, "nodes/n1"); kv.Version == 0 {
		t.Fatal("an unbound key was deleted with the lease")
	}
	if err := l.Renew(ctx); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("renew after revoke: %v", err)
	}
	if _, err := l.Put(ctx, "x", nil, 0); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("put after revoke: %v", err)
	}
}

func TestLeaseExpiresWhenNotRenewed(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	ctx := ctxT(t)
	l, err := m.GrantLease(ctx, m.MinTTL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, "nodes/gone", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(waitLong):
		t.Fatal("Done not closed after ValidUntil passed")
	}
	if !l.ValidUntil().IsZero() {
		t.Fatal("ValidUntil not zero once lost")
	}
	testkit.Eventually(t, waitLong, "the unrenewed lease's key to go", func() bool { return mustGet(t, m, "nodes/gone").Version == 0 })
	if err := l.Renew(ctx); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("renew of an expired lease: %v", err)
	}
	// The counter moves just after the expiry is applied.
	testkit.Eventually(t, waitLong, "the expirations metric", func() bool { return metricValue(t, m.metrics.expirations) >= 1 })
}

func TestIdleLeaseRenewalWritesNothing(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	ctx := ctxT(t)
	l, err := m.GrantLease(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	last := m.raft.LastIndex()
	for range 5 {
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.raft.LastIndex(); got != last {
		t.Fatalf("renewals appended to the raft log: last index %d → %d", last, got)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, 1, func(_ int, o *Options) { o.Registerer = reg })
	_, m := c.leader()
	mustSet(t, m, "k", "v", 0)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"fibril_raft_is_leader", "fibril_raft_applied_index", "fibril_raft_lease_expirations_total", "fibril_raft_peers"} {
		if !slices.Contains(names, want) {
			t.Errorf("metric %s missing from %v", want, names)
		}
	}
	if got := metricValue(t, m.metrics.isLeader); got != 1 {
		t.Errorf("is_leader %v on the only member", got)
	}
	if len(m.Collectors()) != 8 {
		t.Errorf("Collectors: %d", len(m.Collectors()))
	}
	// Close unregisters, so the same registry can take a reopened member.
	c.stop(0)
	if fams, _ := reg.Gather(); len(fams) != 0 {
		t.Errorf("series left after Close: %d families", len(fams))
	}
}

func TestClosedMember(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := m.Get(ctx, "k"); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Get: %v", err)
	}
	if _, _, err := m.Watch(ctx, "", 0); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Watch: %v", err)
	}
	if _, err := m.CompareAndSet(ctx, "k", nil, 0); !errors.Is(err, core.ErrClosed) {
		t.Errorf("CAS: %v", err)
	}
	if _, err := m.Campaign(ctx, "e"); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Campaign: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// metricValue reads a gauge or counter.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Counter != nil:
		return d.Counter.GetValue()
	}
	t.Fatalf("not a gauge or counter: %v", &d)
	return 0
}

func TestAttachLease(t *testing.T) {
	c := newCluster(t, 2, nil)
	c.leader()
	a, b := c.member(0), c.member(1)
	ctx := ctxT(t)
	l, err := a.GrantLease(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	att, err := b.AttachLease(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if att.ID() != l.ID() || att.TTL() != l.TTL() || att.ValidUntil().Before(before.Add(l.TTL())) {
		t.Fatalf("attached %s ttl %s until %s", att.ID(), att.TTL(), att.ValidUntil())
	}
	if _, err := att.Put(ctx, "att/k", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if kv := mustGet(t, a, "att/k"); kv.Lease != l.ID() {
		t.Fatalf("key bound to %q", kv.Lease)
	}
	if err := att.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AttachLease(ctx, l.ID()); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("attach a revoked lease: %v", err)
	}
	if _, err := b.AttachLease(ctx, "l999999"); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("attach an unknown lease: %v", err)
	}
}
