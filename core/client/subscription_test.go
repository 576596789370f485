package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

var deliverID uint64 = 1000

func next(t *testing.T, s *Subscription) *Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	d, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return d
}

func TestSubscribeDeliverSettle(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Group: "g", Prefetch: 8}, 5)
	if got := sub.Partitions(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("standalone partitions %v, want [0]", got)
	}
	ids := []uint64{}
	for i := range 3 {
		deliverID++
		fc.send(wire.OpDeliver, deliverID, &wire.Deliver{SubID: 5, Topic: "q", Group: wire.Some("g"), DeliveryTag: uint64(10 + i), Payload: []byte("m")})
		ids = append(ids, deliverID)
	}
	ctx := context.Background()
	d := next(t, sub)
	if d.Tag != 10 || d.Group != "g" || string(d.Payload) != "m" {
		t.Fatalf("delivery %+v", d)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	f := fc.expect(t, wire.OpAck)
	ack := f.body.(*wire.Ack)
	if f.hdr.RequestID != ids[0] || ack.Topic != "q" || ack.Group != wire.Some("g") || len(ack.Tags) != 1 || ack.Tags[0] != 10 {
		t.Fatalf("ACK id %d %+v", f.hdr.RequestID, ack)
	}
	if err := d.Ack(ctx); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("second Ack: %v", err)
	}
	d = next(t, sub)
	before := time.Now()
	if err := d.Retry(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	f = fc.expect(t, wire.OpNack)
	nk := f.body.(*wire.Nack)
	if f.hdr.RequestID != ids[1] || !nk.Requeue || !nk.NotBefore.Present || nk.NotBefore.Value < uint64(before.Add(time.Minute).UnixMilli()) {
		t.Fatalf("NACK id %d %+v", f.hdr.RequestID, nk)
	}
	d = next(t, sub)
	if err := d.Fail(ctx); err != nil {
		t.Fatal(err)
	}
	f = fc.expect(t, wire.OpNack)
	if nk := f.body.(*wire.Nack); nk.Requeue || nk.NotBefore.Present || f.hdr.RequestID != ids[2] {
		t.Fatalf("NACK %+v", nk)
	}
	if s := c.Stats(); s.PrefetchViolations != 0 || s.ProtocolViolations != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// One SUBSCRIBE per known partition; SUBSCRIBE carries prefetch and
// auto_ack; deliveries of every partition come out of Next.
func TestSubscribeAllKnownPartitions(t *testing.T) {
	fb := newFake(t, nil)
	topo := wire.Topology{Generation: 1, Queues: []wire.QueueEntry{queueEntry("q", 0, 3, 0), queueEntry("q", 1, 3, 0), queueEntry("q", 2, 3, 0)}}
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), topo)
	var sub *Subscription
	ch := async(func() error {
		var err error
		sub, err = c.Subscribe(context.Background(), "q", SubscribeOptions{AutoAck: true})
		return err
	})
	for i := range 3 {
		s := answerSubscribe(t, fc, uint64(20+i))
		if s.Partition != uint32(i) || !s.AutoAck || s.Prefetch != DefaultPrefetch || s.ConsumerGroup.Present || s.MemberID.Present {
			t.Fatalf("SUBSCRIBE %+v", s)
		}
	}
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 3 {
		sendDeliver(fc, uint64(20+i), "q", uint32(i), uint64(i), "x")
	}
	got := map[uint32]bool{}
	for range 3 {
		d := next(t, sub)
		got[d.Partition] = true
		if d.Retries != 2 || d.ContentType != "text/plain; charset=utf-8" || d.Received.IsZero() || !d.Published.IsZero() {
			t.Fatalf("delivery %+v", d)
		}
		if err := d.Ack(context.Background()); err != nil { // auto-ack: nothing sent
			t.Fatal(err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("partitions %v", got)
	}
	// Nothing was sent for the auto-ack settles: the next frame is ours.
	tch := async(func() error { _, err := c.Topology(context.Background(), ""); return err })
	fc.answerTopology(t, topo)
	wait(t, tch)
}

// A broker that sends more than prefetch unsettled deliveries is caught.
func TestPrefetchViolationCounted(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 2}, 1)
	for i := range 2 {
		sendDeliver(fc, 1, "q", 0, uint64(i), "ok")
	}
	// Settling one frees one slot: a third delivery is then fine.
	d := next(t, sub)
	d.Ack(context.Background())
	fc.expect(t, wire.OpAck)
	sendDeliver(fc, 1, "q", 0, 2, "ok")
	testkit.Eventually(t, stepTimeout, "buffer refilled", func() bool { return sub.parts[0].buffered() == 2 })
	if n := c.Stats().PrefetchViolations; n != 0 {
		t.Fatalf("violations = %d for a well-behaved broker", n)
	}
	sendDeliver(fc, 1, "q", 0, 3, "too many")
	testkit.Eventually(t, stepTimeout, "violation counted", func() bool { return c.Stats().PrefetchViolations == 1 })
	// The delivery is not lost.
	for range 3 {
		next(t, sub)
	}
}

