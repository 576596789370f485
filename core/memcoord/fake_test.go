package memcoord_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
	"github.com/fibrilgo/fibril/core/memcoord"
)

const ms = time.Millisecond

func fakeStore(t *testing.T) (*memcoord.Store, *clock.Fake) {
	t.Helper()
	clock := clock.NewFake(time.Time{})
	return memcoord.NewStore(memcoord.Options{Clock: clock, MinTTL: 50 * ms, ElectionTTL: 300 * ms}), clock
}

// The store ends a lease exactly TTL after the last renew, deleting all of
// its keys in one write; the holder's ValidUntil is the same instant.
func TestDeterministicExpiry(t *testing.T) {
	s, clock := fakeStore(t)
	m := s.Member("a")
	ctx := context.Background()
	l, err := m.GrantLease(ctx, 100*ms)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"n/1", "n/2"} {
		if _, err := l.Put(ctx, k, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(60 * ms)
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(100 * ms); !l.ValidUntil().Equal(want) {
		t.Fatalf("ValidUntil %v, want %v", l.ValidUntil(), want)
	}
	before := s.Index()
	clock.Advance(99 * ms)
	if kvs, _, _ := m.List(ctx, "n/"); len(kvs) != 2 || closed(l.Done()) {
		t.Fatalf("lease ended early: %d keys left, done %v", len(kvs), closed(l.Done()))
	}
	clock.Advance(ms)
	if kvs, _, _ := m.List(ctx, "n/"); len(kvs) != 0 {
		t.Fatalf("%d keys left after expiry", len(kvs))
	}
	if got := s.Index(); got != before+1 {
		t.Fatalf("expiry took index %d -> %d, want one write", before, got)
	}
	if !closed(l.Done()) || !l.ValidUntil().IsZero() || s.Leases() != 0 {
		t.Fatal("holder not told of the expiry")
	}
	if err := l.Renew(ctx); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("Renew after expiry: %v", err)
	}
}

// Revoke deletes every bound key in one write.
func TestRevokeOneWrite(t *testing.T) {
	s, _ := fakeStore(t)
	m := s.Member("a")
	ctx := context.Background()
	l, _ := m.GrantLease(ctx, time.Second)
	l.Put(ctx, "n/1", nil, 0)
	l.Put(ctx, "n/2", nil, 0)
	before := s.Index()
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Index() != before+1 {
		t.Fatalf("revoke took index %d -> %d", before, s.Index())
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatalf("second Revoke: %v", err)
	}
}

