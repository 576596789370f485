package queue

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// streamEnv declares a stream and opens its partition 0.
func (e *env) stream(spec StreamSpec) *StreamPartition {
	e.t.Helper()
	if _, err := e.m.DeclareStream(spec); err != nil {
		e.t.Fatalf("DeclareStream: %v", err)
	}
	sp, err := e.m.StreamPartition(spec.Topic, 0)
	if err != nil {
		e.t.Fatalf("StreamPartition: %v", err)
	}
	return sp
}

// spub publishes one record and waits for its confirm.
func (e *env) spub(sp *StreamPartition, payload string, h ...string) uint64 {
	e.t.Helper()
	msg := &Message{Payload: []byte(payload), Received: e.nowMs()}
	for i := 0; i+1 < len(h); i += 2 {
		msg.Headers = append(msg.Headers, wire.Header{Key: h[i], Value: h[i+1]})
	}
	type res struct {
		off uint64
		err error
	}
	ch := make(chan res, 1)
	if err := sp.Publish(msg, func(off uint64, err error) { ch <- res{off, err} }); err != nil {
		e.t.Fatalf("Publish: %v", err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			e.t.Fatalf("confirm: %v", r.err)
		}
		return r.off
	case <-time.After(10 * time.Second):
		e.t.Fatal("no confirm in 10 s")
	}
	return 0
}

func (e *env) ssub(sp *StreamPartition, o StreamSubscribeOptions) (*StreamSubscription, *recorder) {
	e.t.Helper()
	r := &recorder{}
	s, err := sp.Subscribe(r, o)
	if err != nil {
		e.t.Fatalf("Subscribe: %v", err)
	}
	e.t.Cleanup(s.Close)
	return s, r
}

// waitN waits until r holds n deliveries (asynchronous readers), then
// returns them all; more than n is a failure.
func waitN(t *testing.T, r *recorder, n int) []*Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.ds)
		r.mu.Unlock()
		if got >= n {
			time.Sleep(20 * time.Millisecond) // let any extra delivery show
			ds := r.take()
			if len(ds) != n {
				t.Fatalf("got %d deliveries, want %d: %v", len(ds), n, payloads(ds))
			}
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d deliveries in 10 s, want %d", got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// quiet fails if r receives anything within a short while.
func quiet(t *testing.T, r *recorder) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if ds := r.take(); len(ds) > 0 {
		t.Fatalf("unexpected deliveries %v", payloads(ds))
	}
}

// S-71, S-75: every subscription sees every record; the tag is the offset.
func TestStreamFanOut(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	_, a := e.ssub(sp, StreamSubscribeOptions{})
	_, b := e.ssub(sp, StreamSubscribeOptions{})
	for i := range 5 {
		if off := e.spub(sp, fmt.Sprint("m", i)); off != uint64(i) {
			t.Fatalf("offset %d, want %d (record offsets start at 0)", off, i)
		}
	}
	for _, r := range []*recorder{a, b} {
		ds := waitN(t, r, 5)
		wantPayloads(t, ds, "m0", "m1", "m2", "m3", "m4")
		if !slices.Equal(tags(ds), []uint64{0, 1, 2, 3, 4}) || !slices.Equal(offsets(ds), tags(ds)) {
			t.Fatalf("tags %v offsets %v", tags(ds), offsets(ds))
		}
		if ds[0].Topic != "events" || ds[0].Group.Present {
			t.Fatalf("delivery key %+v", ds[0].Key)
		}
	}
	// Reading removed nothing: a new reader from the start sees all again.
	_, c := e.ssub(sp, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartEarliest}})
	waitN(t, c, 5)
}

