package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// S-35, S-36: a confirmed publish is answered with PUBLISH_OK carrying its
// offset; offsets are dense from 0 (S-23). S-37: an unconfirmed one gets
// nothing.
func TestPublishConfirm(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	for i := 0; i < 3; i++ {
		id := c.publish("orders", "m", true)
		ok := c.Expect(wire.OpPublishOK, id).(*wire.PublishOK)
		if ok.Offset != uint64(i) {
			t.Fatalf("offset %d, want %d", ok.Offset, i)
		}
	}
	c.publish("orders", "quiet", false)
	c.ExpectSilence(200 * time.Millisecond)
}

// docs/protocol.md#answers: a malformed confirmed publish → ERROR 400 (open); a malformed
// unconfirmed one, or any failure of a fire-and-forget request, gets
// nothing. A payload above max_message_bytes → 413.
func TestPublishErrors(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	body := (&wire.Publish{Topic: "t", RequireConfirm: true, Payload: []byte("x")}).AppendTo(nil)
	c.nc.Write(append(wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: uint32(len(body) + 1), Version: 1, Op: wire.OpPublish, RequestID: 50}), append(body, 0xff)...))
	c.ExpectError(wire.OpError, 50, wire.CodeBadRequest)

	body = (&wire.Publish{Topic: "t", RequireConfirm: false, Payload: []byte("x")}).AppendTo(nil)
	c.nc.Write(append(wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: uint32(len(body) + 1), Version: 1, Op: wire.OpPublish, RequestID: 51}), append(body, 0xff)...))
	c.SendID(wire.OpPublish, 52, &wire.Publish{Topic: "t", Headers: wire.Headers{{Key: "fibril.x", Value: "1"}}}) // reserved header, unconfirmed
	c.SendID(wire.OpAck, 53, &wire.Ack{Topic: "nope", Tags: []uint64{99}})
	c.SendID(wire.OpNack, 54, &wire.Nack{Topic: "t", Tags: []uint64{1}, NotBefore: wire.Some(uint64(5))})
	c.ExpectSilence(200 * time.Millisecond)

	id := c.Send(wire.OpPublish, &wire.Publish{Topic: "t", RequireConfirm: true, Headers: wire.Headers{{Key: "stroma.x", Value: "1"}}})
	c.ExpectError(wire.OpError, id, wire.CodeBadRequest) // S-33
	id = c.Send(wire.OpPublish, &wire.Publish{Topic: "t", RequireConfirm: true, Payload: make([]byte, 1<<20+1)})
	c.ExpectError(wire.OpError, id, wire.CodePayloadTooLarge)
	c.SendID(wire.OpPing, 60, nil)
	c.Expect(wire.OpPong, 60)
}

// S-43, docs/protocol.md#answers last sentence: SUBSCRIBE_OK is written before the first
// DELIVER of that subscription, even when messages are waiting. S-48:
// DELIVER carries the sub id, offset and payload. S-46: at most prefetch
// unsettled deliveries.
func TestSubscribeOKBeforeDeliver(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	for i := 0; i < 5; i++ {
		c.Expect(wire.OpPublishOK, c.publish("jobs", "p", true))
	}
	ok := c.subscribe("jobs", 2, false)
	if ok.SubID == 0 || ok.SubID >= maxSubID || ok.Prefetch != 2 {
		t.Fatalf("SUBSCRIBE_OK = %+v", ok)
	}
	_, d1 := c.nextDeliver()
	_, d2 := c.nextDeliver()
	if d1.SubID != ok.SubID || d1.Offset != 0 || d2.Offset != 1 || string(d1.Payload) != "p" {
		t.Fatalf("deliveries %+v %+v", d1, d2)
	}
	c.ExpectSilence(150 * time.Millisecond) // prefetch 2 reached
	c.ack(d1)
	_, d3 := c.nextDeliver()
	if d3.Offset != 2 {
		t.Fatalf("third delivery offset %d", d3.Offset)
	}
}

