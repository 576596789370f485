package coordtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

func (s *suite) electionTests() []testCase {
	return []testCase{
		{"CampaignExclusive", s.testCampaignExclusive},
		{"CampaignTermsIncrease", s.testCampaignTermsIncrease},
		{"CampaignIndependentElections", s.testCampaignIndependent},
		{"CampaignCloseHandsOn", s.testCampaignCloseHandsOn},
		{"CampaignStopHandsOn", s.testCampaignStopHandsOn},
		{"CampaignContextCancel", s.testCampaignContextCancel},
	}
}

type campaignResult struct {
	member int
	l      core.Leadership
	err    error
}

// campaign runs Campaign on a goroutine and delivers the outcome.
func campaign(ctx context.Context, c core.Coordinator, member int, election string, out chan<- campaignResult) {
	go func() {
		l, err := c.Campaign(ctx, election)
		out <- campaignResult{member, l, err}
	}()
}

func mustLead(t *testing.T, c core.Coordinator, election string) core.Leadership {
	t.Helper()
	l, err := c.Campaign(bounded(t, waitTimeout), election)
	if err != nil {
		t.Fatalf("Campaign(%q) with no rival: %v", election, err)
	}
	if isClosed(l.Lost()) {
		t.Fatal("a fresh leadership is already lost")
	}
	return l
}

func waitResult(t *testing.T, ch <-chan campaignResult, timeout time.Duration, what string) campaignResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Campaign on member %d: %v", what, r.member, r.err)
		}
		return r
	case <-time.After(timeout):
		t.Fatalf("%s: no leader after %v", what, timeout)
	}
	panic("unreachable")
}

// wantNoLeader checks that no further Campaign succeeds for a while.
func wantNoLeader(t *testing.T, ch <-chan campaignResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: member %d became leader too (err %v)", what, r.member, r.err)
	case <-time.After(quietPeriod):
	}
}

// Of two campaigners exactly one leads; when it resigns (Lost closes) the
// other leads with a greater term.
func (s *suite) testCampaignExclusive(t *testing.T) {
	cl := s.cluster(t, 2)
	ctx := bounded(t, slowTimeout)
	results := make(chan campaignResult, 2)
	campaign(ctx, cl.Members[0], 0, "ct-e", results)
	campaign(ctx, cl.Members[1], 1, "ct-e", results)

	first := waitResult(t, results, waitTimeout, "two campaigners")
	wantNoLeader(t, results, "while the first leads")
	if isClosed(first.l.Lost()) {
		t.Fatal("the leader's Lost closed while nobody else led")
	}
	if err := first.l.Resign(bounded(t, waitTimeout)); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if !isClosed(first.l.Lost()) {
		t.Fatal("Lost not closed when Resign returned")
	}
	second := waitResult(t, results, waitTimeout, "after Resign")
	if second.member == first.member {
		t.Fatalf("member %d led twice", first.member)
	}
	if second.l.Term() <= first.l.Term() {
		t.Fatalf("term %d after resign not above %d", second.l.Term(), first.l.Term())
	}
	if err := second.l.Resign(bounded(t, waitTimeout)); err != nil {
		t.Fatalf("Resign: %v", err)
	}
}

func (s *suite) testCampaignTermsIncrease(t *testing.T) {
	cl := s.clusterOf(t, 2, 1)
	var last uint64
	for i := range 4 {
		c := cl.Members[i%len(cl.Members)]
		l := mustLead(t, c, "ct-t")
		if l.Term() <= last {
			t.Fatalf("term %d not above the previous %d", l.Term(), last)
		}
		last = l.Term()
		// Ordinary writes do not make a term go back either.
		mustCAS(t, c, "ct/filler", "x", core.AnyVersion)
		if err := l.Resign(bounded(t, waitTimeout)); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *suite) testCampaignIndependent(t *testing.T) {
	cl := s.cluster(t, 2)
	x := mustLead(t, cl.Members[0], "ct-x")
	y := mustLead(t, cl.Members[1], "ct-y")
	if isClosed(x.Lost()) || isClosed(y.Lost()) {
		t.Fatal("leading one election ended another's leadership")
	}
	for _, l := range []core.Leadership{x, y} {
		if err := l.Resign(bounded(t, waitTimeout)); err != nil {
			t.Fatal(err)
		}
	}
}

// Closing the leader's member ends its term (Lost closes) and, once its
// lease expires, another member leads with a greater term.
func (s *suite) testCampaignCloseHandsOn(t *testing.T) {
	cl := s.cluster(t, 3)
	first := mustLead(t, cl.Members[0], "ct-c")
	results := make(chan campaignResult, 1)
	campaign(bounded(t, slowTimeout), cl.Members[1], 1, "ct-c", results)
	wantNoLeader(t, results, "while member 0 leads")
	if err := cl.Members[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !closedWithin(first.Lost(), waitTimeout) {
		t.Fatal("Lost not closed after the leader's member closed")
	}
	second := waitResult(t, results, slowTimeout, "after the leader closed")
	if second.l.Term() <= first.Term() {
		t.Fatalf("term %d after hand-on not above %d", second.l.Term(), first.Term())
	}
}

// As CampaignCloseHandsOn, with the leader crashing (Cluster.Stop).
func (s *suite) testCampaignStopHandsOn(t *testing.T) {
	cl := s.cluster(t, 3)
	if cl.Stop == nil {
		t.Skip("backend cannot stop a member")
	}
	first := mustLead(t, cl.Members[0], "ct-s")
	results := make(chan campaignResult, 1)
	campaign(bounded(t, slowTimeout), cl.Members[1], 1, "ct-s", results)
	wantNoLeader(t, results, "while member 0 leads")
	cl.Stop(0)
	second := waitResult(t, results, slowTimeout, "after the leader crashed")
	if second.l.Term() <= first.Term() {
		t.Fatalf("term %d after hand-on not above %d", second.l.Term(), first.Term())
	}
}

// A Campaign waiting behind a leader ends with its context's error and
// disturbs nothing.
func (s *suite) testCampaignContextCancel(t *testing.T) {
	// The rival is another member: whether a second Campaign by the
	// leader's own member waits is not something the contract settles.
	cl := s.cluster(t, 2)
	rival := cl.Members[1]
	leader := mustLead(t, cl.Members[0], "ct-x")

	ctx, cancel := context.WithTimeout(context.Background(), quietPeriod)
	_, err := rival.Campaign(ctx, "ct-x")
	cancel()
	wantErr(t, "Campaign past its deadline", err, context.DeadlineExceeded)

	ctx, cancel = context.WithCancel(context.Background())
	results := make(chan campaignResult, 1)
	campaign(ctx, rival, 1, "ct-x", results)
	time.Sleep(20 * time.Millisecond) // let it wait; correctness holds either way
	cancel()
	select {
	case r := <-results:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled Campaign: leadership %v, error %v, want context.Canceled", r.l, r.err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Campaign did not return after its context was cancelled")
	}
	if isClosed(leader.Lost()) {
		t.Fatal("a cancelled rival ended the leadership")
	}
	// The abandoned campaigns left nothing behind: after a resign the
	// rival gets in.
	if err := leader.Resign(bounded(t, waitTimeout)); err != nil {
		t.Fatal(err)
	}
	next := mustLead(t, rival, "ct-x")
	if next.Term() <= leader.Term() {
		t.Fatalf("term %d not above %d", next.Term(), leader.Term())
	}
	if err := next.Resign(bounded(t, waitTimeout)); err != nil {
		t.Fatal(err)
	}
}