// S-73: start positions of ephemeral subscriptions.
func TestStreamStartPositions(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	for i := range 10 {
		e.spub(sp, fmt.Sprint("m", i))
		e.clock.Advance(time.Second)
	}
	at := func(i int) int64 { return t0.Add(time.Duration(i) * time.Second).UnixMilli() }
	for _, tc := range []struct {
		name  string
		start wire.StreamStart
		first string
		n     int
	}{
		{"earliest", wire.StreamStart{Kind: wire.StartEarliest}, "m0", 10},
		{"offset", wire.StreamStart{Kind: wire.StartOffset, Value: 7}, "m7", 3},
		{"offset clamped to the tail", wire.StreamStart{Kind: wire.StartOffset, Value: 1000}, "", 0},
		{"n_back", wire.StreamStart{Kind: wire.StartNBack, Value: 3}, "m7", 3},
		{"n_back past the head", wire.StreamStart{Kind: wire.StartNBack, Value: 50}, "m0", 10},
		{"by_time exact", wire.StreamStart{Kind: wire.StartByTime, Value: uint64(at(4))}, "m4", 6},
		{"by_time between", wire.StreamStart{Kind: wire.StartByTime, Value: uint64(at(4) + 1)}, "m5", 5},
		{"by_time before all", wire.StreamStart{Kind: wire.StartByTime, Value: 0}, "m0", 10},
		{"latest", wire.StreamStart{Kind: wire.StartLatest}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, r := e.ssub(sp, StreamSubscribeOptions{Start: tc.start})
			if tc.n == 0 {
				quiet(t, r)
				return
			}
			ds := waitN(t, r, tc.n)
			if string(ds[0].Payload) != tc.first {
				t.Fatalf("first %q, want %q", ds[0].Payload, tc.first)
			}
		})
	}
	// latest: only records published after the subscribe.
	_, r := e.ssub(sp, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartLatest}})
	e.spub(sp, "late")
	wantPayloads(t, waitN(t, r, 1), "late")
}

// S-74, S-75, S-76: a durable name's cursor, committed by manual acks
// (cumulative), survives a restart; a new name starts at the earliest
// record and ignores start; names are independent.
func TestStreamDurableCursor(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	for i := range 6 {
		e.spub(sp, fmt.Sprint("m", i))
	}
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "billing", Start: wire.StreamStart{Kind: wire.StartLatest}})
	ds := waitN(t, r, 6)
	wantPayloads(t, ds, "m0", "m1", "m2", "m3", "m4", "m5")
	s.Ack(0)
	s.Ack(2) // cumulative: the cursor moves past 2
	s.Ack(1) // behind the cursor: no effect (cursors only move forward)
	if next, ok := sp.Cursor("billing"); !ok || next != 3 {
		t.Fatalf("cursor %d %v, want 3", next, ok)
	}
	s.Ack(99) // never delivered: ignored
	if next, _ := sp.Cursor("billing"); next != 3 {
		t.Fatalf("cursor %d after an ack of an undelivered tag", next)
	}
	s.Close()

	e.restart()
	sp, err := e.m.StreamPartition("events", 0)
	if err != nil {
		t.Fatal(err)
	}
	if next, ok := sp.Cursor("billing"); !ok || next != 3 {
		t.Fatalf("cursor after restart %d %v, want 3", next, ok)
	}
	_, r = e.ssub(sp, StreamSubscribeOptions{DurableName: "billing"})
	wantPayloads(t, waitN(t, r, 3), "m3", "m4", "m5")
	_, other := e.ssub(sp, StreamSubscribeOptions{DurableName: "audit"})
	waitN(t, other, 6)
}

// S-75: an auto-ack durable subscription advances its cursor along what
// was delivered; acks on ephemeral subscriptions are ignored; Nack is
// ignored (S-78).
func TestStreamAutoAckAndIgnoredAcks(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "auto", AutoAck: true})
	for i := range 4 {
		e.spub(sp, fmt.Sprint("m", i))
	}
	waitN(t, r, 4)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if next, _ := sp.Cursor("auto"); next == 4 {
			break
		}
		if time.Now().After(deadline) {
			next, _ := sp.Cursor("auto")
			t.Fatalf("auto-ack cursor %d, want 4", next)
		}
		time.Sleep(time.Millisecond)
	}
	s.Nack([]uint64{0}, true, wire.None[uint64]())
	quiet(t, r) // no requeue on a stream

	eph, r2 := e.ssub(sp, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartEarliest}, Prefetch: 1})
	waitN(t, r2, 4) // prefetch binds durable manual-ack subscriptions only
	eph.Ack(3)
	if _, ok := sp.Cursor(""); ok {
		t.Fatal("an ephemeral ack made a cursor")
	}
}

// S-79: the filter is applied per subscription; filtered records are
// skipped, not delivered later.
func TestStreamFilter(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	_, eu := e.ssub(sp, StreamSubscribeOptions{Filter: []wire.FilterClause{{Key: "region", Pattern: "eu-*"}}})
	_, all := e.ssub(sp, StreamSubscribeOptions{})
	e.spub(sp, "a", "region", "eu-west")
	e.spub(sp, "b", "region", "us-east")
	e.spub(sp, "c")
	e.spub(sp, "d", "region", "eu-")
	wantPayloads(t, waitN(t, eu, 2), "a", "d")
	wantPayloads(t, waitN(t, all, 4), "a", "b", "c", "d")
}

