package queue

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// SettledBelow holds once every message below the offset is settled,
// whatever settled it: an ack, a discard after a terminal NACK, an expiry.
func TestSettledBelow(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pub(p, "acked")
	e.pub(p, "nacked")
	e.pub(p, "expires", withTTL(1000))
	e.pub(p, "after")
	if !p.SettledBelow(0) {
		t.Fatal("SettledBelow(0) is false")
	}
	s, r := e.sub(p, 2, false)
	ds := r.take()
	wantPayloads(t, ds, "acked", "nacked")
	s.Ack(ds[1].Tag)
	s.Nack([]uint64{ds[1].Tag}, false, noTime) // already settled: ignored
	if p.SettledBelow(1) {
		t.Fatal("SettledBelow(1) with offset 0 in flight")
	}
	s.Ack(ds[0].Tag)
	if !p.SettledBelow(2) || p.SettledBelow(3) {
		t.Fatalf("after the acks: SettledBelow(2) %v, SettledBelow(3) %v", p.SettledBelow(2), p.SettledBelow(3))
	}
	for _, d := range r.take() {
		s.Nack([]uint64{d.Tag}, false, noTime) // no DLQ policy: discarded
	}
	if !p.SettledBelow(4) {
		t.Fatal("SettledBelow(4) after discards")
	}
	if p.SettledBelow(5) {
		t.Fatal("SettledBelow past the end")
	}

	// Expiry, while nothing consumes.
	s.Close()
	e.pub(p, "ttl", withTTL(1000))
	if p.SettledBelow(5) {
		t.Fatal("SettledBelow(5) before the TTL")
	}
	e.clock.Advance(time.Second)
	if !p.SettledBelow(5) {
		t.Fatal("SettledBelow(5) after the TTL")
	}
}

// OnSettledBelow calls its function once, as soon as the offsets below are
// settled (at once when they already are), never under the partition's
// lock, and not once the partition is closed or the watch cancelled.
func TestOnSettledBelow(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 3, "m")

	var calls atomic.Int32
	called := make(chan struct{}, 10)
	p.OnSettledBelow(2, func() {
		p.Depth() // takes the partition lock: deadlocks if called under it
		calls.Add(1)
		called <- struct{}{}
	})
	var cancelled atomic.Int32
	cancel := p.OnSettledBelow(2, func() { cancelled.Add(1) })
	cancel()

	s, r := e.sub(p, 10, false)
	ds := r.take()
	s.Ack(ds[0].Tag)
	select {
	case <-called:
		t.Fatal("called with offset 1 unsettled")
	case <-time.After(20 * time.Millisecond):
	}
	s.Ack(ds[1].Tag)
	waitCall(t, called)
	s.Ack(ds[2].Tag)
	e.pub(p, "more")
	s.Ack(tags(r.take())...)
	time.Sleep(20 * time.Millisecond)
	if calls.Load() != 1 || cancelled.Load() != 0 {
		t.Fatalf("calls %d, cancelled watch's calls %d", calls.Load(), cancelled.Load())
	}

	// Already true: called at once.
	p.OnSettledBelow(4, func() { called <- struct{}{} })
	waitCall(t, called)

	// Dead-lettering settles too.
	if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"})}); err != nil {
		t.Fatal(err)
	}
	e.pub(p, "to the dlq")
	p.OnSettledBelow(p.End(), func() { called <- struct{}{} })
	ds = r.take()
	s.Nack(tags(ds), false, noTime)
	e.waitDLQ()
	waitCall(t, called)

	// Never after the partition is closed.
	e.pub(p, "left")
	p.OnSettledBelow(p.End(), func() { t.Error("called after the partition was closed") })
	s.Close()
	if err := e.m.Release(Key{Topic: "jobs"}, 0); err != nil {
		t.Fatal(err)
	}
	p.OnSettledBelow(0, func() { t.Error("called on a closed partition") })
	time.Sleep(20 * time.Millisecond)
}

func waitCall(t *testing.T, c chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("OnSettledBelow's function was not called")
	}
}