// SUBSCRIPTION_CLOSED owner_moved re-subscribes (after a topology
// refresh); topic_deleted ends the partition with an error from Next.
func TestSubscriptionClosedPush(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Partitions: []uint32{0, 1}}, 1, 2)
	fc.send(wire.OpSubscriptionClosed, 50, &wire.SubscriptionClosed{SubID: 1, Code: wire.ReasonOwnerMoved, Message: "moved"})
	fc.answerTopology(t, wire.Topology{})
	if s := answerSubscribe(t, fc, 3); s.Partition != 0 {
		t.Fatalf("re-subscribed partition %d", s.Partition)
	}
	sendDeliver(fc, 3, "q", 0, 1, "after move")
	if d := next(t, sub); string(d.Payload) != "after move" {
		t.Fatalf("payload %q", d.Payload)
	}
	// The old sub_id is gone.
	sendDeliver(fc, 1, "q", 0, 2, "old id")
	testkit.Eventually(t, stepTimeout, "unknown sub delivery", func() bool { return c.Stats().UnknownSubDeliveries == 1 })

	fc.send(wire.OpSubscriptionClosed, 51, &wire.SubscriptionClosed{SubID: 2, Code: wire.ReasonTopicDeleted, Message: "gone"})
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	_, err := sub.Next(ctx)
	var sc *SubscriptionClosedError
	if !errors.As(err, &sc) || sc.Partition != 1 || sc.Reason != wire.ReasonTopicDeleted {
		t.Fatalf("err = %v", err)
	}
	// Partition 0 keeps delivering.
	sendDeliver(fc, 3, "q", 0, 3, "still here")
	if d := next(t, sub); string(d.Payload) != "still here" {
		t.Fatalf("payload %q", d.Payload)
	}
	// Unknown sub_id: ignored.
	fc.send(wire.OpSubscriptionClosed, 52, &wire.SubscriptionClosed{SubID: 99, Code: wire.ReasonServerError})
	sub.Close()
	if _, err := sub.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// After a reconnect the client reconciles its subscriptions and applies