// A durable manual-ack subscription stops Prefetch records past its last
// ack; an ack returns the credit.
func TestStreamPrefetchCredit(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	for i := range 5 {
		e.spub(sp, fmt.Sprint("m", i))
	}
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "slow", Prefetch: 2})
	wantPayloads(t, waitN(t, r, 2), "m0", "m1")
	quiet(t, r)
	s.Ack(0)
	wantPayloads(t, waitN(t, r, 1), "m2")
	s.Ack(2)
	wantPayloads(t, waitN(t, r, 2), "m3", "m4")
}

// A consumer that asks for no more (the session's queue is full) is
// paused until Resume, and nothing is skipped (S-81).
func TestStreamBackpressureIsContiguous(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	for i := range 6 {
		e.spub(sp, fmt.Sprint("m", i))
	}
	r := &recorder{limit: 2}
	s, err := sp.Subscribe(r, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartEarliest}, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantPayloads(t, waitN(t, r, 2), "m0", "m1")
	quiet(t, r)
	r.mu.Lock()
	r.limit = 0
	r.mu.Unlock()
	s.Resume()
	wantPayloads(t, waitN(t, r, 4), "m2", "m3", "m4", "m5")
}

// S-82: speculative deliveries carry fibril.speculative; ephemeral
// confirms at once; every tier is log-backed (readable again later).
func TestStreamTiers(t *testing.T) {
	e := newEnv(t)
	spec := e.stream(StreamSpec{Topic: "spec", Durability: wire.DurabilitySpeculative})
	_, r := e.ssub(spec, StreamSubscribeOptions{})
	e.spub(spec, "s0")
	ds := waitN(t, r, 1)
	if v, ok := header(ds[0], streamHeaderSpeculative); !ok || v != "1" {
		t.Fatalf("speculative delivery headers %v", ds[0].Headers)
	}
	eph := e.stream(StreamSpec{Topic: "eph", Durability: wire.DurabilityEphemeral})
	e.spub(eph, "e0")
	e.spub(eph, "e1")
	_, r = e.ssub(eph, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartEarliest}})
	ds = waitN(t, r, 2)
	if _, ok := header(ds[0], streamHeaderSpeculative); ok {
		t.Fatal("an ephemeral delivery is stamped speculative")
	}
}

// S-80: retention drops whole segments from the head; a reader behind the
// new head moves forward to it; reading never removes records.
func TestStreamRetentionMovesReadersForward(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Storage.SegmentMaxBytes = 512 })
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable,
		Retention: wire.StreamRetention{MaxRecords: wire.Some[uint64](10)}})
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "lagging", Prefetch: 1})
	e.spub(sp, "first")
	waitN(t, r, 1) // it holds offset 0 and waits for an ack
	for i := range 60 {
		e.spub(sp, fmt.Sprintf("record-%02d-%s", i, string(make([]byte, 64))))
	}
	if err := sp.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	first, next := sp.Bounds()
	if first == 0 || next-first > 60 {
		t.Fatalf("bounds [%d, %d): retention did not trim", first, next)
	}
	s.Ack(0)
	ds := waitN(t, r, 1)
	if ds[0].Offset < first {
		t.Fatalf("delivered offset %d behind the head %d", ds[0].Offset, first)
	}
}

// S-72: an undeclared stream or partition is ErrNotFound; a closed engine
// ends its subscriptions.
func TestStreamLookupsAndClose(t *testing.T) {
	e := newEnv(t)
	_, err := e.m.StreamPartition("nope", 0)
	wantCode(t, err, core.ErrNotFound)
	sp := e.stream(StreamSpec{Topic: "events", PartitionCount: wire.Some[uint32](2), Durability: wire.DurabilityDurable})
	_, err = e.m.StreamPartition("events", 2)
	wantCode(t, err, core.ErrNotFound)
	if _, err := e.m.StreamPartition("events", 1); err != nil {
		t.Fatal(err)
	}
	_, r := e.ssub(sp, StreamSubscribeOptions{})
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	e.m = nil
	if err := sp.Publish(&Message{Payload: []byte("x")}, nil); err == nil {
		t.Fatal("publish to a closed stream succeeded")
	}
	quiet(t, r)
}

