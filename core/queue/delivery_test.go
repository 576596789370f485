package queue

import (
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// S-24: first deliveries follow offset order; the delivery carries what
// was published (S-48).
func TestOffsetOrderAndFields_S24_S48(t *testing.T) {
	e := newEnv(t)
	p, err := e.m.Partition(Key{Topic: "orders", Group: wire.Some("eu")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e.pub(p, itoa(i), func(m *Message) {
			m.Published = uint64(100 + i)
			m.ContentType = wire.ContentType{Tag: wire.ContentJSON}
			m.Headers = wire.Headers{{Key: "k", Value: itoa(i)}}
		})
	}
	_, r := e.sub(p, 100, false)
	ds := r.take()
	if !slices.Equal(offsets(ds), []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("offsets %v", offsets(ds))
	}
	for i, d := range ds {
		if d.Topic != "orders" || d.Group != wire.Some("eu") || d.Partition != 0 || d.Published != uint64(100+i) ||
			d.Received != e.nowMs() || d.ContentType.Tag != wire.ContentJSON || string(d.Payload) != itoa(i) {
			t.Fatalf("delivery %d: %+v", i, d)
		}
		if v, _ := header(d, "k"); v != itoa(i) || len(d.Headers) != 1 {
			t.Fatalf("delivery %d headers %+v (no fibril.retries on a first delivery, S-49)", i, d.Headers)
		}
	}
}

// S-46: prefetch bounds unsettled deliveries; 0 means 1; credit returns
// when a settle is accepted.
func TestPrefetchAndCredit_S46(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 6, "m")
	s, r := e.sub(p, 2, false)
	ds := r.take()
	if len(ds) != 2 {
		t.Fatalf("prefetch 2 delivered %d", len(ds))
	}
	s.Ack(ds[0].Tag)
	if got := r.take(); len(got) != 1 || got[0].Offset != 2 {
		t.Fatalf("after one ack: %v", offsets(got))
	}
	if d := p.Depth(); d.Inflight != 2 || d.Ready != 3 {
		t.Fatalf("depth %+v", d)
	}
	s.Close()

	s0, r0 := e.sub(p, 0, false)
	if ds := r0.take(); len(ds) != 1 {
		t.Fatalf("prefetch 0 delivered %d, want 1", len(ds))
	}
	if s0.Options().Prefetch != 0 {
		t.Fatalf("Options must echo the requested prefetch (0)")
	}
}

// S-47: competing subscriptions get messages round-robin among those with
// free credit; each message goes to exactly one of them.
func TestRoundRobin_S47(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	var rs []*recorder
	for range 3 {
		_, r := e.sub(p, 10, false)
		rs = append(rs, r)
	}
	e.pubN(p, 30, "m")
	seen := map[uint64]bool{}
	for i, r := range rs {
		ds := r.take()
		if len(ds) != 10 {
			t.Fatalf("sub %d got %d", i, len(ds))
		}
		for j, d := range ds {
			if d.Offset != uint64(3*j+i) {
				t.Fatalf("sub %d delivery %d is offset %d: not round-robin", i, j, d.Offset)
			}
			if seen[d.Offset] {
				t.Fatalf("offset %d delivered twice", d.Offset)
			}
			seen[d.Offset] = true
		}
	}
	e.pubN(p, 3, "n") // every subscription is full: nothing is delivered
	for _, r := range rs {
		if len(r.take()) != 0 {
			t.Fatal("delivered beyond prefetch")
		}
	}
}

func TestRoundRobinSkipsFullSubscriptions_S47(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	_, r1 := e.sub(p, 1, false)
	s2, r2 := e.sub(p, 5, false)
	e.pubN(p, 4, "m")
	if n1, n2 := len(r1.take()), len(r2.take()); n1 != 1 || n2 != 3 {
		t.Fatalf("deliveries %d/%d, want 1/3", n1, n2)
	}
	_ = s2
}

// S-53: auto-ack deliveries are settled right after the hand-off; client
// acks/nacks are ignored; they never come back, even after a restart.
func TestAutoAck_S53(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 3, "m")
	s, r := e.sub(p, 1, true) // prefetch does not hold auto-ack back (docs/protocol.md#subscriptions)
	ds := r.take()
	if len(ds) != 3 {
		t.Fatalf("auto-ack delivered %d", len(ds))
	}
	for _, d := range ds {
		if !p.log.IsSettled(d.Offset) {
			t.Fatalf("offset %d not settled", d.Offset)
		}
	}
	s.Nack(tags(ds), true, wire.None[uint64]())
	s.Ack(tags(ds)...)
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("depth %+v", d)
	}
	if st := e.m.Stats(); st.Acked != 3 || st.Delivered != 3 {
		t.Fatalf("stats %+v", st)
	}
	e.restart()
	p = e.part("orders", 0)
	_, r = e.sub(p, 10, false)
	if ds := r.take(); len(ds) != 0 {
		t.Fatalf("auto-acked messages came back: %v", offsets(ds))
	}
}