// every verdict (docs/protocol.md#reconcile).
func TestReconcileVerdicts(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Partitions: []uint32{0, 1, 2, 3}, Prefetch: 4}, 10, 11, 12, 13)
	oldID := sendDeliver(fc, 10, "q", 0, 1, "before")
	old := next(t, sub)
	fc.close()

	fc2 := fb.next(t)
	if h := fc2.acceptHello(t, identityA, wire.ResumeResumed); h.Resume.Value != identityA {
		t.Fatalf("resume %+v", h.Resume)
	}
	f := fc2.expect(t, wire.OpReconcileClient)
	rc := f.body.(*wire.ReconcileClient)
	if f.hdr.RequestID != 3 || rc.Policy != wire.ReconcileRestore || len(rc.Subscriptions) != 4 {
		t.Fatalf("RECONCILE_CLIENT id %d %+v", f.hdr.RequestID, rc)
	}
	for i, s := range rc.Subscriptions {
		if s.SubID != uint64(10+i) || s.Partition != uint32(i) || s.Prefetch != 4 || s.AutoAck ||
			s.ConsumerGroup.Present || s.ConsumerTarget.Present || s.MemberID.Present {
			t.Fatalf("ReconcileSub %+v", s)
		}
	}
	view := func(id uint64, p uint32) wire.Option[wire.ReconcileSub] {
		return wire.Some(wire.ReconcileSub{SubID: id, Topic: "q", Partition: p, Prefetch: 4})
	}
	fc2.send(wire.OpReconcileResult, 3, &wire.ReconcileResult{Entries: []wire.ReconcileEntry{
		{Client: view(10, 0), Server: view(20, 0), Action: wire.ActionKeep, Reason: "server_id_changed", Code: wire.ReasonServerIDChanged},
		{Client: view(11, 1), Server: view(11, 1), Action: wire.ActionKeep, Reason: "matched", Code: wire.ReasonMatched},
		{Client: view(12, 2), Server: view(30, 2), Action: wire.ActionCloseClientSide, Reason: "server_mismatch", Code: wire.ReasonServerMismatch},
		// 13 is missing: closed as a server error (terminal).
		{Server: view(40, 9), Action: wire.ActionCloseServerSide, Reason: "client_missing", Code: wire.ReasonClientMissing},
	}})
	// Partition 2 re-subscribes.
	if s := answerSubscribe(t, fc2, 31); s.Partition != 2 {
		t.Fatalf("re-subscribed partition %d", s.Partition)
	}
	// Re-keyed: 20 now reaches partition 0; 11 still reaches partition 1.
	sendDeliver(fc2, 20, "q", 0, 2, "p0")
	sendDeliver(fc2, 11, "q", 1, 3, "p1")
	sendDeliver(fc2, 31, "q", 2, 4, "p2")
	got := map[string]bool{}
	var terminal error
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	for len(got) < 3 || terminal == nil {
		d, err := sub.Next(ctx)
		if err != nil {
			var sc *SubscriptionClosedError
			if !errors.As(err, &sc) || sc.Partition != 3 || sc.Reason != wire.ReasonServerError {
				t.Fatalf("Next: %v", err)
			}
			terminal = err
			continue
		}
		got[string(d.Payload)] = true
	}
	// The session was resumed: the old delivery is still settleable, on
	// the new connection, with its original DELIVER id.
	if err := old.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a := fc2.expect(t, wire.OpAck); a.hdr.RequestID != oldID || a.body.(*wire.Ack).Tags[0] != 1 {
		t.Fatalf("ACK id %d", a.hdr.RequestID)
	}
	if s := c.Stats(); s.ProtocolViolations != 1 || s.UnknownSubDeliveries != 0 {
		t.Fatalf("stats %+v (the missing entry is one violation)", s)
	}
}

// A session that was not resumed voids earlier deliveries: settling them
// returns ErrStaleDelivery and sends nothing; buffered ones are dropped.
func TestStaleDeliveries(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 4}, 1)
	sendDeliver(fc, 1, "q", 0, 1, "taken")
	sendDeliver(fc, 1, "q", 0, 2, "buffered")
	taken := next(t, sub)
	testkit.Eventually(t, stepTimeout, "buffered", func() bool { return sub.parts[0].buffered() == 1 })
	fc.close()

	fc2 := fb.next(t)
	fc2.acceptHello(t, wire.ResumeIdentity{OwnerID: uuidOf(1), ClientID: uuidOf(8), ResumeToken: uuidOf(9)}, wire.ResumeResumedAfterRestart)
	f := fc2.expect(t, wire.OpReconcileClient)
	s := f.body.(*wire.ReconcileClient).Subscriptions[0]
	fc2.send(wire.OpReconcileResult, 3, &wire.ReconcileResult{Entries: []wire.ReconcileEntry{{
		Client: wire.Some(s), Server: wire.Some(wire.ReconcileSub{SubID: 7, Topic: "q", Prefetch: 4}),
		Action: wire.ActionKeep, Reason: "server_restored", Code: wire.ReasonServerRestored,
	}}})
	if err := taken.Ack(context.Background()); !errors.Is(err, ErrStaleDelivery) {
		t.Fatalf("Ack: %v", err)
	}
	if sub.parts[0].buffered() != 0 {
		t.Fatal("stale buffered delivery kept")
	}
	sendDeliver(fc2, 7, "q", 0, 5, "fresh")
	d := next(t, sub)
	if string(d.Payload) != "fresh" {
		t.Fatalf("payload %q", d.Payload)
	}
	if err := d.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The only frame after the reconcile is the fresh ACK.
	if a := fc2.expect(t, wire.OpAck); a.body.(*wire.Ack).Tags[0] != 5 {
		t.Fatalf("ACK %+v", a.body)
	}
	if c.Stats().StaleSettles != 1 {
		t.Fatalf("stats %+v", c.Stats())
	}
}

