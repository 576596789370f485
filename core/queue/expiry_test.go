package queue

import (
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// S-39, S-40: TTL runs from the broker's receive time; an expired message
// is removed only while Ready — never while in flight — following the DLQ
// policy with reason expired.
func TestTTLExpiresReadyOnly_S39_S40(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"})})
	p := e.part("jobs", 0)
	e.pub(p, "inflight", withTTL(1000))
	e.pub(p, "ready", withTTL(1000))
	e.pub(p, "forever")
	s, r := e.sub(p, 1, false)
	held := r.take()
	wantPayloads(t, held, "inflight")
	e.clock.Advance(999 * time.Millisecond)
	if d := p.Depth(); d.Ready != 2 {
		t.Fatalf("expired early: %+v", d)
	}
	e.clock.Advance(time.Millisecond)
	e.waitDLQ()
	if d := p.Depth(); d.Ready != 1 || d.Inflight != 1 {
		t.Fatalf("after the deadline: %+v (want the ready one gone, the in-flight one kept)", d)
	}
	// The in-flight one comes back expired: it is removed, not redelivered.
	s.Nack(tags(held), true, noTime)
	e.waitDLQ()
	got := r.take()
	wantPayloads(t, got, "forever")
	if d := p.Depth(); d.Ready != 0 || d.Inflight != 1 {
		t.Fatalf("depth %+v", d)
	}
	_, dr := e.sub(e.part("dead", 0), 10, false)
	dl := dr.take()
	wantPayloads(t, dl, "ready", "inflight")
	for _, d := range dl {
		if v, _ := header(d, "stroma.dlq.reason"); v != "expired" {
			t.Fatalf("reason %q", v)
		}
	}
	if st := e.m.Stats(); st.Expired != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// S-39: the queue's default TTL applies when the message has none; the
// message's own wins. Without a DLQ policy expiry discards (S-40).
func TestDefaultTTL_S39(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DefaultTTLMillis: wire.Some[uint64](1000)})
	p := e.part("jobs", 0)
	e.pub(p, "default")
	e.pub(p, "own", withTTL(5000))
	e.pub(p, "old", func(m *Message) { m.Received = e.nowMs() - 800 }) // measured from receipt
	e.clock.Advance(200 * time.Millisecond)
	if d := p.Depth(); d.Ready != 2 {
		t.Fatalf("receive-time base: %+v", d)
	}
	e.clock.Advance(800 * time.Millisecond)
	if d := p.Depth(); d.Ready != 1 {
		t.Fatalf("default TTL: %+v", d)
	}
	_, r := e.sub(p, 10, false)
	wantPayloads(t, r.take(), "own")
	if st := e.m.Stats(); st.Discarded != 2 || st.Expired != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// S-40: an expired message is never delivered, even when the expiry pass
// has not run yet (the dispatch checks too).
func TestExpiredNeverDelivered_S40(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pub(p, "short", withTTL(10))
	e.pub(p, "long", withTTL(60000))
	e.clock.Set(e.clock.Now().Add(time.Second)) // the timer has not fired
	_, r := e.sub(p, 10, false)
	wantPayloads(t, r.take(), "long")
	if st := e.m.Stats(); st.Expired != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// S-40, S-50: at most ExpiryBatchMax removals per pass; the rest follow on
// the next passes.
func TestExpiryBatchMax_S50(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Settings = func() Settings { s := DefaultSettings(); s.ExpiryBatchMax = 3; return s }
	})
	p := e.part("jobs", 0)
	for range 10 {
		e.pub(p, "m", withTTL(100))
	}
	e.clock.Advance(100 * time.Millisecond) // passes re-arm at once until done
	if d := p.Depth(); d.Ready != 0 {
		t.Fatalf("depth %+v", d)
	}
}

// S-38: a delayed publish is stored at once and not deliverable before
// not_before.
func TestDelayedPublish_S38(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	_, r := e.sub(p, 10, false)
	e.pub(p, "later", func(m *Message) { m.NotBefore = uint64(e.nowMs() + 3000) })
	e.pub(p, "now")
	e.pub(p, "past", func(m *Message) { m.NotBefore = uint64(e.nowMs() - 1) })
	wantPayloads(t, r.take(), "now", "past")
	if d := p.Depth(); d.Delayed != 1 {
		t.Fatalf("depth %+v", d)
	}
	e.clock.Advance(2999 * time.Millisecond)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("delivered early: %q", payloads(got))
	}
	e.clock.Advance(time.Millisecond)
	wantPayloads(t, r.take(), "later")
}

// S-50, S-51: an unsettled lease that expires returns the message to
// Ready without touching the retry count; the old tag is dead.
func TestLeaseExpiry_S50_S51(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Settings = func() Settings { s := DefaultSettings(); s.InflightTTL = 30 * time.Second; return s }
	})
	p := e.part("jobs", 0)
	e.pub(p, "m")
	s1, r1 := e.sub(p, 1, false)
	first := r1.take()
	s1.Nack(tags(first), true, noTime) // retry count 1
	held := r1.take()
	s1.Pause() // S-56: leases still run out normally while dormant
	_, r2 := e.sub(p, 1, false)
	e.clock.Advance(29 * time.Second)
	if got := r2.take(); len(got) != 0 {
		t.Fatalf("lease expired early")
	}
	e.clock.Advance(time.Second)
	got := r2.take()
	wantPayloads(t, got, "m")
	if v, _ := header(got[0], "fibril.retries"); v != "1" {
		t.Fatalf("lease expiry changed the retry count: fibril.retries=%q", v)
	}
	s1.Ack(tags(held)...) // dead tag
	if d := p.Depth(); d.Inflight != 1 {
		t.Fatalf("depth %+v", d)
	}
}

// Idle cost: a partition with nothing pending holds no timer.
func TestIdlePartitionHoldsNoTimer(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pub(p, "m", withTTL(60000))
	s, r := e.sub(p, 1, false)
	if e.clock.Pending() != 1 {
		t.Fatalf("timers %d, want 1", e.clock.Pending())
	}
	s.Ack(tags(r.take())...)
	e.clock.Advance(15 * time.Second) // the poll wakes once, finds nothing
	e.clock.Advance(60 * time.Second)
	if n := e.clock.Pending(); n != 0 {
		t.Fatalf("idle partition holds %d timers", n)
	}
	p.mu.Lock()
	armed := p.timer != nil
	p.mu.Unlock()
	if armed {
		t.Fatal("idle partition holds a timer")
	}
}

// The never-delivered region after a restart may have settled holes (out
// of order acks): they are skipped, and the rest keep offset order.
func TestOutOfOrderAcksAcrossRestart_S57(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 6, "m")
	s, r := e.sub(p, 6, false)
	ds := r.take()
	s.Ack(ds[1].Tag, ds[3].Tag, ds[4].Tag)
	e.restart()
	_, r = e.sub(e.part("jobs", 0), 10, false)
	if got := offsets(r.take()); !slices.Equal(got, []uint64{0, 2, 5}) {
		t.Fatalf("after restart %v", got)
	}
}
