package forward_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// reconcileEntry returns the RECONCILE_RESULT entries about partition of
// topic "fwd".
func reconcileEntries(res *wire.ReconcileResult, partition uint32) []wire.ReconcileEntry {
	var out []wire.ReconcileEntry
	for _, e := range res.Entries {
		v, ok := e.Client.Get()
		if !ok {
			v, _ = e.Server.Get()
		}
		if v.Topic == "fwd" && v.Partition == partition {
			out = append(out, e)
		}
	}
	return out
}

// core/forward/README.md#upstream-sessions: a RECONCILE_CLIENT that lists a
// forwarded subscription whose SUBSCRIBE the owner has not answered yet
// keeps it, under the id its SUBSCRIBE_OK then carries; it is neither
// closed on the client side nor on the owner.
func TestGatewayReconcileKeepsSubscribeInFlight(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	c := e.dial()
	c.login()
	c.sendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
	up := o.next()
	<-o.ffs
	h, _ := up.read() // the owner holds its SUBSCRIBE_OK until the reconcile has run
	if h.Op != wire.OpSubscribe {
		t.Fatalf("owner got %s", h.Op)
	}
	c.sendID(wire.OpReconcileClient, 10, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{Topic: "fwd", Partition: 1, Prefetch: 4}}})
	res := c.expect(wire.OpReconcileResult, 10).(*wire.ReconcileResult)
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	ok := c.expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK)
	entries := reconcileEntries(res, 1)
	if len(entries) != 1 || entries[0].Action != wire.ActionKeep || entries[0].Server.Value.SubID != ok.SubID {
		t.Fatalf("reconcile of a SUBSCRIBE in flight: %+v, want one keep under the id %d of its SUBSCRIBE_OK", entries, ok.SubID)
	}
	// The owner was not asked to close anything: the next frame it gets
	// is the client's next operation.
	c.sendID(wire.OpPublish, 0, &wire.Publish{Topic: "fwd", Partition: 1, Payload: []byte("after")})
	if h, _ := up.read(); h.Op != wire.OpPublish {
		t.Fatalf("owner got %s after the reconcile, want the client's PUBLISH", h.Op)
	}
}

// core/forward/README.md#upstream-sessions: the SUBSCRIBE_OK of a
// subscription the client listed arrives while the reconcile runs (held by
// the owner until then): the reconcile keeps it, with that id, and never
// closes it on the owner.
func TestGatewayReconcileRacingSubscribeOK(t *testing.T) {
	e, o, r := newGatewayEnv(t)
	c := e.dial()
	c.login()
	c.sendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	// The reconcile stops while it routes partition 2 (listed after
	// partition 1) until the SUBSCRIBE_OK of partition 1 is out.
	inRoute, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(ref core.PartitionRef) {
		if ref.Partition != 2 {
			return
		}
		once.Do(func() {
			close(inRoute)
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		})
	}
	r.onRoute.Store(&hook)
	c.sendID(wire.OpReconcileClient, 10, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{Topic: "fwd", Partition: 1, Prefetch: 4}, {SubID: 77, Topic: "fwd", Partition: 2, Prefetch: 4}}})
	select {
	case <-inRoute:
	case <-time.After(5 * time.Second):
		t.Fatal("the reconcile did not route partition 2")
	}
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	ok := c.expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK)
	close(release)
	res := c.expect(wire.OpReconcileResult, 10).(*wire.ReconcileResult)
	entries := reconcileEntries(res, 1)
	if len(entries) != 1 || entries[0].Action != wire.ActionKeep || entries[0].Server.Value.SubID != ok.SubID {
		t.Fatalf("reconcile racing the SUBSCRIBE_OK: %+v, want one keep under the id %d", entries, ok.SubID)
	}
	c.sendID(wire.OpPublish, 0, &wire.Publish{Topic: "fwd", Partition: 1, Payload: []byte("after")})
	if h, body := up.read(); h.Op != wire.OpPublish {
		t.Fatalf("owner got %s %x after the reconcile, want the client's PUBLISH (nothing closed)", h.Op, body)
	}
}

// core/forward/README.md#upstream-sessions: a subscription the client
// dropped is closed on its owner by an upstream RECONCILE_CLIENT that
// lists what stays; a SUBSCRIBE in flight on that upstream stays too.
func TestGatewayReconcileCloseKeepsSubscribeInFlight(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	c := e.dial()
	c.login()
	c.sendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	c.expect(wire.OpSubscribeOK, 9)
	c.sendID(wire.OpSubscribe, 11, &wire.Subscribe{Topic: "fwd", Partition: 3, Prefetch: 4})
	h3, _ := up.read() // held
	c.sendID(wire.OpReconcileClient, 12, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{Topic: "fwd", Partition: 3, Prefetch: 4}}})
	res := c.expect(wire.OpReconcileResult, 12).(*wire.ReconcileResult)
	if e1 := reconcileEntries(res, 1); len(e1) != 1 || e1[0].Action != wire.ActionCloseServerSide {
		t.Fatalf("the dropped subscription: %+v, want close_server_side", e1)
	}
	rh, body := up.read()
	var rc wire.ReconcileClient
	if rh.Op != wire.OpReconcileClient || rc.Decode(body) != nil {
		t.Fatalf("owner got %s, want the RECONCILE_CLIENT that closes partition 1", rh.Op)
	}
	if len(rc.Subscriptions) != 1 || rc.Subscriptions[0].Partition != 3 {
		t.Fatalf("upstream RECONCILE_CLIENT lists %+v, want the SUBSCRIBE in flight (partition 3) kept", rc.Subscriptions)
	}
	up.send(wire.OpReconcileResult, rh.RequestID, &wire.ReconcileResult{})
	up.send(wire.OpSubscribeOK, h3.RequestID, &wire.SubscribeOK{SubID: 6, Topic: "fwd", Partition: 3, Prefetch: 4})
	c.expect(wire.OpSubscribeOK, 11)
}