// Subscriptions whose connection is lost and not restored (the broker
// is gone) re-subscribe through fresh routing.
func TestSubscriptionResubscribesAfterFailedReconnect(t *testing.T) {
	boot := newFake(t, nil)
	owner := newFake(t, nil)
	topo := wire.Topology{Generation: 1, Queues: []wire.QueueEntry{queueEntry("q", 0, 1, 0, owner.endpoint())}}
	c, bfc := dialScripted(t, boot, testOptions(t, boot.addr), topo)
	var sub *Subscription
	ch := async(func() error {
		var err error
		sub, err = c.Subscribe(context.Background(), "q", SubscribeOptions{Prefetch: 1})
		return err
	})
	ofc := owner.next(t)
	ofc.acceptHello(t, identityA, wire.ResumeNew)
	answerSubscribe(t, ofc, 1)
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	owner.close() // the owner dies: reconnect fails
	// The supervisor refreshes the topology: the partition moved to boot.
	bfc.answerTopology(t, wire.Topology{Generation: 2, Queues: []wire.QueueEntry{queueEntry("q", 0, 1, 0)}})
	answerSubscribe(t, bfc, 2)
	sendDeliver(bfc, 2, "q", 0, 1, "moved")
	if d := next(t, sub); string(d.Payload) != "moved" {
		t.Fatalf("payload %q", d.Payload)
	}
}

func TestSubscribeErrors(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	// SUBSCRIBE_ERR 404 is returned (not retried).
	ch := async(func() error { _, err := c.Subscribe(context.Background(), "q", SubscribeOptions{}); return err })
	f := fc.expect(t, wire.OpSubscribe)
	fc.send(wire.OpSubscribeErr, f.hdr.RequestID, &wire.ErrorBody{Code: 404, Message: "no such queue"})
	if err := wait(t, ch); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
	// A SUBSCRIBE_OK that does not echo the request is a protocol error.
	ch = async(func() error {
		_, err := c.Subscribe(context.Background(), "q", SubscribeOptions{Prefetch: 3})
		return err
	})
	f = fc.expect(t, wire.OpSubscribe)
	fc.send(wire.OpSubscribeOK, f.hdr.RequestID, &wire.SubscribeOK{SubID: 1, Topic: "q", Prefetch: 1})
	if err := wait(t, ch); !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v", err)
	}
	// A REDIRECT answering SUBSCRIBE is followed.
	other := newFake(t, nil)
	var sub *Subscription
	ch = async(func() error {
		var err error
		sub, err = c.Subscribe(context.Background(), "r", SubscribeOptions{})
		return err
	})
	f = fc.expect(t, wire.OpSubscribe)
	fc.send(wire.OpRedirect, f.hdr.RequestID, &wire.Redirect{Topic: "r", Owners: []wire.AdvertisedAddress{other.endpoint()}})
	ofc := other.next(t)
	ofc.acceptHello(t, identityA, wire.ResumeNew)
	answerSubscribe(t, ofc, 8)
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	sub.Close()
}

