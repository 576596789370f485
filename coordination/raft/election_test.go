package raft

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

func TestCampaignResignAndCrash(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader()
	ctx := ctxT(t)
	a, b := c.member(0), c.member(1)

	la, err := a.Campaign(ctx, "controller")
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		l   core.Leadership
		err error
	}
	bWon := make(chan won, 1)
	go func() {
		l, err := b.Campaign(ctx, "controller")
		bWon <- won{l, err}
	}()
	select {
	case w := <-bWon:
		t.Fatalf("two leaders at once: %+v", w)
	case <-time.After(300 * time.Millisecond):
	}
	// The lock is a reserved key with the winner's id.
	if kv := mustGet(t, a, electionPrefix+"controller"); kv.Version != la.Term() || string(kv.Value) != "n1" || kv.Lease == "" {
		t.Fatalf("lock key %+v, term %d", kv, la.Term())
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("Lost open after Resign")
	}
	var lb core.Leadership
	select {
	case w := <-bWon:
		if w.err != nil {
			t.Fatal(w.err)
		}
		lb = w.l
	case <-time.After(waitLong):
		t.Fatal("the second candidate did not win after a resignation")
	}
	if lb.Term() <= la.Term() {
		t.Fatalf("term did not grow: %d then %d", la.Term(), lb.Term())
	}
	// The holder crashes: its Lost closes locally, and after its lease
	// runs out another member wins a later term.
	c.stop(1)
	select {
	case <-lb.Lost():
	case <-time.After(waitLong):
		t.Fatal("Lost open after the member closed")
	}
	la2, err := a.Campaign(ctx, "controller")
	if err != nil {
		t.Fatal(err)
	}
	if la2.Term() <= lb.Term() {
		t.Fatalf("term did not grow: %d then %d", lb.Term(), la2.Term())
	}
	select {
	case <-la2.Lost():
		t.Fatal("a fresh term is already lost")
	default:
	}
}

func TestLeadershipLostWithoutQuorum(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, _ := c.leader()
	fi, f := c.follower(li)
	l, err := f.Campaign(ctxT(t), "ctl")
	if err != nil {
		t.Fatal(err)
	}
	// Renewals keep it alive for several TTLs.
	select {
	case <-l.Lost():
		t.Fatal("lost while the cluster is healthy")
	case <-time.After(2 * f.opts.LivenessTTL):
	}
	// Without a quorum the lease cannot be renewed: the term ends by
	// ValidUntil at the latest.
	c.stop(li)
	c.stop(3 - li - fi)
	select {
	case <-l.Lost():
	case <-time.After(waitLong):
		t.Fatal("leadership kept without a quorum")
	}
}

func TestCampaignHonoursContext(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, m := c.leader()
	if _, err := m.Campaign(ctxT(t), "e"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := m.Campaign(ctx, "e"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("campaign against a held lock: %v", err)
	}
	if _, err := m.Campaign(ctx, ""); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("empty election name: %v", err)
	}
}
