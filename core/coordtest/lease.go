package coordtest

import (
	"context"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

func (s *suite) leaseTests() []testCase {
	return []testCase{
		{"LeaseMinTTL", s.testLeaseMinTTL},
		{"LeasePut", s.testLeasePut},
		{"LeaseRenew", s.testLeaseRenew},
		{"LeaseExpiry", s.testLeaseExpiry},
		{"LeaseRevoke", s.testLeaseRevoke},
		{"LeasesIndependent", s.testLeasesIndependent},
		{"CompareAndSetUnbindsLease", s.testCASUnbinds},
	}
}

func grant(t *testing.T, c core.Coordinator, ttl time.Duration) core.Lease {
	t.Helper()
	before := time.Now()
	l, err := c.GrantLease(bounded(t, waitTimeout), ttl)
	if err != nil {
		t.Fatalf("GrantLease(%v): %v", ttl, err)
	}
	after := time.Now()
	if l.ID() == "" {
		t.Fatal("lease has an empty ID")
	}
	if l.TTL() < ttl || l.TTL() < c.MinTTL() {
		t.Fatalf("lease TTL %v below the asked %v or MinTTL %v", l.TTL(), ttl, c.MinTTL())
	}
	// The grant counts as the first renew: ValidUntil is the call time
	// plus the TTL.
	if vu := l.ValidUntil(); vu.Before(before.Add(l.TTL())) || vu.After(after.Add(l.TTL())) {
		t.Fatalf("fresh lease ValidUntil %v not within [%v, %v] + TTL", vu, before, after)
	}
	return l
}

func leasePut(t *testing.T, l core.Lease, key, value string, version uint64) uint64 {
	t.Helper()
	v, err := l.Put(bounded(t, waitTimeout), key, []byte(value), version)
	if err != nil {
		t.Fatalf("Lease.Put(%q): %v", key, err)
	}
	return v
}

// wantLost checks every sign of a lease known to have ended.
func wantLost(t *testing.T, l core.Lease) {
	t.Helper()
	if !closedWithin(l.Done(), waitTimeout) {
		t.Fatal("Done not closed for an ended lease")
	}
	if vu := l.ValidUntil(); !vu.IsZero() {
		t.Fatalf("ended lease has ValidUntil %v, want zero", vu)
	}
	wantErr(t, "Renew of an ended lease", l.Renew(bounded(t, waitTimeout)), core.ErrLeaseLost)
	_, err := l.Put(bounded(t, waitTimeout), "ct/late", []byte("x"), core.AnyVersion)
	wantErr(t, "Put on an ended lease", err, core.ErrLeaseLost)
}

// A TTL below the floor is raised to MinTTL.
func (s *suite) testLeaseMinTTL(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	if c.MinTTL() <= 0 {
		t.Fatalf("MinTTL = %v", c.MinTTL())
	}
	l := grant(t, c, time.Nanosecond) // grant checks TTL >= MinTTL
	l2 := grant(t, c, testTTL(c))
	if l.ID() == l2.ID() {
		t.Fatalf("two leases share the id %q", l.ID())
	}
	for _, x := range []core.Lease{l, l2} {
		if err := x.Revoke(bounded(t, waitTimeout)); err != nil {
			t.Fatal(err)
		}
	}
}

// A lease-bound key carries the lease id, obeys the CAS rule, and is seen
// bound from every member.
func (s *suite) testLeasePut(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	l := grant(t, a, testTTL(a))
	defer l.Revoke(context.Background())
	v := leasePut(t, l, "ct/node", "up", 0)
	for _, c := range []core.Coordinator{a, b} {
		kv := mustGet(t, c, "ct/node")
		wantKV(t, kv, "up", v)
		if kv.Lease != l.ID() {
			t.Fatalf("key bound to %q, want %q", kv.Lease, l.ID())
		}
	}
	_, err := l.Put(bounded(t, waitTimeout), "ct/node", []byte("again"), 0)
	wantErr(t, "Lease.Put with version 0 on a present key", err, core.ErrVersionConflict)
	v2 := leasePut(t, l, "ct/node", "up2", v)
	if v2 <= v {
		t.Fatalf("version %d not above %d", v2, v)
	}
	kvs, _, err := b.List(bounded(t, waitTimeout), "ct/")
	if err != nil {
		t.Fatal(err)
	}
	if kv, ok := find(kvs, "ct/node"); !ok || kv.Lease != l.ID() || kv.Version != v2 {
		t.Fatalf("List shows %+v, want version %d bound to %q", kv, v2, l.ID())
	}
}

// Renew moves ValidUntil to the call time plus the TTL, and renewing more
// often than the TTL keeps the bound key alive well past the first TTL.
func (s *suite) testLeaseRenew(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	ttl := max(c.MinTTL(), 300*time.Millisecond)
	l := grant(t, c, ttl)
	defer l.Revoke(context.Background())
	v := leasePut(t, l, "ct/node", "up", 0)
	first := l.ValidUntil()
	end := time.Now().Add(2 * l.TTL())
	for time.Now().Before(end) {
		time.Sleep(l.TTL() / 6)
		prev := l.ValidUntil()
		before := time.Now()
		err := l.Renew(bounded(t, waitTimeout))
		after := time.Now()
		if err != nil {
			if before.After(prev) {
				// The test itself was starved past ValidUntil: the lease may
				// rightly be gone. Nothing to conclude.
				t.Skipf("test goroutine starved past ValidUntil (%v late)", before.Sub(prev))
			}
			t.Fatalf("Renew within ValidUntil: %v", err)
		}
		vu := l.ValidUntil()
		if vu.Before(before.Add(l.TTL())) || vu.After(after.Add(l.TTL())) {
			t.Fatalf("ValidUntil %v after Renew not within [%v, %v] + TTL", vu, before, after)
		}
		if vu.Before(prev) {
			t.Fatalf("Renew moved ValidUntil back from %v to %v", prev, vu)
		}
	}
	if !l.ValidUntil().After(first) {
		t.Fatal("renewing did not extend ValidUntil")
	}
	if isClosed(l.Done()) {
		t.Fatal("Done closed on a renewed lease")
	}
	kv := mustGet(t, c, "ct/node")
	wantKV(t, kv, "up", v)
}

// A lease that is not renewed ends: its key is deleted, but never before
// the holder's ValidUntil; the holder learns it (Done, ErrLeaseLost).
func (s *suite) testLeaseExpiry(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	l := grant(t, a, testTTL(a))
	v := leasePut(t, l, "ct/node", "up", 0)
	if err := l.Renew(bounded(t, waitTimeout)); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	validUntil := l.ValidUntil()

	// Watch from just before the write: b's replica may not have applied
	// it yet (Watch may read a local replica), and "absent" must mean
	// "deleted", not "not arrived".
	_, _, err := watchUntil(bounded(t, slowTimeout), b, "ct/", v-1, func(kvs []core.KV) bool {
		_, ok := find(kvs, "ct/node")
		return !ok
	})
	deletedBy := time.Now()
	if err != nil {
		t.Fatalf("waiting for the key of an expired lease to go: %v", err)
	}
	if deletedBy.Before(validUntil) {
		t.Fatalf("lease key deleted by %v, before the holder's ValidUntil %v", deletedBy, validUntil)
	}
	wantKV(t, mustGet(t, a, "ct/node"), "", 0)
	wantLost(t, l)
}

// Revoke deletes the bound keys at once: the next linearizable read on any
// member misses them.
func (s *suite) testLeaseRevoke(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	l := grant(t, a, testTTL(a))
	leasePut(t, l, "ct/n1", "x", 0)
	leasePut(t, l, "ct/n2", "y", 0)
	if err := l.Revoke(bounded(t, waitTimeout)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if !isClosed(l.Done()) {
		t.Fatal("Done not closed when Revoke returned")
	}
	for _, c := range []core.Coordinator{a, b} {
		wantKV(t, mustGet(t, c, "ct/n1"), "", 0)
		wantKV(t, mustGet(t, c, "ct/n2"), "", 0)
	}
	wantLost(t, l)
}

// Ending one lease leaves another's keys alone.
func (s *suite) testLeasesIndependent(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	l1 := grant(t, c, testTTL(c))
	l2 := grant(t, c, 10*time.Second+testTTL(c))
	defer l2.Revoke(context.Background())
	leasePut(t, l1, "ct/a", "1", 0)
	v := leasePut(t, l2, "ct/b", "2", 0)
	if err := l1.Revoke(bounded(t, waitTimeout)); err != nil {
		t.Fatal(err)
	}
	wantKV(t, mustGet(t, c, "ct/a"), "", 0)
	kv := mustGet(t, c, "ct/b")
	wantKV(t, kv, "2", v)
	if kv.Lease != l2.ID() || isClosed(l2.Done()) {
		t.Fatalf("revoking one lease disturbed another (%+v)", kv)
	}
}

// CompareAndSet on a lease-bound key unbinds it: the key outlives the
// lease.
func (s *suite) testCASUnbinds(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	l := grant(t, c, testTTL(c))
	v := leasePut(t, l, "ct/a", "bound", 0)
	leasePut(t, l, "ct/b", "bound", 0)
	v2 := mustCAS(t, c, "ct/a", "free", v)
	kv := mustGet(t, c, "ct/a")
	if kv.Lease != "" {
		t.Fatalf("key still bound to %q after CompareAndSet", kv.Lease)
	}
	v3 := mustCAS(t, c, "ct/b", "free too", core.AnyVersion)
	if err := l.Revoke(bounded(t, waitTimeout)); err != nil {
		t.Fatal(err)
	}
	wantKV(t, mustGet(t, c, "ct/a"), "free", v2)
	wantKV(t, mustGet(t, c, "ct/b"), "free too", v3)
}
