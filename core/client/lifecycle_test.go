package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Conservative policy: the byte is 0 on the wire, and a `recreate`
// verdict makes the client re-subscribe itself.
func TestReconcileConservativeRecreate(t *testing.T) {
	fb := newFake(t, nil)
	opts := testOptions(t, fb.addr)
	opts.ReconcilePolicy = ReconcileConservative
	c, fc := dialScripted(t, fb, opts, wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Prefetch: 2}, 4)
	fc.close()
	fc2 := fb.next(t)
	fc2.acceptHello(t, identityA, wire.ResumeNotFound)
	f := fc2.expect(t, wire.OpReconcileClient)
	rc := f.body.(*wire.ReconcileClient)
	if rc.Policy != wire.ReconcileConservative || len(rc.Subscriptions) != 1 {
		t.Fatalf("RECONCILE_CLIENT %+v", rc)
	}
	fc2.send(wire.OpReconcileResult, 3, &wire.ReconcileResult{Entries: []wire.ReconcileEntry{{
		Client: wire.Some(rc.Subscriptions[0]), Action: wire.ActionRecreateClientSide, Reason: "recreate", Code: wire.ReasonRecreate,
	}}})
	answerSubscribe(t, fc2, 9)
	sendDeliver(fc2, 9, "q", 0, 1, "again")
	if d := next(t, sub); string(d.Payload) != "again" {
		t.Fatalf("payload %q", d.Payload)
	}
}

// Credentials are presented on every connect, resumed or not (docs/protocol.md#authentication: the
// broker re-checks them on an authenticated session).
func TestAuthOnEveryConnect(t *testing.T) {
	fb := newFake(t, nil)
	opts := testOptions(t, fb.addr)
	opts.Username, opts.Password = "alice", "pw"
	ch := async(func() error {
		c, err := Dial(context.Background(), opts)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return err
	})
	fc := fb.next(t)
	fc.acceptHello(t, identityA, wire.ResumeNew)
	f := fc.expect(t, wire.OpAuth)
	fc.send(wire.OpAuthOK, f.hdr.RequestID, nil)
	fc.answerTopology(t, wire.Topology{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	fc.close()
	fc2 := fb.next(t)
	fc2.acceptHello(t, identityA, wire.ResumeResumed)
	if a := fc2.expect(t, wire.OpAuth); a.hdr.RequestID != 2 || a.body.(*wire.Auth).Username != "alice" {
		t.Fatalf("AUTH id %d %+v", a.hdr.RequestID, a.body)
	}
	fc2.send(wire.OpAuthOK, 2, nil)
}

func TestDelayedPublishAndDeclares(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	ctx := context.Background()
	pub := c.Publisher("t", PublisherOptions{})
	if _, err := pub.PublishDelayed(ctx, Message{TTL: time.Second}, time.Now(), true); err == nil {
		t.Fatal("TTL accepted on a delayed publish")
	}
	if err := pub.Publish(ctx, Message{Headers: map[string]string{"fibril.retries": "1"}}); err == nil {
		t.Fatal("reserved header accepted on a fire-and-forget publish")
	}
	at := time.UnixMilli(1_800_000_000_000)
	var off uint64
	ch := async(func() error {
		var err error
		off, err = pub.PublishDelayed(ctx, Message{ContentType: "application/x-thing", Payload: []byte("later")}, at, true)
		return err
	})
	f := fc.expect(t, wire.OpPublishDelayed)
	pd := f.body.(*wire.PublishDelayed)
	if pd.NotBefore != 1_800_000_000_000 || !pd.RequireConfirm || pd.ContentType.Tag != wire.ContentCustom || pd.ContentType.Custom != "application/x-thing" {
		t.Fatalf("PUBLISH_DELAYED %+v", pd)
	}
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 12})
	if err := wait(t, ch); err != nil || off != 12 {
		t.Fatalf("off %d err %v", off, err)
	}

	retries := uint32(3)
	var n uint32
	ch = async(func() error {
		var err error
		n, err = c.DeclareQueue(ctx, QueueSpec{Topic: "q", Group: "g", Partitions: 4, MaxRetries: &retries,
			DLQ: &DLQPolicy{Kind: wire.DLQNamed, Topic: "dlq"}, DefaultTTL: 30 * time.Second})
		return err
	})
	f = fc.expect(t, wire.OpDeclareQueue)
	dq := f.body.(*wire.DeclareQueue)
	if dq.Group != wire.Some("g") || dq.PartitionCount != wire.Some(uint32(4)) || dq.DLQMaxRetries != wire.Some(retries) ||
		dq.DLQPolicy.Value.Topic != "dlq" || dq.DefaultMessageTTLMillis != wire.Some(uint64(30000)) {
		t.Fatalf("DECLARE_QUEUE %+v", dq)
	}
	fc.send(wire.OpDeclareQueueOK, f.hdr.RequestID, &wire.DeclareQueueOK{Status: "stored", PartitionCount: 4})
	req := fc.answerTopology(t, wire.Topology{Generation: 1, Queues: []wire.QueueEntry{
		{Topic: "q", Partition: 0, Group: wire.Some("g"), PartitionCount: 4}}})
	if req.Topic != wire.Some("q") || req.Group != wire.Some("g") {
		t.Fatalf("TOPOLOGY %+v", req)
	}
	if err := wait(t, ch); err != nil || n != 4 {
		t.Fatalf("n %d err %v", n, err)
	}
	if got, _, ok := c.topo.count("q", wire.Some("g")); !ok || got != 4 {
		t.Fatalf("count %d", got)
	}

	ch = async(func() error {
		var err error
		n, err = c.DeclareStream(ctx, StreamSpec{Topic: "s", MaxAge: time.Minute})
		return err
	})
	f = fc.expect(t, wire.OpDeclarePlexus)
	dp := f.body.(*wire.DeclarePlexus)
	if dp.Durability != wire.DurabilityDurable || dp.Retention.MaxAgeMillis != wire.Some(uint64(60000)) || dp.PartitionCount.Present {
		t.Fatalf("DECLARE_PLEXUS %+v", dp)
	}
	fc.send(wire.OpDeclarePlexusOK, f.hdr.RequestID, &wire.DeclarePlexusOK{Status: "stored", PartitionCount: 2})
	fc.answerTopology(t, wire.Topology{})
	if err := wait(t, ch); err != nil || n != 2 {
		t.Fatalf("n %d err %v", n, err)
	}
}

// Close fails later calls with ErrClosed and in-flight ones as unknown.
func TestClientClose(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	ch, _ := publishAsync(c.Publisher("t", PublisherOptions{}), Message{})
	fc.expect(t, wire.OpPublish)
	c.Close()
	if err := wait(t, ch); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("in flight: %v", err)
	}
	if _, err := c.Topology(context.Background(), ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	fc.expectEOF(t)
}