// A paused member is cut off: its calls fail as unavailable, its renewals
// too, so its lease ends — the holder learns at ValidUntil, and the keys go
// at the same instant.
func TestPauseMember(t *testing.T) {
	s, clock := fakeStore(t)
	a, b := s.Member("a"), s.Member("b")
	ctx := context.Background()
	l, _ := a.GrantLease(ctx, 100*ms)
	l.Put(ctx, "n/a", []byte("x"), 0)
	_, idx, _ := a.List(ctx, "")

	watchErr := make(chan error, 1)
	go func() {
		_, _, err := a.Watch(ctx, "n/", idx)
		watchErr <- err
	}()
	s.PauseMember("a")
	if err := <-watchErr; !errors.Is(err, core.ErrCoordinationUnavailable) || !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("blocked Watch on pause: %v", err)
	}
	if _, err := a.Get(ctx, "n/a"); !errors.Is(err, core.ErrCoordinationUnavailable) {
		t.Fatalf("Get while paused: %v", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, core.ErrCoordinationUnavailable) {
		t.Fatalf("Renew while paused: %v", err)
	}
	clock.Advance(99 * ms)
	if closed(l.Done()) {
		t.Fatal("Done closed before ValidUntil")
	}
	if kv, _ := b.Get(ctx, "n/a"); kv.Version == 0 {
		t.Fatal("key gone before ValidUntil")
	}
	clock.Advance(ms)
	if !closed(l.Done()) {
		t.Fatal("Done not closed at ValidUntil")
	}
	if kv, _ := b.Get(ctx, "n/a"); kv.Version != 0 {
		t.Fatal("key of an expired lease still there")
	}
	s.ResumeMember("a")
	if _, err := a.Get(ctx, "n/a"); err != nil {
		t.Fatalf("Get after resume: %v", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("Renew after resume: %v", err)
	}
}

// The election keepalive is driven by the clock: one long Advance keeps a
// healthy leader in office.
func TestKeepaliveAcrossLongAdvance(t *testing.T) {
	s, clock := fakeStore(t)
	a := s.Member("a")
	defer a.Close()
	l, err := a.Campaign(context.Background(), "ctl")
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if closed(l.Lost()) {
		t.Fatal("a healthy leader lost its term")
	}
	if err := l.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closed(l.Lost()) || s.Leases() != 0 {
		t.Fatal("Resign left the term or its lease behind")
	}
}

// Ownership safety: when the leader's coordinator dies (pause), the leader
// learns it lost before any rival can be elected.
func TestPausedLeaderStepsDownFirst(t *testing.T) {
	s, clock := fakeStore(t)
	a, b := s.Member("a"), s.Member("b")
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	first, err := a.Campaign(ctx, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   core.Leadership
		err error
		// lostFirst: whether a's Lost was closed when b's Campaign
		// returned.
		lostFirst bool
	}
	out := make(chan res, 1)
	go func() {
		l, err := b.Campaign(ctx, "ctl")
		out <- res{l, err, closed(first.Lost())}
	}()
	for range 50 {
		clock.Advance(20 * ms)
	}
	select {
	case r := <-out:
		t.Fatalf("rival elected under a live leader: %+v", r)
	default:
	}
	s.PauseMember("a")
	for range 20 {
		clock.Advance(20 * ms)
	}
	if !closed(first.Lost()) {
		t.Fatal("paused leader still believes it leads after ElectionTTL")
	}
	var r res
	select {
	case r = <-out:
	case <-time.After(10 * time.Second):
		t.Fatal("rival not elected after the leader's lease expired")
	}
	if r.err != nil || !r.lostFirst || r.l.Term() <= first.Term() {
		t.Fatalf("rival: err %v, old term lost first %v, term %d vs %d", r.err, r.lostFirst, r.l.Term(), first.Term())
	}
}

// Close ends leaderships at once but leaves leases to expire.
func TestCloseKeepsLeaseEndsLeadership(t *testing.T) {
	s, clock := fakeStore(t)
	a := s.Member("a")
	ctx := context.Background()
	l, _ := a.GrantLease(ctx, 100*ms)
	l.Put(ctx, "n/a", nil, 0)
	lead, _ := a.Campaign(ctx, "ctl")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(a.Close(), core.ErrClosed) {
		t.Fatal("second Close should report ErrClosed")
	}
	if !closed(lead.Lost()) {
		t.Fatal("Close did not end the leadership")
	}
	if s.Leases() != 2 || closed(l.Done()) {
		t.Fatal("Close revoked a lease")
	}
	clock.Advance(300 * ms)
	if s.Leases() != 0 || !closed(l.Done()) {
		t.Fatalf("%d leases left after their TTL", s.Leases())
	}
	if kv, _ := s.Member("b").Get(ctx, "n/a"); kv.Version != 0 {
		t.Fatal("key outlived its lease")
	}
}

// A restarted member handle takes over a live lease by id.
func TestAttachLease(t *testing.T) {
	s, clock := fakeStore(t)
	ctx := context.Background()
	a := s.Member("a")
	l, _ := a.GrantLease(ctx, 100*ms)
	l.Put(ctx, "n/a", nil, 0)
	a.Close() // the plugin dies; the lease lives on
	clock.Advance(80 * ms)

	var att core.LeaseAttacher = s.Member("a")
	l2, err := att.AttachLease(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if l2.ID() != l.ID() || l2.TTL() != l.TTL() || !l2.ValidUntil().Equal(clock.Now().Add(100*ms)) {
		t.Fatalf("attached lease %s ttl %v valid until %v", l2.ID(), l2.TTL(), l2.ValidUntil())
	}
	clock.Advance(80 * ms) // past the first deadline: the attach renewed it
	if err := l2.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if kv, _ := s.Member("b").Get(ctx, "n/a"); kv.Lease != l.ID() {
		t.Fatal("attached lease lost its key")
	}
	if _, err := att.AttachLease(ctx, "no-such-lease"); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("attach unknown: %v", err)
	}
	clock.Advance(100 * ms)
	if _, err := att.AttachLease(ctx, l.ID()); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("attach expired: %v", err)
	}
	if !closed(l.Done()) || !closed(l2.Done()) {
		t.Fatal("holders not told of the expiry")
	}
}

func TestBadRequests(t *testing.T) {
	s, _ := fakeStore(t)
	m := s.Member("a")
	ctx := context.Background()
	if _, err := m.Campaign(ctx, ""); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("Campaign(\"\"): %v", err)
	}
	if _, _, err := m.List(ctx, "/x"); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("List(\"/x\"): %v", err)
	}
	l, _ := m.GrantLease(ctx, 0)
	if l.TTL() != 50*ms {
		t.Fatalf("TTL %v, want MinTTL", l.TTL())
	}
	if _, err := l.Put(ctx, "/x", nil, 0); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("Lease.Put(\"/x\"): %v", err)
	}
}

// Nothing keeps running after the members close: blocked calls return and
// the package has no goroutines of its own. The test runs in a synctest
// bubble, which makes both checks exact instead of timed: Wait returns once
// the three calls are really blocked (no sleep that hopes so), and Test
// returns only when every goroutine started in the bubble has ended — one
// left blocked is reported as a deadlock.
func TestNoGoroutineLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memcoord.NewStore(memcoord.Options{})
		a, b := s.Member("a"), s.Member("b")
		ctx := context.Background()
		lead, err := a.Campaign(ctx, "ctl")
		if err != nil {
			t.Fatal(err)
		}
		l, _ := b.GrantLease(ctx, time.Second)
		l.Put(ctx, "n/b", nil, 0)
		done := make(chan struct{}, 3)
		go func() { b.Campaign(ctx, "ctl"); done <- struct{}{} }()
		go func() { b.Watch(ctx, "n/", s.Index()); done <- struct{}{} }()
		go func() { a.Watch(ctx, "n/", s.Index()); done <- struct{}{} }()
		synctest.Wait()
		a.Close()
		b.Close()
		for range 3 {
			<-done
		}
		if !closed(lead.Lost()) {
			t.Fatal("leadership survived Close")
		}
	})
}