// S-53 with a long backlog: the hand-out happens in rounds, all of it ends
// up delivered.
func TestAutoAckLongBacklog_S53(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	const n = 3*dispatchRound + 7
	for range n {
		e.pub(p, "m")
	}
	_, r := e.sub(p, 1, true)
	got := 0
	testkit.Eventually(t, 10*time.Second, "every delivery", func() bool { got += len(r.take()); return got >= n })
	if got != n {
		t.Fatalf("delivered %d of %d", got, n)
	}
}

// A consumer whose Deliver returns false is paused (auto-ack has no credit
// to stop it, docs/protocol.md#subscriptions) until Resume, and nothing is lost either way.
func TestDeliverBackpressure(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 10, "m")
	r := &recorder{limit: 3}
	s, err := p.Subscribe(r, SubscribeOptions{Prefetch: 1, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	if ds := r.take(); len(ds) != 3 {
		t.Fatalf("delivered %d before the pause, want 3", len(ds))
	}
	e.pubN(p, 2, "late")
	if ds := r.take(); len(ds) != 0 {
		t.Fatalf("a paused subscription got %d more", len(ds))
	}
	r.mu.Lock()
	r.limit = 0
	r.mu.Unlock()
	s.Resume()
	got := 0
	testkit.Eventually(t, 10*time.Second, "nine deliveries", func() bool { got += len(r.take()); return got >= 9 })
	if got != 9 {
		t.Fatalf("after Resume got %d, want the remaining 9", got)
	}
}

// S-24: requeued messages go before never-delivered ones, lowest offset first.
func TestRequeuedBeforeFresh_S24(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 6, "m")
	s, r := e.sub(p, 3, false)
	ds := r.take() // 0 1 2
	s.Nack([]uint64{ds[2].Tag, ds[1].Tag}, true, wire.None[uint64]())
	got := r.take()
	if !slices.Equal(offsets(got), []uint64{1, 2}) {
		t.Fatalf("after nack of 1 and 2: %v, want [1 2] before 3", offsets(got))
	}
	s.Ack(ds[0].Tag)
	if got := r.take(); !slices.Equal(offsets(got), []uint64{3}) {
		t.Fatalf("then %v, want [3]", offsets(got))
	}
}

// S-48: tags are unique in the process, across partitions and managers.
func TestTagsUnique_S48(t *testing.T) {
	e := newEnv(t)
	a, b := e.part("a", 0), e.part("b", 0)
	e.pubN(a, 5, "m")
	e.pubN(b, 5, "m")
	_, ra := e.sub(a, 10, false)
	_, rb := e.sub(b, 10, false)
	seen := map[uint64]bool{}
	for _, d := range append(ra.take(), rb.take()...) {
		if seen[d.Tag] || d.Tag == 0 {
			t.Fatalf("tag %d reused", d.Tag)
		}
		seen[d.Tag] = true
	}
}

// S-54: when a subscription ends, its unsettled deliveries return to Ready
// at once (not at lease expiry), retry counts unchanged.
func TestCloseRequeuesAtOnce_S54(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 3, "m")
	s1, r1 := e.sub(p, 2, false)
	ds := r1.take()
	_, r2 := e.sub(p, 10, false)
	if got := r2.take(); !slices.Equal(offsets(got), []uint64{2}) {
		t.Fatalf("second sub got %v", offsets(got))
	}
	s1.Close()
	got := r2.take()
	if !slices.Equal(offsets(got), []uint64{0, 1}) {
		t.Fatalf("after close: %v", offsets(got))
	}
	for _, d := range got {
		if _, ok := header(d, "fibril.retries"); ok {
			t.Fatalf("close counted as a retry: %+v", d.Headers)
		}
	}
	s1.Ack(tags(ds)...) // dead tags: ignored (S-61)
	if d := p.Depth(); d.Inflight != 3 {
		t.Fatalf("depth %+v", d)
	}
}

// S-56: a paused (dormant) subscription receives nothing; its leases are
// kept and can be settled; Resume continues.
func TestPauseKeepsLeases_S56(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 2, "m")
	s, r := e.sub(p, 10, false)
	held := r.take()
	s.Pause()
	e.pubN(p, 3, "n")
	if got := r.take(); len(got) != 0 {
		t.Fatalf("paused subscription got %v", offsets(got))
	}
	if d := p.Depth(); d.Inflight != 2 || d.Ready != 3 {
		t.Fatalf("pause requeued its leases: %+v", d)
	}
	s.Ack(held[0].Tag)
	s.Resume()
	if got := r.take(); !slices.Equal(offsets(got), []uint64{2, 3, 4}) {
		t.Fatalf("after resume %v", offsets(got))
	}
	s.Ack(held[1].Tag)
	if d := p.Depth(); d.Inflight != 3 {
		t.Fatalf("depth %+v", d)
	}
}