// Auto-ack subscriptions are flow-controlled by TCP: a full buffer parks
// the reader (not a prefetch violation, and not a dead connection).
func TestAutoAckBackpressure(t *testing.T) {
	fb := newFake(t, nil)
	opts := testOptions(t, fb.addr)
	opts.Heartbeat = 50 * time.Millisecond
	c, fc := dialScripted(t, fb, opts, wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 1, AutoAck: true}, 1)
	for i := range 3 {
		sendDeliver(fc, 1, "q", 0, uint64(i), fmt.Sprint(i))
	}
	testkit.Eventually(t, stepTimeout, "reader parked", func() bool { return sub.parts[0].buffered() == 1 })
	// Stay parked beyond 3 heartbeats: let 4 client PINGs go unanswered.
	for pings := 0; pings < 4; {
		if fc.expectRaw(t, wire.OpPing).hdr.Op == wire.OpPing {
			pings++
		}
	}
	for i := range 3 {
		if d := next(t, sub); string(d.Payload) != fmt.Sprint(i) {
			t.Fatalf("delivery %d: %q", i, d.Payload)
		}
	}
	if s := c.Stats(); s.PrefetchViolations != 0 || s.Reconnects != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// GOING_AWAY is logged, ASSIGNMENT_CHANGED and RECONCILE_SERVER ignored.
func TestIgnoredPushes(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	fc.send(wire.OpGoingAway, 0, &wire.GoingAway{GraceMillis: 1000, Message: "drain"})
	fc.send(wire.OpAssignmentChanged, 3, &wire.AssignmentChanged{Topic: "q", ConsumerGroup: "cg", Assigned: []uint32{0}})
	fc.send(wire.OpReconcileServer, 4, &wire.ReconcileServer{})
	fc.send(wire.OpPing, 9, nil)
	fc.expectRaw(t, wire.OpPong)
	if s := c.Stats(); s.ProtocolViolations != 0 || s.Reconnects != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A Subscribe to every partition of a queue the cache does not know reads
// the queue's entries first (S-114), instead of settling for partition 0:
// the queue may be newer than the last TOPOLOGY_UPDATE this client got.
func TestSubscribeColdCacheReadsCount(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{Generation: 3})
	var sub *Subscription
	ch := async(func() error {
		var err error
		sub, err = c.Subscribe(context.Background(), "fresh", SubscribeOptions{Prefetch: 4})
		return err
	})
	req := fc.answerTopology(t, wire.Topology{Generation: 4, Queues: []wire.QueueEntry{
		queueEntry("fresh", 0, 3, 1, fb.endpoint()), queueEntry("fresh", 1, 3, 1, fb.endpoint()),
		queueEntry("fresh", 2, 3, 1, fb.endpoint())}})
	if v, _ := req.Topic.Get(); v != "fresh" {
		t.Fatalf("TOPOLOGY asked for topic %q, want the subscribed one", v)
	}
	got := map[uint32]bool{}
	for i := range 3 {
		got[answerSubscribe(t, fc, uint64(10+i)).Partition] = true
	}
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if len(got) != 3 || len(sub.Partitions()) != 3 {
		t.Fatalf("subscribed partitions %v (%v), want 0, 1 and 2", got, sub.Partitions())
	}
}

// A Client's connection carries one subscription per partition: a second
// Subscribe of a partition it already reads fails at once instead of
// retrying the broker's 409 until its deadline.
func TestSubscribeTwiceFailsFast(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 8}, 5)
	start := time.Now()
	_, err := c.Subscribe(context.Background(), "q", SubscribeOptions{Partitions: []uint32{0}})
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("second Subscribe: %v after %v", err, time.Since(start))
	}
	// Another group of the topic is another queue.
	if c.partsTaken("q", wire.Some("other"), false, map[uint32]bool{0: true}) {
		t.Fatal("a different group counted as taken")
	}
}