// S-44: a second subscribe on the same (topic, partition, group) → 409,
// connection open. S-22: a queue SUBSCRIBE on a stream topic → 400.
func TestSubscribeConflicts(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.subscribe("jobs", 1, false)
	id := c.Send(wire.OpSubscribe, &wire.Subscribe{Topic: "jobs", Prefetch: 1})
	c.ExpectError(wire.OpError, id, wire.CodeConflict)

	id = c.Send(wire.OpDeclarePlexus, &wire.DeclarePlexus{Topic: "events", PartitionCount: wire.Some(uint32(2)), Durability: wire.DurabilityDurable})
	if ok := c.Expect(wire.OpDeclarePlexusOK, id).(*wire.DeclarePlexusOK); ok.PartitionCount != 2 {
		t.Fatalf("DECLARE_PLEXUS_OK = %+v", ok)
	}
	id = c.Send(wire.OpSubscribe, &wire.Subscribe{Topic: "events", Prefetch: 1})
	c.ExpectError(wire.OpError, id, wire.CodeBadRequest)
	first := c.Expect(wire.OpSubscribeOK, c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events", Prefetch: 1})).(*wire.SubscribeOK)
	second := c.Expect(wire.OpSubscribeOK, c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events", Prefetch: 1})).(*wire.SubscribeOK)
	if second.SubID == first.SubID {
		t.Fatalf("the replacing subscription kept sub id %d", first.SubID)
	}
	pid := c.publish("events", "after", true)
	for got := 0; got < 2; got++ { // PUBLISH_OK and the DELIVER, in either order
		h, b := c.Read(5 * time.Second)
		switch {
		case h.Op == wire.OpPublishOK && h.RequestID == pid:
		case h.Op == wire.OpDeliver && b.(*wire.Deliver).SubID == second.SubID: // S-72: the second replaced the first
		default:
			t.Fatalf("got %s id %d: %+v", h.Op, h.RequestID, b)
		}
	}
	id = c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events", Partition: 2})
	c.ExpectError(wire.OpError, id, wire.CodeNotFound) // S-72: no such partition
	id = c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "nothing"})
	c.ExpectError(wire.OpError, id, wire.CodeNotFound) // S-72
	id = c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "jobs"})
	c.ExpectError(wire.OpError, id, wire.CodeBadRequest) // S-22: a queue topic
	id = c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events", Partition: 1, DurableName: wire.Some("")})
	c.ExpectError(wire.OpError, id, wire.CodeBadRequest)
	id = c.Send(wire.OpPublishDelayed, &wire.PublishDelayed{Topic: "events", RequireConfirm: true, NotBefore: 1, Payload: []byte("x")})
	c.ExpectError(wire.OpError, id, wire.CodeBadRequest) // a stream has no delayed delivery
	id = c.Send(wire.OpPublish, &wire.Publish{Topic: "events", Partition: 5, RequireConfirm: true, Payload: []byte("x")})
	c.ExpectError(wire.OpError, id, wire.CodeNotFound)
	c.SendID(wire.OpPing, 99, nil)
	c.Expect(wire.OpPong, 99)
}

