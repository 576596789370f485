package queue

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// A hold stops deliveries at its offset: what lies below it is delivered
// as usual, what lies at or above it is appended and confirmed but handed
// to nobody and browsed as held, until ReleaseHold delivers it at once.
func TestHoldStopsDeliveriesFromItsOffset(t *testing.T) {
	for _, autoAck := range []bool{false, true} {
		e := newEnv(t)
		p := e.part("jobs", 0)
		e.pubN(p, 5, "m") // offsets 0..4
		p.SetHold(3)
		if from, held := p.Hold(); !held || from != 3 {
			t.Fatalf("Hold() = %d, %v", from, held)
		}
		_, r := e.sub(p, 100, autoAck)
		wantPayloads(t, r.take(), "maa", "mab", "mac")

		var mu sync.Mutex
		var confirmed []uint64
		for _, s := range []string{"late0", "late1"} {
			err := p.Publish(&Message{Payload: []byte(s), Received: e.nowMs()}, func(off uint64, err error) {
				if err != nil {
					t.Errorf("confirm of %s: %v", s, err)
				}
				mu.Lock()
				confirmed = append(confirmed, off)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := p.log.Sync(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "both confirms", func() bool { mu.Lock(); defer mu.Unlock(); return len(confirmed) == 2 })
		if got := r.take(); len(got) != 0 {
			t.Fatalf("held messages delivered: %q", payloads(got))
		}
		if end := p.End(); end != 7 {
			t.Fatalf("End() = %d, want 7", end)
		}
		msgs, _, err := p.Browse(BrowseOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Offset >= 3 && m.State != StateHeld {
				t.Fatalf("offset %d browsed as %s, want %s", m.Offset, m.State, StateHeld)
			}
			if m.Offset < 3 && m.State == StateHeld {
				t.Fatalf("offset %d below the hold browsed as held", m.Offset)
			}
		}
		if msgs, _, _ := p.Browse(BrowseOptions{Limit: 100, States: []string{StateReady}}); len(msgs) != 0 {
			t.Fatalf("held messages browsed as ready: %+v", msgs)
		}

		p.ReleaseHold()
		if _, held := p.Hold(); held {
			t.Fatal("still held after ReleaseHold")
		}
		wantPayloads(t, r.take(), "mad", "mae", "late0", "late1")
	}
}

// Messages held back come back to the hold in every way they can return
// to Ready: a retry (NACK with requeue), a lease that ran out, a closed
// subscription. Below the hold they are delivered again at once.
func TestHoldGatesRequeuedMessages(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 4, "m")
	s, r := e.sub(p, 100, false)
	ds := r.take()
	wantPayloads(t, ds, "maa", "mab", "mac", "mad")
	p.SetHold(2)

	s.Nack([]uint64{ds[0].Tag, ds[2].Tag}, true, noTime) // below and at the hold
	wantPayloads(t, r.take(), "maa")

	e.clock.Advance(DefaultSettings().InflightTTL + time.Second) // every lease runs out
	got := r.take()
	wantPayloads(t, got, "maa", "mab") // the ones below the hold only
	if d := p.Depth(); d.Inflight != 2 {
		t.Fatalf("depth %+v", d)
	}

	s.Close()
	s2, r2 := e.sub(p, 100, false)
	wantPayloads(t, r2.take(), "maa", "mab")
	p.ReleaseHold()
	got = r2.take()
	wantPayloads(t, got, "mac", "mad")
	if v, _ := header(got[0], "fibril.retries"); v != "1" {
		t.Fatalf("retry count of the held retry: %q", v)
	}
	s2.Close()
}

// A delayed message under a hold waits for both: the hold does not make
// it early, and its delay passing does not deliver it while held — for a
// publish delay and for a retry delay alike.
func TestHoldAndDelays(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	now := uint64(e.nowMs())
	e.pub(p, "delayed", func(m *Message) { m.NotBefore = now + 5000 })
	e.pub(p, "plain")
	p.SetHold(0)
	s, r := e.sub(p, 100, false)
	e.clock.Advance(6 * time.Second)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("held messages delivered: %q", payloads(got))
	}
	p.ReleaseHold()
	wantPayloads(t, r.take(), "delayed", "plain") // both due: offset order

	// Retry delay: the hold is lifted before it is over.
	e.pub(p, "retried")
	ds := r.take()
	wantPayloads(t, ds, "retried")
	p.SetHold(ds[0].Offset)
	s.Nack(tags(ds), true, wire.Some(uint64(e.nowMs())+5000))
	p.ReleaseHold()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("a retry delay was cut short by ReleaseHold: %q", payloads(got))
	}
	e.clock.Advance(5 * time.Second)
	wantPayloads(t, r.take(), "retried")

	// Publish delay not yet over when the hold is lifted.
	e.pub(p, "later", func(m *Message) { m.NotBefore = uint64(e.nowMs()) + 5000 })
	p.SetHold(p.End() - 1)
	p.ReleaseHold()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("delivered before its not_before: %q", payloads(got))
	}
	e.clock.Advance(5 * time.Second)
	wantPayloads(t, r.take(), "later")
}

// A hold is in memory only: a restart forgets it, and Options.Holds puts
// it back before the reopened partition can deliver anything.
func TestHoldIsInMemoryAndHoldsHookReappliesIt(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 3, "m")
	p.SetHold(1)
	e.restart()
	if _, held := e.part("jobs", 0).Hold(); held {
		t.Fatal("a hold survived a restart")
	}

	var asked []uint32
	e.opts.Holds = func(k Key, n uint32) (uint64, bool) {
		asked = append(asked, n)
		return 1, k.Topic == "jobs"
	}
	e.restart()
	p = e.part("jobs", 0)
	if from, held := p.Hold(); !held || from != 1 || !slices.Equal(asked, []uint32{0}) {
		t.Fatalf("Hold() = %d, %v after the hook (asked %v)", from, held, asked)
	}
	_, r := e.sub(p, 100, false)
	wantPayloads(t, r.take(), "maa")
	p.ReleaseHold()
	wantPayloads(t, r.take(), "mab", "mac")
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