// When the broker ends a partition's subscription and the client
// subscribes again, what is still buffered from the old one belongs to a
// window the broker gave back: it released those leases (or, for a
// named stream, restarts at its cursor) and gives the new subscription a
// full prefetch. A manual-ack subscription drops them instead of counting
// them against the new prefetch, where the new subscription's first
// DELIVERs would count as prefetch violations, behind deliveries whose
// tags are void (and which come again). A delivery of the old
// subscription that the application holds settles as before and leaves
// the new one's accounting alone: a DELIVER past its window is still
// caught. The old subscription ends either way: SUBSCRIPTION_CLOSED
// owner_moved, or a reconcile verdict after a resumed reconnect.
func TestResubscribeDropsOldBufferedDeliveries(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, fb *fakeBroker, fc *fakeConn) *fakeConn // ends sub 1; returns the connection of the new SUBSCRIBE
	}{
		{"subscription closed", func(t *testing.T, _ *fakeBroker, fc *fakeConn) *fakeConn {
			fc.send(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: 1, Code: wire.ReasonOwnerMoved,
				Message: "the upstream session to the partition's owner ended; subscribe again"})
			return fc
		}},
		{"reconcile", func(t *testing.T, fb *fakeBroker, fc *fakeConn) *fakeConn {
			fc.close()
			fc2 := fb.next(t)
			fc2.acceptHello(t, identityA, wire.ResumeResumed)
			fc2.standing = fc.standing
			f := fc2.expect(t, wire.OpReconcileClient)
			s := f.body.(*wire.ReconcileClient).Subscriptions[0]
			fc2.send(wire.OpReconcileResult, f.hdr.RequestID, &wire.ReconcileResult{Entries: []wire.ReconcileEntry{{
				Client: wire.Some(s), Server: wire.Some(wire.ReconcileSub{SubID: 9, Topic: "q", Prefetch: 2}),
				Action: wire.ActionCloseClientSide, Reason: "server_mismatch", Code: wire.ReasonServerMismatch,
			}}})
			return fc2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := newFake(t, nil)
			c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
			sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 2}, 1)
			sendDeliver(fc, 1, "q", 0, 1, "old")
			held := next(t, sub) // the application holds tag 1; 2 and 3 stay buffered
			sendDeliver(fc, 1, "q", 0, 2, "old")
			sendDeliver(fc, 1, "q", 0, 3, "old")
			testkit.Eventually(t, stepTimeout, "old deliveries buffered", func() bool { return sub.parts[0].buffered() == 2 })
			if n := c.Stats().PrefetchViolations; n != 0 {
				t.Fatalf("violations = %d before the re-subscribe", n)
			}

			fc = tc.end(t, fb, fc)
			answerSubscribe(t, fc, 3)
			sendDeliver(fc, 3, "q", 0, 11, "new")
			sendDeliver(fc, 3, "q", 0, 12, "new")
			caughtUp := func() { // a reply read after the DELIVERs: the reader handled them
				t.Helper()
				ch := async(func() error { _, err := c.Topology(context.Background(), "q"); return err })
				fc.answerTopology(t, wire.Topology{})
				if err := wait(t, ch); err != nil {
					t.Fatal(err)
				}
			}
			caughtUp()
			if s := c.Stats(); s.PrefetchViolations != 0 || s.ProtocolViolations != 0 {
				t.Fatalf("stats %+v: the new subscription's window was counted with the old one's deliveries", s)
			}
			if n := sub.parts[0].buffered(); n != 2 {
				t.Fatalf("%d deliveries buffered, want the new subscription's 2 (prefetch)", n)
			}

			// The held delivery of the old subscription settles as before
			// (its ACK carries its own tag; the broker ignores what it does
			// not know) and frees nothing in the new window.
			if err := held.Ack(context.Background()); err != nil {
				t.Fatalf("Ack of the held old delivery: %v", err)
			}
			if a := fc.expect(t, wire.OpAck).body.(*wire.Ack); len(a.Tags) != 1 || a.Tags[0] != 1 {
				t.Fatalf("ACK %+v, want tag 1", a)
			}
			sendDeliver(fc, 3, "q", 0, 13, "past the window")
			caughtUp()
			if n := c.Stats().PrefetchViolations; n != 1 {
				t.Fatalf("violations = %d, want 1: a DELIVER past the new window", n)
			}
			for _, want := range []uint64{11, 12, 13} {
				d := next(t, sub)
				if d.Tag != want || string(d.Payload) == "old" {
					t.Fatalf("delivery tag %d %q, want tag %d of the new subscription", d.Tag, d.Payload, want)
				}
				if err := d.Ack(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// An auto-ack subscription keeps what it buffered from a subscription the
// broker ended: the broker settled those deliveries when it sent them,
// so they are handed out (before the new subscription's), not dropped.
// The buffer bound stays the reader's backpressure, not a violation.
func TestResubscribeAutoAckKeepsOldBufferedDeliveries(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 2, AutoAck: true}, 1)
	sendDeliver(fc, 1, "q", 0, 1, "old")
	sendDeliver(fc, 1, "q", 0, 2, "old")
	testkit.Eventually(t, stepTimeout, "old deliveries buffered", func() bool { return sub.parts[0].buffered() == 2 })
	fc.send(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: 1, Code: wire.ReasonOwnerMoved, Message: "moved"})
	answerSubscribe(t, fc, 3)
	sendDeliver(fc, 3, "q", 0, 11, "new")
	sendDeliver(fc, 3, "q", 0, 12, "new")
	for _, want := range []uint64{1, 2, 11, 12} {
		if d := next(t, sub); d.Tag != want {
			t.Fatalf("delivery tag %d %q, want %d", d.Tag, d.Payload, want)
		}
	}
	if s := c.Stats(); s.PrefetchViolations != 0 || s.DroppedDeliveries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The same for stream subscriptions: a named one without auto-ack is