// S-71 … S-77 through the wire: a stream publish confirms with the record's
// offset; every subscription of every connection gets every record, tag =
// offset, group absent; a durable name's ACK commits its cursor, so a new
// connection resumes after it; filters apply; NACK is ignored (S-78).
func TestStreamPublishAndSubscribe(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpDeclarePlexusOK, c.Send(wire.OpDeclarePlexus, &wire.DeclarePlexus{Topic: "events", Durability: wire.DurabilityDurable}))
	pub := func(payload, region string) uint64 {
		t.Helper()
		id := c.Send(wire.OpPublish, &wire.Publish{Topic: "events", RequireConfirm: true, Payload: []byte(payload),
			Headers: wire.Headers{{Key: "region", Value: region}}})
		h, body := c.Read(5 * time.Second)
		if h.Op != wire.OpPublishOK || h.RequestID != id {
			t.Fatalf("publish answer %s id %d: %+v", h.Op, h.RequestID, body)
		}
		return body.(*wire.PublishOK).Offset
	}
	for i, r := range []string{"eu-west", "us-east", "eu-north"} {
		if off := pub(fmt.Sprint("m", i), r); off != uint64(i) {
			t.Fatalf("offset %d, want %d", off, i)
		}
	}
	d1 := e.dial()
	d1.login()
	ok := d1.Expect(wire.OpSubscribeOK, d1.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events",
		DurableName: wire.Some("billing"), Prefetch: 10})).(*wire.SubscribeOK)
	if ok.Prefetch != 10 || ok.Group.Present {
		t.Fatalf("SUBSCRIBE_OK %+v", ok)
	}
	d2 := e.dial()
	d2.login()
	d2.Expect(wire.OpSubscribeOK, d2.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events",
		Start: wire.StreamStart{Kind: wire.StartEarliest}, Filter: []wire.FilterClause{{Key: "region", Pattern: "eu-*"}}, Prefetch: 10}))
	for i := range 3 {
		_, d := d1.nextDeliver()
		if d.SubID != ok.SubID || d.DeliveryTag != uint64(i) || d.Offset != uint64(i) || d.Group.Present || string(d.Payload) != fmt.Sprint("m", i) {
			t.Fatalf("delivery %d: %+v", i, d)
		}
	}
	for _, want := range []string{"m0", "m2"} {
		if _, d := d2.nextDeliver(); string(d.Payload) != want {
			t.Fatalf("filtered delivery %q, want %q", d.Payload, want)
		}
	}
	d1.SendID(wire.OpNack, 1, &wire.Nack{Topic: "events", Tags: []uint64{0}, Requeue: true})
	d1.SendID(wire.OpAck, 2, &wire.Ack{Topic: "events", Tags: []uint64{1}})
	d1.SendID(wire.OpPing, 3, nil)
	d1.Expect(wire.OpPong, 3) // the ACK before it is applied
	d1.nc.Close()

	d3 := e.dial()
	d3.login()
	d3.Expect(wire.OpSubscribeOK, d3.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events",
		DurableName: wire.Some("billing"), Start: wire.StreamStart{Kind: wire.StartLatest}, Prefetch: 10}))
	if _, d := d3.nextDeliver(); string(d.Payload) != "m2" {
		t.Fatalf("resumed at %q, want m2 (the cursor after the ack of 1)", d.Payload)
	}
	pub("m3", "eu-south")
	if _, d := d3.nextDeliver(); string(d.Payload) != "m3" {
		t.Fatalf("live delivery %q", d.Payload)
	}
	if _, d := d2.nextDeliver(); string(d.Payload) != "m3" {
		t.Fatalf("live filtered delivery %q", d.Payload)
	}
}

// S-113: a standalone TOPOLOGY answer has generation 0, no queue entries
// and one stream entry per declared stream partition with no owners.
func TestStandaloneTopology(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpDeclareQueueOK, c.Send(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "q", PartitionCount: wire.Some(uint32(3))}))
	c.Expect(wire.OpDeclarePlexusOK, c.Send(wire.OpDeclarePlexus, &wire.DeclarePlexus{Topic: "s", PartitionCount: wire.Some(uint32(2)), Durability: wire.DurabilityDurable}))
	topo := c.Expect(wire.OpTopologyOK, c.Send(wire.OpTopology, &wire.TopologyRequest{})).(*wire.TopologyOK)
	if topo.Generation != 0 || len(topo.Queues) != 0 || len(topo.Streams) != 2 ||
		topo.Streams[1].Partition != 1 || topo.Streams[1].PartitionCount != 2 || len(topo.Streams[0].Owners) != 0 {
		t.Fatalf("TOPOLOGY_OK = %+v", topo)
	}
	topo = c.Expect(wire.OpTopologyOK, c.Send(wire.OpTopology, &wire.TopologyRequest{Topic: wire.Some("q")})).(*wire.TopologyOK)
	if len(topo.Streams) != 0 || len(topo.Queues) != 0 {
		t.Fatalf("filtered TOPOLOGY_OK = %+v", topo)
	}
	c.SendID(wire.OpTopologyUpdateAck, 7, &wire.TopologyUpdateAck{Generation: 3})
	c.ExpectSilence(100 * time.Millisecond)
}