// A stream partition's cursors survive a journal compaction and a restart.
func TestStreamCursorCompaction(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	e.spub(sp, "x")
	for i := range 50 {
		if err := sp.commitCursor(fmt.Sprint("name-", i), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.compactCursors(); err != nil {
		t.Fatal(err)
	}
	if err := sp.commitCursor("name-0", 7); err != nil {
		t.Fatal(err)
	}
	e.restart()
	sp, err := e.m.StreamPartition("events", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		want := uint64(i + 1)
		if i == 0 {
			want = 7
		}
		if next, ok := sp.Cursor(fmt.Sprint("name-", i)); !ok || next != want {
			t.Fatalf("name-%d: cursor %d %v, want %d", i, next, ok, want)
		}
	}
}

// BenchmarkStreamIdleSubscriptionMemory reports what an idle stream
// subscription (caught up, waiting for records) costs the engine: heap and
// goroutine stacks per subscription, as the slope between two counts.
//
//	go test -run '^$' -bench StreamIdleSubscriptionMemory -benchtime 1x ./core/queue
func BenchmarkStreamIdleSubscriptionMemory(b *testing.B) {
	for range b.N {
		e := newEnv(b)
		sp := e.stream(StreamSpec{Topic: "idle", Durability: wire.DurabilityDurable})
		open := func(n int) []*StreamSubscription {
			subs := make([]*StreamSubscription, n)
			for i := range subs {
				s, err := sp.Subscribe(&recorder{}, StreamSubscribeOptions{DurableName: fmt.Sprint("n", i), Prefetch: 32})
				if err != nil {
					b.Fatal(err)
				}
				subs[i] = s
			}
			time.Sleep(100 * time.Millisecond) // every reader reaches its wait
			return subs
		}
		stacks := func() uint64 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.StackInuse
		}
		const n1, n2 = 500, 2500
		a := open(n1)
		h1, s1, g1 := heapAfterGC(), stacks(), runtime.NumGoroutine()
		c := open(n2 - n1)
		h2, s2, g2 := heapAfterGC(), stacks(), runtime.NumGoroutine()
		n := float64(n2 - n1)
		b.ReportMetric((float64(h2)-float64(h1))/n, "heap-B/sub")
		b.ReportMetric((float64(s2)-float64(s1))/n, "stack-B/sub")
		b.ReportMetric(float64(g2-g1)/n, "goroutines/sub")
		for _, s := range append(a, c...) {
			s.Close()
		}
		e.m.Close()
	}
}

// A standalone engine opens every declared stream partition at Open, so
// retention by age runs after a restart on a stream nobody touches.
func TestStreamPartitionsOpenAtStart(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Storage.SegmentMaxBytes = 512 })
	sp := e.stream(StreamSpec{Topic: "old", Durability: wire.DurabilityDurable,
		Retention: wire.StreamRetention{MaxAgeMillis: wire.Some[uint64](60_000)}})
	for i := range 20 {
		e.spub(sp, fmt.Sprintf("record-%02d-%s", i, string(make([]byte, 64))))
	}
	e.restart()
	e.m.mu.Lock()
	n := len(e.m.sparts)
	e.m.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d stream partitions open after a restart, want 1", n)
	}
}

// Prefetch credit counts deliveries, not the records a filter skipped: a
// durable subscription whose filter passes few records never stalls.
func TestStreamPrefetchCountsDeliveriesNotFilteredRecords(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	for i := range 10 {
		region := "us"
		if i == 0 || i == 5 || i == 9 {
			region = "eu"
		}
		e.spub(sp, fmt.Sprint("m", i), "region", region)
	}
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "eu", Prefetch: 2, Filter: []wire.FilterClause{{Key: "region", Pattern: "eu"}}})
	ds := waitN(t, r, 2)
	wantPayloads(t, ds, "m0", "m5")
	s.Ack(ds[0].Tag)
	wantPayloads(t, waitN(t, r, 1), "m9")
}

