package session

import (
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

func uuid(b byte) wire.UUID { return wire.UUID{b} }

// subscribeExclusive sends an exclusive SUBSCRIBE and returns its id.
func (c *client) subscribeExclusive(topic string, partition uint32, cohort string, member wire.Option[wire.UUID]) uint64 {
	c.t.Helper()
	return c.Send(wire.OpSubscribe, &wire.Subscribe{Topic: topic, Partition: partition, Prefetch: 10,
		ConsumerGroup: wire.Some(cohort), MemberID: member})
}

// nextAssignment reads frames until an ASSIGNMENT_CHANGED arrives.
func (c *client) nextAssignment() *wire.AssignmentChanged {
	c.t.Helper()
	for {
		h, b := c.Read(5 * time.Second)
		switch h.Op {
		case wire.OpAssignmentChanged:
			return b.(*wire.AssignmentChanged)
		case wire.OpPing:
			c.SendID(wire.OpPong, h.RequestID, nil)
		default:
			c.t.Fatalf("expected ASSIGNMENT_CHANGED, got %s: %+v", h.Op, b)
		}
	}
}

// An exclusive consumer group on one broker (S-87 … S-96): members get
// their member id and assignments; each partition delivers to its
// assigned member only; a partition moves only once the member it leaves
// settled what it held, so its order holds; a member that leaves hands
// its partitions to the others.
func TestExclusiveConsumerGroup(t *testing.T) {
	e := newEnv(t)
	pub := e.dial()
	pub.login()
	pub.Expect(wire.OpDeclareQueueOK, pub.Send(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "q", PartitionCount: wire.Some(uint32(2))}))
	publishTo := func(p uint32, payload string) {
		t.Helper()
		pub.Expect(wire.OpPublishOK, pub.Send(wire.OpPublish, &wire.Publish{Topic: "q", Partition: p, RequireConfirm: true, Payload: []byte(payload)}))
	}

	a := e.dial()
	a.login()
	okA := a.Expect(wire.OpSubscribeOK, a.subscribeExclusive("q", 0, "g", wire.None[wire.UUID]())).(*wire.SubscribeOK)
	memberA, ok := okA.MemberID.Get()
	if !ok || memberA == (wire.UUID{}) || okA.ConsumerGroup.Value != "g" {
		t.Fatalf("SUBSCRIBE_OK of a member: %+v", okA)
	}
	if ac := a.nextAssignment(); !slices.Equal(ac.Assigned, []uint32{0}) || ac.ConsumerGroup != "g" {
		t.Fatalf("first assignment %+v", ac)
	}
	ok1 := a.Expect(wire.OpSubscribeOK, a.subscribeExclusive("q", 1, "g", wire.None[wire.UUID]())).(*wire.SubscribeOK)
	if ok1.MemberID.Value != memberA {
		t.Fatalf("the connection's second subscribe got member %x, want %x (S-89)", ok1.MemberID.Value, memberA)
	}
	if ac := a.nextAssignment(); !slices.Equal(ac.Assigned, []uint32{0, 1}) || !slices.Equal(ac.Added, []uint32{1}) {
		t.Fatalf("second assignment %+v", ac)
	}
	// S-89: another id on this connection is 409, an all-zero one 400.
	a.ExpectError(wire.OpError, a.subscribeExclusive("other", 0, "g", wire.Some(uuid(9))), wire.CodeConflict)
	a.ExpectError(wire.OpError, a.subscribeExclusive("other", 0, "g", wire.Some(wire.UUID{})), wire.CodeBadRequest)

	publishTo(1, "m1")
	_, d1 := a.nextDeliver()
	if string(d1.Payload) != "m1" {
		t.Fatalf("a got %q", d1.Payload)
	}

	b := e.dial()
	b.login()
	b.Expect(wire.OpSubscribeOK, b.subscribeExclusive("q", 0, "g", wire.None[wire.UUID]()))
	if ac := b.nextAssignment(); len(ac.Assigned) != 0 {
		t.Fatalf("b subscribed to partition 0 only, which a keeps: %+v", ac)
	}
	b.Expect(wire.OpSubscribeOK, b.subscribeExclusive("q", 1, "g", wire.None[wire.UUID]()))
	acB := b.nextAssignment()
	acA := a.nextAssignment()
	if !slices.Equal(acB.Assigned, []uint32{1}) || !slices.Equal(acA.Assigned, []uint32{0}) || !slices.Equal(acA.Revoked, []uint32{1}) ||
		acB.Generation != acA.Generation {
		t.Fatalf("after b joined: a %+v, b %+v", acA, acB)
	}
	// S-88: one cohort per queue.
	c := e.dial()
	c.login()
	c.ExpectError(wire.OpError, c.subscribeExclusive("q", 0, "other", wire.None[wire.UUID]()), wire.CodeConflict)

	// Partition 1 moved to b while a still holds m1: b gets nothing of it
	// until a settles m1 (a NACK with requeue here), then m1 and m2 in order.
	publishTo(1, "m2")
	publishTo(0, "n1")
	if _, d := a.nextDeliver(); string(d.Payload) != "n1" {
		t.Fatalf("a got %q from partition 0", d.Payload)
	}
	b.ExpectSilence(100 * time.Millisecond)
	a.SendID(wire.OpNack, 0, &wire.Nack{Topic: "q", Partition: 1, Tags: []uint64{d1.DeliveryTag}, Requeue: true})
	for _, want := range []string{"m1", "m2"} {
		if _, d := b.nextDeliver(); string(d.Payload) != want || d.Partition != 1 {
			t.Fatalf("b got %q from partition %d, want %s from 1", d.Payload, d.Partition, want)
		}
	}

	// a leaves (no reconnect grace): b takes partition 0 too (S-95).
	e.grace.Store(0)
	a.nc.Close()
	if ac := b.nextAssignment(); !slices.Equal(ac.Assigned, []uint32{0, 1}) {
		t.Fatalf("after a left, b has %+v", ac)
	}
	publishTo(0, "n2")
	if _, d := b.nextDeliver(); string(d.Payload) != "n1" { // a never acked n1: it went back to Ready
		t.Fatalf("b got %q, want n1 first", d.Payload)
	}
}

// S-96: a reconcile restore rejoins an exclusive subscription as the same
// member: the restored entry keeps the member id, the session adopts it,
// and the member is told its assignment again.
func TestCohortRestoreRejoinsAsTheSameMember(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpDeclareQueueOK, c.Send(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "q", PartitionCount: wire.Some(uint32(1))}))
	member := uuid(0x42)
	id := c.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{SubID: 7, Topic: "q", Prefetch: 2, ConsumerGroup: wire.Some("g"), MemberID: wire.Some(member)},
	}})
	res := c.Expect(wire.OpReconcileResult, id).(*wire.ReconcileResult)
	if len(res.Entries) != 1 || res.Entries[0].Action != wire.ActionKeep || res.Entries[0].Server.Value.MemberID.Value != member ||
		res.Entries[0].Server.Value.ConsumerGroup.Value != "g" {
		t.Fatalf("restore of a member's subscription: %+v", res)
	}
	if ac := c.nextAssignment(); !slices.Equal(ac.Assigned, []uint32{0}) {
		t.Fatalf("assignment after the restore: %+v", ac)
	}
	// The session now is that member: another id is refused (S-89).
	c.ExpectError(wire.OpError, c.subscribeExclusive("other", 0, "g", wire.Some(uuid(0x43))), wire.CodeConflict)
}