// S-101, S-102, S-62: a socket cut within the grace resumes the session:
// same ids, subscriptions and leases kept, and an ack of a tag delivered on
// the old socket is honoured.
func TestResumeKeepsLeases(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpPublishOK, c.publish("jobs", "a", true))
	c.Expect(wire.OpPublishOK, c.publish("jobs", "b", true))
	sub := c.subscribe("jobs", 1, false)
	_, d := c.nextDeliver()
	c.nc.Close() // network blip

	c2 := e.dial()
	c2.ident = c.ident
	ok := c2.hello(true)
	if ok.ResumeOutcome != wire.ResumeResumed || ok.ClientID != c.ident.ClientID {
		t.Fatalf("resume answer %+v", ok)
	}
	c2.auth("alice", "secret") // D-1: a re-check, answered AUTH_OK
	// Quiet window: nothing until the reconcile answer (docs/protocol.md#quiet-window).
	c2.ExpectSilence(150 * time.Millisecond)
	id := c2.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileRestore,
		Subscriptions: []wire.ReconcileSub{{SubID: sub.SubID, Topic: "jobs", Prefetch: 1}}})
	res := c2.Expect(wire.OpReconcileResult, id).(*wire.ReconcileResult)
	if len(res.Entries) != 1 || res.Entries[0].Code != wire.ReasonMatched {
		t.Fatalf("reconcile %+v", res)
	}
	c2.ack(d) // the tag from the old socket
	_, d2 := c2.nextDeliver()
	if d2.Offset != 1 {
		t.Fatalf("after the late ack got offset %d, want 1 (0 was acked)", d2.Offset)
	}
}

// S-103: once the grace expires the session is gone: its unsettled
// delivery returns to Ready (another consumer gets it) and a resume gets
// resume_not_found with fresh ids.
func TestGraceExpiry(t *testing.T) {
	e := newEnv(t)
	e.grace.Store(100)
	c := e.dial()
	c.login()
	c.Expect(wire.OpPublishOK, c.publish("jobs", "a", true))
	c.subscribe("jobs", 1, false)
	c.nextDeliver()
	c.nc.Close()

	other := e.dial()
	other.login()
	other.subscribe("jobs", 1, false)
	_, d := other.nextDeliver()
	if d.Offset != 0 {
		t.Fatalf("redelivered offset %d", d.Offset)
	}
	c2 := e.dial()
	c2.ident = c.ident
	if ok := c2.hello(true); ok.ResumeOutcome != wire.ResumeNotFound || ok.ClientID == c.ident.ClientID {
		t.Fatalf("resume after grace: %+v", ok)
	}
}

// S-101: a wrong token or another owner id → resume_rejected, fresh ids.
func TestResumeRejected(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c2 := e.dial()
	c2.ident = c.ident
	c2.ident.ResumeToken[0] ^= 1
	if ok := c2.hello(true); ok.ResumeOutcome != wire.ResumeRejected || ok.ClientID == c.ident.ClientID {
		t.Fatalf("wrong token: %+v", ok)
	}
	c3 := e.dial()
	c3.ident = c.ident
	c3.ident.OwnerID[0] ^= 1
	if ok := c3.hello(true); ok.ResumeOutcome != wire.ResumeRejected {
		t.Fatalf("wrong owner: %+v", ok)
	}
}

// S-104: a resume while the old socket still looks alive moves the session
// to the new socket at once; the old socket's later end leaves it alone.
func TestSupersededConnection(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.subscribe("jobs", 10, false)

	c2 := e.dial()
	c2.ident = c.ident
	if ok := c2.hello(true); ok.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("%+v", ok)
	}
	c2.auth("alice", "secret")
	c2.SendID(wire.OpPing, 500, nil) // ends the quiet window
	c2.Expect(wire.OpPong, 500)

	p := e.dial()
	p.login()
	p.Expect(wire.OpPublishOK, p.publish("jobs", "x", true))
	_, d := c2.nextDeliver()
	if string(d.Payload) != "x" {
		t.Fatalf("delivery %+v", d)
	}
	c.nc.Close() // the superseded socket ends
	time.Sleep(50 * time.Millisecond)
	p.Expect(wire.OpPublishOK, p.publish("jobs", "y", true))
	_, d = c2.nextDeliver()
	if string(d.Payload) != "y" {
		t.Fatalf("after the old socket closed: %+v", d)
	}
}