// A durable stream partition is replicated like a queue's (S-85): its
// replica opens in the engine's directory while the engine refuses to
// serve it, and once closed it is served with the owner's records and
// cursors; Release closes a served partition so that it can become a
// replica again.
func TestStreamReplicaServedAfterClose(t *testing.T) {
	owner, follower := newEnv(t), newEnv(t)
	spec := StreamSpec{Topic: "ev", PartitionCount: wire.Some[uint32](1)}
	sp := owner.stream(spec)
	for i := range 5 {
		owner.spub(sp, fmt.Sprint("m", i))
	}
	if err := sp.commitCursor("x", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := follower.m.DeclareStream(spec); err != nil {
		t.Fatal(err)
	}
	key := Key{Topic: "ev"}
	rep, err := follower.m.OpenReplica(key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.m.StreamPartition("ev", 0); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("StreamPartition while a replica is open: %v, want ErrUnavailable", err)
	}
	copyReplica(t, sp, rep)
	if err := follower.m.CloseReplica(key, 0); err != nil {
		t.Fatal(err)
	}
	served, err := follower.m.StreamPartition("ev", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, next := served.Bounds(); next != 5 {
		t.Fatalf("the served replica ends at %d, want 5", next)
	}
	if next, ok := served.Cursor("x"); !ok || next != 3 {
		t.Fatalf("cursor x = %d (%v), want 3", next, ok)
	}
	if _, err := follower.m.OpenReplica(key, 0); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("OpenReplica of a served partition: %v, want ErrConflict", err)
	}
	if err := follower.m.Release(key, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := follower.m.OpenReplica(key, 0); err != nil {
		t.Fatalf("OpenReplica after Release: %v", err)
	}
}

// A durable stream's gate holds its confirms, and its records are not
// delivered past the limit the gate's owner sets (S-85); the express
// tiers get no gate.
func TestStreamGateHoldsConfirmsAndDeliveries(t *testing.T) {
	g := &heldGate{}
	var gated []Gated
	e := newEnv(t, func(o *Options) {
		o.Gates = func(p Gated) ConfirmGate { gated = append(gated, p); return g }
	})
	sp := e.stream(StreamSpec{Topic: "ev", PartitionCount: wire.Some[uint32](1), Durability: wire.DurabilityDurable})
	e.stream(StreamSpec{Topic: "ticks", PartitionCount: wire.Some[uint32](1), Durability: wire.DurabilityEphemeral})
	if len(gated) != 1 || gated[0] != Gated(sp) {
		t.Fatalf("Gates saw %v, want only the durable stream's partition", gated)
	}
	if k, n := sp.Ref(); k.Topic != "ev" || k.Group.Present || n != 0 {
		t.Fatalf("Ref() = %v %d", k, n)
	}
	_, rec := e.ssub(sp, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartEarliest}})
	confirmed := make(chan uint64, 2)
	for _, p := range []string{"a", "b"} {
		if err := sp.Publish(&Message{Payload: []byte(p)}, func(off uint64, err error) {
			if err == nil {
				confirmed <- off
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "both records at the gate", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.offs) == 2
	})
	if len(confirmed) != 0 || len(rec.take()) != 0 {
		t.Fatal("a record was confirmed or delivered before its gate allowed it")
	}
	g.release(nil)
	for range 2 {
		<-confirmed
	}
	sp.SetDeliverable(1)
	if ds := waitN(t, rec, 1); string(ds[0].Payload) != "a" {
		t.Fatalf("delivered %q below the limit 1", ds[0].Payload)
	}
	sp.RaiseDeliverable(2)
	waitN(t, rec, 1)
}

// ackInDeliver acknowledges every delivery before Deliver returns: the
// fastest a client's ACK can come back (it may arrive while the reader is
// still inside Deliver). With Prefetch 1 a lost ack also loses the credit.
type ackInDeliver struct {
	s   chan *StreamSubscription
	got chan uint64
}

func (a *ackInDeliver) Deliver(d *Delivery) bool {
	s := <-a.s
	s.Ack(d.Tag)
	a.s <- s
	a.got <- d.Offset
	return true
}

// An ACK that arrives before the reader's Deliver call has returned still
// commits the cursor and returns the credit (S-75): a record counts as
// delivered from the moment it is handed over.
func TestStreamAckDuringDeliver(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	for i := range 3 {
		e.spub(sp, fmt.Sprint("m", i))
	}
	a := &ackInDeliver{s: make(chan *StreamSubscription, 1), got: make(chan uint64, 3)}
	s, err := sp.Subscribe(a, StreamSubscribeOptions{DurableName: "fast", Prefetch: 1, Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	a.s <- s
	s.Resume()
	for want := range uint64(3) {
		select {
		case off := <-a.got:
			if off != want {
				t.Fatalf("delivered offset %d, want %d", off, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("offset %d not delivered: the ack of %d was lost with its credit", want, want-1)
		}
	}
	if next, ok := sp.Cursor("fast"); !ok || next != 3 {
		t.Fatalf("cursor %d %v, want 3", next, ok)
	}
}