// bounded by prefetch and subscribes again at its cursor, at or before
// what it buffered, so that is dropped (the records come again, without
// counting as prefetch violations); an unnamed one continues after the
// last record it received, so it keeps and hands out what it buffered.
func TestResubscribeStreamBufferedRecords(t *testing.T) {
	for _, tc := range []struct {
		durable string
		again   []uint64 // offsets the new subscription sends
		want    []string // what Next hands out, "offset payload"
	}{
		{"audit", []uint64{5, 6}, []string{"5 new", "6 new"}},
		{"", []uint64{7}, []string{"5 old", "6 old", "7 new"}},
	} {
		t.Run(fmt.Sprintf("durable=%q", tc.durable), func(t *testing.T) {
			fb := newFake(t, nil)
			c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
			answer := func(subID uint64) *wire.SubscribeStream {
				t.Helper()
				f := fc.expect(t, wire.OpSubscribeStream)
				s := f.body.(*wire.SubscribeStream)
				fc.send(wire.OpSubscribeOK, f.hdr.RequestID, &wire.SubscribeOK{SubID: subID, Topic: s.Topic, Partition: s.Partition, Prefetch: s.Prefetch})
				return s
			}
			var sub *Subscription
			ch := async(func() error {
				var err error
				sub, err = c.SubscribeStream(context.Background(), "s", StreamOptions{Partitions: []uint32{0}, Prefetch: 2, DurableName: tc.durable})
				return err
			})
			answer(1)
			if err := wait(t, ch); err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			sendDeliver(fc, 1, "s", 0, 5, "old")
			sendDeliver(fc, 1, "s", 0, 6, "old")
			testkit.Eventually(t, stepTimeout, "records buffered", func() bool { return sub.parts[0].buffered() == 2 })

			fc.send(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: 1, Code: wire.ReasonOwnerMoved, Message: "moved"})
			s := answer(2)
			testkit.Eventually(t, stepTimeout, "subscribed again", sub.parts[0].isAttached)
			if tc.durable == "" && s.Start != StartAt(7) {
				t.Fatalf("unnamed re-subscribe starts at %+v, want after the last record received", s.Start)
			}
			for _, off := range tc.again {
				sendDeliver(fc, 2, "s", 0, off, "new")
			}
			for _, want := range tc.want {
				d := next(t, sub)
				if got := fmt.Sprintf("%d %s", d.Offset, d.Payload); got != want {
					t.Fatalf("record %q, want %q", got, want)
				}
			}
			quietCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if d, err := sub.Next(quietCtx); err == nil {
				t.Fatalf("extra record %d %q", d.Offset, d.Payload)
			}
			if s := c.Stats(); s.PrefetchViolations != 0 || s.ProtocolViolations != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}