// S-106, S-107: after a restart in place, a resume matching a skeleton gets
// resumed_after_restart with the same ids and an unauthenticated, empty
// session; the old tags are dead and the message redelivers. With the
// restart TTL at 0 the answer is resume_not_found.
func TestResumeAfterRestart(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpPublishOK, c.publish("jobs", "a", true))
	sub := c.subscribe("jobs", 1, false)
	_, d := c.nextDeliver()
	e.restartBroker()

	c2 := e.dial()
	c2.ident = c.ident
	ok := c2.hello(true)
	if ok.ResumeOutcome != wire.ResumeResumedAfterRestart || ok.ClientID != c.ident.ClientID || ok.ResumeToken != c.ident.ResumeToken {
		t.Fatalf("after restart: %+v", ok)
	}
	id := c2.Send(wire.OpReconcileClient, &wire.ReconcileClient{})
	c2.ExpectError(wire.OpError, id, wire.CodeUnauthorized) // unauthenticated
	c2.ExpectClosed(time.Second)

	c3 := e.dial()
	c3.ident = c.ident
	c3.hello(true) // resumes the empty session registered under the old ids
	c3.auth("alice", "secret")
	id = c3.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileRestore,
		Subscriptions: []wire.ReconcileSub{{SubID: sub.SubID, Topic: "jobs", Prefetch: 1}}})
	res := c3.Expect(wire.OpReconcileResult, id).(*wire.ReconcileResult)
	if res.Entries[0].Code != wire.ReasonServerRestored {
		t.Fatalf("reconcile %+v", res)
	}
	_, d2 := c3.nextDeliver()
	if d2.Offset != d.Offset {
		t.Fatalf("redelivery %+v (old %+v)", d2, d)
	}

	e.restart.Store(0)
	e.restartBroker()
	c4 := e.dial()
	c4.ident = c3.ident
	if ok := c4.hello(true); ok.ResumeOutcome != wire.ResumeNotFound {
		t.Fatalf("restart TTL 0: %+v", ok)
	}
}

