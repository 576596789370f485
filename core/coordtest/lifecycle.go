package coordtest

import (
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

func (s *suite) lifecycleTests() []testCase {
	return []testCase{
		{"Closed", s.testClosed},
		{"CloseKeepsLeases", s.testCloseKeepsLeases},
		{"CloseUnblocksWatch", s.testCloseUnblocksWatch},
		{"CloseUnblocksCampaign", s.testCloseUnblocksCampaign},
	}
}

// After Close every method returns core.ErrClosed, and so do the lease
// handles it gave out (or ErrLeaseLost, which is equally final).
func (s *suite) testClosed(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	mustCAS(t, c, "ct/k", "a", 0)
	l := grant(t, c, testTTL(c))
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := bounded(t, waitTimeout)
	_, err := c.Get(ctx, "ct/k")
	wantErr(t, "Get", err, core.ErrClosed)
	_, _, err = c.List(ctx, "ct/")
	wantErr(t, "List", err, core.ErrClosed)
	_, _, err = c.Watch(ctx, "ct/", 0)
	wantErr(t, "Watch", err, core.ErrClosed)
	_, err = c.CompareAndSet(ctx, "ct/k", []byte("b"), core.AnyVersion)
	wantErr(t, "CompareAndSet", err, core.ErrClosed)
	wantErr(t, "CompareAndDelete", c.CompareAndDelete(ctx, "ct/k", core.AnyVersion), core.ErrClosed)
	_, err = c.GrantLease(ctx, testTTL(c))
	wantErr(t, "GrantLease", err, core.ErrClosed)
	_, err = c.Campaign(ctx, "ct-closed")
	wantErr(t, "Campaign", err, core.ErrClosed)

	if err := l.Renew(ctx); !errors.Is(err, core.ErrClosed) && !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("Renew through a closed Coordinator: %v, want ErrClosed or ErrLeaseLost", err)
	}
	if _, err := l.Put(ctx, "ct/x", nil, core.AnyVersion); !errors.Is(err, core.ErrClosed) && !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("Lease.Put through a closed Coordinator: %v, want ErrClosed or ErrLeaseLost", err)
	}
}

// Close does not revoke leases (a Close and a crash look the same): a key
// bound to a lease of the closed member lives until the lease expires.
func (s *suite) testCloseKeepsLeases(t *testing.T) {
	cl := s.cluster(t, 3)
	a, b := cl.Members[0], cl.Members[1]
	ttl := max(a.MinTTL(), time.Second)
	l := grant(t, a, ttl)
	v := leasePut(t, l, "ct/node", "up", 0)
	validUntil := l.ValidUntil()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	kv := mustGet(t, b, "ct/node")
	if before.Before(validUntil) {
		// Read while the lease was surely valid: it must be there.
		wantKV(t, kv, "up", v)
	}
	_, _, err := watchUntil(bounded(t, slowTimeout), b, "ct/", v-1, func(kvs []core.KV) bool { // from the write on: see testLeaseExpiry
		_, ok := find(kvs, "ct/node")
		return !ok
	})
	if err != nil {
		t.Fatalf("waiting for the closed member's lease to expire: %v", err)
	}
	if now := time.Now(); now.Before(validUntil) {
		t.Fatalf("key of a closed member's lease deleted by %v, before ValidUntil %v", now, validUntil)
	}
}

func (s *suite) testCloseUnblocksWatch(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	mustCAS(t, c, "ct/k", "a", 0)
	_, idx, err := c.List(bounded(t, waitTimeout), "ct/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := bounded(t, slowTimeout)
	errc := make(chan error, 1)
	go func() {
		_, _, err := watchUntil(ctx, c, "ct/", idx, func([]core.KV) bool { return false })
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it block; correctness holds either way
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		wantErr(t, "Watch blocked across Close", err, core.ErrClosed)
	case <-time.After(waitTimeout):
		t.Fatal("Watch still blocked after Close")
	}
}

func (s *suite) testCloseUnblocksCampaign(t *testing.T) {
	cl := s.cluster(t, 3)
	leader := mustLead(t, cl.Members[1], "ct-u")
	results := make(chan campaignResult, 1)
	campaign(bounded(t, slowTimeout), cl.Members[0], 0, "ct-u", results)
	time.Sleep(20 * time.Millisecond) // let it wait; correctness holds either way
	if err := cl.Members[0].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		wantErr(t, "Campaign waiting across Close", r.err, core.ErrClosed)
	case <-time.After(waitTimeout):
		t.Fatal("Campaign still waiting after Close")
	}
	if isClosed(leader.Lost()) {
		t.Fatal("closing a waiting member ended another's leadership")
	}
}
