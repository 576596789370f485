package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// A purge settles what is ready or delayed, leaves deliveries in flight
// alone (their acks still work), survives a restart, and the queue takes
// new messages as usual afterwards.
func TestPurgeKeepsInflight(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 10, "m")
	s, r := e.sub(p, 2, false)
	held := waitN(t, r, 2)
	// One message made ready again with a delay (a NACK with not_before).
	s.Nack([]uint64{held[1].Tag}, true, wire.Some(uint64(e.nowMs()+60_000)))
	held = append(held[:1], waitN(t, r, 1)...)
	if d := p.Depth(); d.Ready != 7 || d.Inflight != 2 || d.Delayed != 1 {
		t.Fatalf("before the purge: %+v, want ready 7, in flight 2, delayed 1", d)
	}
	st := p.Stats()
	if st.Published != 10 || st.Delivered != 3 || len(st.Consumers) != 1 || st.Consumers[0].Unsettled != 2 || st.Consumers[0].Prefetch != 2 {
		t.Fatalf("stats %+v", st)
	}
	n, err := p.Purge()
	if err != nil || n != 8 {
		t.Fatalf("Purge = %d, %v; want 8 (7 ready, 1 delayed)", n, err)
	}
	if d := p.Depth(); d.Ready != 0 || d.Inflight != 2 || d.Delayed != 0 {
		t.Fatalf("after the purge: %+v, want only the 2 in flight", d)
	}
	quiet(t, r)
	s.Ack(held[0].Tag, held[1].Tag)
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("after the acks: %+v", d)
	}
	e.clock.Advance(2 * time.Minute) // the delayed one's time would have come
	quiet(t, r)
	s.Close()

	e.restart()
	p = e.part("jobs", 0)
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("after a restart: %+v, want nothing", d)
	}
	e.pub(p, "later")
	_, r = e.sub(p, 10, false)
	wantPayloads(t, waitN(t, r, 1), "later")
	if n, err := p.Purge(); err != nil || n != 0 {
		t.Fatalf("second purge = %d, %v; want 0 (the one message is in flight)", n, err)
	}
}

// LocalStats lists the open partitions of queues and streams with their
// counts; a topic narrows it.
func TestLocalStats(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 3, "m")
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	e.spub(sp, "r0")
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "audit"})
	waitN(t, r, 1)
	s.Ack(0)
	all := e.m.LocalStats("")
	if len(all) != 2 || all[0].Topic != "jobs" || all[0].Kind != KindQueue || all[0].Queue.Ready != 3 ||
		all[1].Topic != "events" || all[1].Kind != KindStream || all[1].Stream.Next != 1 ||
		all[1].Stream.Cursors["audit"] != 1 || all[1].Stream.Subscribers != 1 || all[1].Stream.Published != 1 {
		t.Fatalf("LocalStats = %+v", all)
	}
	if got := e.m.LocalStats("events"); len(got) != 1 || got[0].Stream == nil {
		t.Fatalf("LocalStats(events) = %+v", got)
	}
	if got, err := e.m.PurgeQueue(Key{Topic: "jobs"}, nil); err != nil || got[0] != 3 {
		t.Fatalf("PurgeQueue = %v, %v", got, err)
	}
	if _, err := e.m.PurgeQueue(Key{Topic: "nope"}, nil); err == nil {
		t.Fatal("PurgeQueue of an unknown queue succeeded")
	}
}

// A full partition refuses publishes (reject_publish) or makes room by
// dropping its oldest ready message (drop_oldest); in-flight messages are
// never dropped, and lifting the limit lets publishes through again.
func TestQueueLimits(t *testing.T) {
	e := newEnv(t)
	e.m.SetLimits(map[Key]Limit{{Topic: "capped"}: {MaxMessages: 3}})
	p := e.part("capped", 0)
	e.pubN(p, 3, "m")
	err := p.Publish(&Message{Payload: []byte("x"), Received: e.nowMs()}, nil)
	wantCode(t, err, core.ErrUnavailable)
	if err == nil || !strings.Contains(err.Error(), "is full") {
		t.Fatalf("publish to a full queue: %v", err)
	}

	e.m.SetLimits(map[Key]Limit{{Topic: "capped"}: {MaxMessages: 3, Overflow: DropOldest}})
	_, r := e.sub(p, 1, false) // m0 in flight: not droppable
	wantPayloads(t, waitN(t, r, 1), "maa")
	e.pub(p, "n0") // drops mab, the oldest ready
	e.pub(p, "n1") // drops mac
	if d := p.Depth(); d.Ready != 2 || d.Inflight != 1 {
		t.Fatalf("depth %+v", d)
	}
	st := e.m.Stats()
	if st.OverflowRejected != 1 || st.OverflowDropped != 2 {
		t.Fatalf("stats %+v", st)
	}
	e.m.SetLimits(nil)
	e.pub(p, "n2")
	e.restart()
	p = e.part("capped", 0)
	_, r = e.sub(p, 10, false)
	wantPayloads(t, waitN(t, r, 4), "maa", "n0", "n1", "n2") // the dropped ones stay gone
}

// RefuseWrites stops publishes to queues and streams with the reason,
// and lets acks through; lifting it restores publishing.
func TestRefuseWrites(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pub(p, "before")
	s, r := e.sub(p, 1, false)
	ds := waitN(t, r, 1)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	e.m.RefuseWrites("disk nearly full")
	err := p.Publish(&Message{Payload: []byte("x"), Received: e.nowMs()}, nil)
	wantCode(t, err, core.ErrUnavailable)
	if err == nil || !strings.Contains(err.Error(), "disk nearly full") {
		t.Fatalf("queue publish: %v", err)
	}
	if err := sp.Publish(&Message{Payload: []byte("x"), Received: e.nowMs()}, func(uint64, error) {}); err == nil || !strings.Contains(err.Error(), "disk nearly full") {
		t.Fatalf("stream publish: %v", err)
	}
	s.Ack(ds[0].Tag) // an ack still goes through
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("after the ack: %+v", d)
	}
	e.m.RefuseWrites("")
	e.pub(p, "after")
	e.spub(sp, "after")
}