// An auto-ack subscription has no prefetch credit (docs/protocol.md#subscriptions): when its
// client does not read, the session's queue of deliveries stops at its
// bound instead of holding the whole backlog, and every message still
// arrives once the client reads.
func TestAutoAckSlowClientBounded(t *testing.T) {
	e := newEnv(t)
	const n = 3 * pushHighCount
	payload := make([]byte, 2048) // 24 MiB in all: more than the socket buffers hold
	var batch []byte
	// Built before the connection: under the race detector on a loaded
	// machine this takes seconds, and a client that sends nothing for 3
	// heartbeats is closed as idle (S-11).
	for i := 0; i < n; i++ {
		batch = wire.AppendFrame(batch, wire.OpPublish, uint64(100+i), &wire.Publish{Topic: "bulk", Payload: payload})
	}
	p := e.dial()
	p.login()
	if _, err := p.nc.Write(batch); err != nil {
		t.Fatal(err)
	}
	id := p.publish("bulk", "last", true)
	p.Expect(wire.OpPublishOK, id)

	c := e.dial()
	c.login()
	// Subscribe without reading anything else.
	sid := c.Send(wire.OpSubscribe, &wire.Subscribe{Topic: "bulk", Prefetch: 1, AutoAck: true})
	var sess *Session
	testkit.Eventually(t, time.Second, "the session", func() bool {
		for _, s := range e.srv.sessions.all() {
			s.mu.Lock()
			has := len(s.subs) > 0
			s.mu.Unlock()
			if has {
				sess = s
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // let the engine push as far as it will
	sess.mu.Lock()
	queued := len(sess.pushes)
	sess.mu.Unlock()
	if queued > pushHighCount+1024 {
		t.Fatalf("%d deliveries queued for a client that reads nothing; the bound is %d", queued, pushHighCount)
	}
	if d := e.qm.Stats().Delivered; d >= n {
		t.Fatalf("the engine handed out all %d messages to a client that reads nothing", d)
	}
	c.Expect(wire.OpSubscribeOK, sid)
	for i := 0; i <= n; i++ {
		c.nextDeliver()
	}
}

// A confirmed publish that is the last frame read, on an idle partition,
// is committed by the connection's reader, which also writes the
// PUBLISH_OK itself (commitOwed, writeAnswers): no storage committer and
// no writer goroutine has to be woken. Pipelined publishes stay with the
// committer and the writer. S-36: the confirm still follows the commit.
func TestConfirmWrittenByReader(t *testing.T) {
	e := newEnv(t)
	e.stop()
	e.writes = &writeStacks{}
	e.start(e.opts.OwnerID)
	c := e.dial()
	c.login()
	c.Expect(wire.OpPublishOK, c.publish("rtt", "warm", true)) // creates the queue
	byReader := func() int {
		n := 0
		for _, st := range e.writes.all() {
			if strings.Contains(st, "writeAnswers") && strings.Contains(st, "commitOwed") {
				n++
			}
		}
		return n
	}
	before := byReader()
	for i := range 5 {
		c.Expect(wire.OpPublishOK, c.publish("rtt", fmt.Sprint(i), true))
	}
	if got := byReader() - before; got < 4 {
		t.Fatalf("%d of 5 one-at-a-time confirms written by the reader, want at least 4", got)
	}
	// A consumer on the same connection: the DELIVER (a push, the
	// writer's) and the PUBLISH_OK both arrive, SUBSCRIBE_OK first.
	sub := c.subscribe("rtt", 10, false)
	seen := map[string]bool{}
	for range 6 { // the six messages published above
		_, d := c.nextDeliver()
		if d.SubID != sub.SubID {
			t.Fatalf("DELIVER for subscription %d", d.SubID)
		}
		seen[string(d.Payload)] = true
		c.ack(d)
	}
	id := c.publish("rtt", "last", true)
	gotOK, gotDeliver := false, false
	for !gotOK || !gotDeliver {
		h, b := c.Read(5 * time.Second)
		switch {
		case h.Op == wire.OpPublishOK && h.RequestID == id:
			gotOK = true
		case h.Op == wire.OpDeliver && string(b.(*wire.Deliver).Payload) == "last":
			gotDeliver = true
			c.ack(b.(*wire.Deliver))
		case h.Op == wire.OpPing:
			c.SendID(wire.OpPong, h.RequestID, nil)
		default:
			t.Fatalf("unexpected %s id %d", h.Op, h.RequestID)
		}
	}
	if len(seen) != 6 {
		t.Fatalf("delivered %v", seen)
	}
}

// An idle connection gives its write buffer back once a round is on the
// wire (the memory a thousand idle clients cost: per-connection buffers
// come from pools while frames flow).
func TestIdleConnectionHoldsNoWriteBuffer(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	for range 20 { // pipelined: several answers per round
		c.publish("orders", "m", true)
	}
	for range 20 {
		if h, _ := c.Read(5 * time.Second); h.Op != wire.OpPublishOK {
			t.Fatalf("got %s, want PUBLISH_OK", h.Op)
		}
	}
	e.srv.mu.Lock()
	var conn *Conn
	for sc := range e.srv.conns {
		conn = sc
	}
	e.srv.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		conn.wlock.Lock()
		held := conn.bw != nil
		conn.wlock.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an idle connection still holds its write buffer after 5 s")
		}
	}
}

// S-83: stream subscriptions are not kept through a reconnect nor
// reconciled: the resumed session subscribes again (no 409) and continues
// from its durable cursor; the reconcile answer does not list the stream.
func TestStreamSubscriptionsAreNotResumed(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpDeclarePlexusOK, c.Send(wire.OpDeclarePlexus, &wire.DeclarePlexus{Topic: "events", Durability: wire.DurabilityDurable}))
	for _, p := range []string{"a", "b"} {
		c.Expect(wire.OpPublishOK, c.publish("events", p, true))
	}
	sub := func(c *client) {
		t.Helper()
		c.Expect(wire.OpSubscribeOK, c.Send(wire.OpSubscribeStream, &wire.SubscribeStream{Topic: "events",
			DurableName: wire.Some("n"), Prefetch: 1}))
	}
	sub(c)
	_, d := c.nextDeliver()
	c.SendID(wire.OpAck, 1, &wire.Ack{Topic: "events", Tags: []uint64{d.DeliveryTag}})
	c.SendID(wire.OpPing, 2, nil)
	for { // the ack's credit may let "b" arrive before the PONG
		if h, _ := c.Read(5 * time.Second); h.Op == wire.OpPong && h.RequestID == 2 {
			break
		} else if h.Op != wire.OpDeliver {
			t.Fatalf("got %s id %d, want PONG", h.Op, h.RequestID)
		}
	}
	c.nc.Close()

	c2 := e.dial()
	c2.ident = c.ident
	if ok := c2.hello(true); ok.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("resume answer %+v", ok)
	}
	c2.auth("alice", "secret")
	res := c2.Expect(wire.OpReconcileResult, c2.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative})).(*wire.ReconcileResult)
	if len(res.Entries) != 0 {
		t.Fatalf("reconcile lists %+v", res.Entries)
	}
	sub(c2)
	if _, d := c2.nextDeliver(); string(d.Payload) != "b" {
		t.Fatalf("resubscribed at %q, want b", d.Payload)
	}
}
