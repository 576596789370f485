package forward_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// expectQuiet requires that the gateway sends nothing but heartbeats on
// this upstream session within d.
func (c *ownerConn) expectQuiet(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		h, body, err := c.tryRead(left)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if err != nil {
			c.t.Fatalf("the upstream session ended: %v", err)
		}
		switch h.Op {
		case wire.OpPing:
			c.send(wire.OpPong, h.RequestID, nil)
		case wire.OpPong:
		default:
			c.t.Fatalf("the gateway sent %s %x on an upstream session that should stay untouched", h.Op, body)
		}
	}
}

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
	c.SendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
	up := o.next()
	<-o.ffs
	h, _ := up.read() // the owner holds its SUBSCRIBE_OK until the reconcile has run
	if h.Op != wire.OpSubscribe {
		t.Fatalf("owner got %s", h.Op)
	}
	c.SendID(wire.OpReconcileClient, 10, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{Topic: "fwd", Partition: 1, Prefetch: 4}}})
	res := c.Expect(wire.OpReconcileResult, 10).(*wire.ReconcileResult)
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	ok := c.Expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK)
	entries := reconcileEntries(res, 1)
	if len(entries) != 1 || entries[0].Action != wire.ActionKeep || entries[0].Server.Value.SubID != ok.SubID {
		t.Fatalf("reconcile of a SUBSCRIBE in flight: %+v, want one keep under the id %d of its SUBSCRIBE_OK", entries, ok.SubID)
	}
	// The owner was not asked to close anything: the next frame it gets
	// is the client's next operation.
	c.SendID(wire.OpPublish, 0, &wire.Publish{Topic: "fwd", Partition: 1, Payload: []byte("after")})
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
	c.SendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
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
	c.SendID(wire.OpReconcileClient, 10, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{Topic: "fwd", Partition: 1, Prefetch: 4}, {SubID: 77, Topic: "fwd", Partition: 2, Prefetch: 4}}})
	select {
	case <-inRoute:
	case <-time.After(5 * time.Second):
		t.Fatal("the reconcile did not route partition 2")
	}
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	ok := c.Expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK)
	close(release)
	res := c.Expect(wire.OpReconcileResult, 10).(*wire.ReconcileResult)
	entries := reconcileEntries(res, 1)
	if len(entries) != 1 || entries[0].Action != wire.ActionKeep || entries[0].Server.Value.SubID != ok.SubID {
		t.Fatalf("reconcile racing the SUBSCRIBE_OK: %+v, want one keep under the id %d", entries, ok.SubID)
	}
	c.SendID(wire.OpPublish, 0, &wire.Publish{Topic: "fwd", Partition: 1, Payload: []byte("after")})
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
	c.SendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	c.Expect(wire.OpSubscribeOK, 9)
	c.SendID(wire.OpSubscribe, 11, &wire.Subscribe{Topic: "fwd", Partition: 3, Prefetch: 4})
	h3, _ := up.read() // held
	c.SendID(wire.OpReconcileClient, 12, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{Topic: "fwd", Partition: 3, Prefetch: 4}}})
	res := c.Expect(wire.OpReconcileResult, 12).(*wire.ReconcileResult)
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
	c.Expect(wire.OpSubscribeOK, 11)
}

// relayConn is a forward.ClientConn whose writer never writes: it counts
// what the relay queues on it, and how much of that came after the
// connection ended.
type relayConn struct {
	t         *testing.T
	log       *slog.Logger
	done      chan struct{}
	answers   chan wire.Op
	pushed    atomic.Int64 // relayed bytes queued
	afterDone atomic.Int64 // of them, queued after done was closed
}

func (c *relayConn) DeferReply() {}
func (c *relayConn) Answer(op wire.Op, _ uint64, _ wire.Encoder) {
	select {
	case c.answers <- op:
	default:
	}
}
func (c *relayConn) Confirm(uint64, uint64) {}
func (c *relayConn) Push(_ wire.Op, _ uint64, _ wire.Encoder, relayed int) {
	c.pushed.Add(int64(relayed))
	select {
	case <-c.done:
		c.afterDone.Add(int64(relayed))
	default:
	}
}
func (c *relayConn) Drop(wire.Op, string)                                     {}
func (c *relayConn) HasSubscription(string, wire.Option[string], uint32) bool { return false }
func (c *relayConn) Route(string, wire.Option[string], uint32, bool, uint64) forward.Target {
	return forward.Target{Owner: "owner"}
}
func (c *relayConn) Client() forward.ClientInfo {
	return forward.ClientInfo{ConnID: 1, Remote: "127.0.0.1:1", User: "alice", ClientID: "00000000-0000-0000-0000-000000000001"}
}
func (c *relayConn) Logger() *slog.Logger { return c.log }
func (c *relayConn) Opened() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// core/forward/README.md#bounds: once the client connection has ended,
// relayed deliveries are dropped (never settled, so the owner redelivers
// what was not auto-acked) instead of queued for a writer that is gone.
// An auto-ack owner pushes 24 MiB while the client stops reading and then
// disconnects: what the relay queued stays at its 8 MiB bound, and nothing
// is queued after the end.
func TestRelayDropsDeliveriesAfterTheClientEnded(t *testing.T) {
	o := newFakeOwner(t)
	gw := forward.NewGateway(o.dialer(), func() forward.Limits {
		return forward.Limits{ForwardTimeout: 10 * time.Second, UpstreamConnectTimeout: 2 * time.Second, UpstreamIdleClose: time.Minute}
	}, nil)
	cc := &relayConn{t: t, log: testLogger(t, slog.LevelInfo), done: make(chan struct{}), answers: make(chan wire.Op, 4)}
	r := gw.NewRelay(cc, cc.done)
	req := wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 0, AutoAck: true}
	r.Subscribe(9, req.AppendTo(nil), req, "owner")
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1})
	select {
	case op := <-cc.answers:
		if op != wire.OpSubscribeOK {
			t.Fatalf("SUBSCRIBE answered %s", op)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SUBSCRIBE_OK relayed")
	}

	const frames, payload = 1536, 16 << 10 // 24 MiB
	frame := wire.AppendFrame(nil, wire.OpDeliver, 1000, &wire.Deliver{SubID: 5, Topic: "fwd", Partition: 1, DeliveryTag: 1,
		Payload: bytes.Repeat([]byte("x"), payload)})
	ownerDone := make(chan error, 1)
	go func() {
		_ = up.nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for range frames {
			if _, err := up.nc.Write(frame); err != nil {
				ownerDone <- err
				return
			}
		}
		ownerDone <- nil
	}()
	// The client does not read: the relay fills up to its bound and the
	// upstream reader waits. Then the client disconnects.
	testkit.Eventually(t, 10*time.Second, "the relay's queue at its bound", func() bool { return cc.pushed.Load() >= 8<<20 })
	close(cc.done)
	r.Close()
	select {
	case err := <-ownerDone:
		if err != nil {
			t.Fatalf("owner write: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway stopped reading the owner's deliveries")
	}
	// Everything the owner sent has been read once the gateway's closing
	// RECONCILE_CLIENT is answered and the upstream ends.
	rh, _ := up.read()
	if rh.Op != wire.OpReconcileClient {
		t.Fatalf("owner got %s, want the closing RECONCILE_CLIENT", rh.Op)
	}
	up.send(wire.OpReconcileResult, rh.RequestID, &wire.ReconcileResult{})
	if _, _, err := up.tryRead(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after the reconcile the upstream must end (EOF), got %v", err)
	}
	if n, after := cc.pushed.Load(), cc.afterDone.Load(); n > 8<<20+2*int64(len(frame)) || after > int64(len(frame)) {
		t.Fatalf("%d relayed bytes queued for the client, %d of them after it ended; want at most the 8 MiB bound and one frame", n, after)
	}
}

// core/forward/README.md#bounds: a publish that picked an upstream session
// and waits for routing.max_inflight_forward_bytes room keeps that session
// from closing as idle, then goes up on it and is confirmed.
func TestGatewayIdleCloseWaitsForAPublishWaitingForRoom(t *testing.T) {
	e, o, _ := newGatewayEnvWith(t, func(l *forward.Limits) {
		l.MaxInflightForwardBytes = 1 // one publish in flight at a time
		l.ForwardTimeout = 5 * time.Second
		l.UpstreamIdleClose = time.Second
	})
	b := e.dial()
	b.login()
	upB := confirmOnNewUpstream(b, o, "b1")
	// Another connection's publish takes all the room, and its owner holds
	// the answer.
	a := e.dial()
	a.login()
	a.SendID(wire.OpPublish, 1, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("a1")})
	upA := o.next()
	<-o.ffs
	hA, _ := upA.read()
	if n := e.srv.Gateway().InflightBytes(); n == 0 {
		t.Fatal("the held publish is not counted in flight")
	}
	// b's second publish waits for room on its (idle) upstream session
	// for longer than routing.upstream_idle_close_ms.
	b.SendID(wire.OpPublish, 2, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("b2")})
	upB.expectQuiet(2500 * time.Millisecond)
	upA.send(wire.OpPublishOK, hA.RequestID, &wire.PublishOK{Offset: 2})
	a.Expect(wire.OpPublishOK, 1)
	h, body := upB.read()
	var p wire.Publish
	if h.Op != wire.OpPublish || p.Decode(body) != nil || string(p.Payload) != "b2" {
		t.Fatalf("owner got %s on b's upstream, want the waiting publish", h.Op)
	}
	upB.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 3})
	b.Expect(wire.OpPublishOK, 2)
}

// core/forward/README.md#bounds: the one re-send of a confirmed publish
// after a REDIRECT to another private owner is counted against
// routing.max_inflight_forward_bytes until its answer, as the first send
// was; a second move or the final answer releases it.
func TestGatewayResendAfterMoveCountsInflight(t *testing.T) {
	e, o, r := newGatewayEnvWith(t, func(l *forward.Limits) { l.MaxInflightForwardBytes = 1 << 20 })
	c := e.dial()
	c.login()
	body := &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("moving")}
	size := int64(len(body.AppendTo(nil)))
	c.SendID(wire.OpPublish, 5, body)
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	moved := core.NodeID("owner2")
	r.target.Store(&moved)
	up.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	up2 := o.next()
	<-o.ffs
	h, _ = up2.read() // the re-send, unanswered
	if n := e.srv.Gateway().InflightBytes(); n != size {
		t.Fatalf("%d bytes in flight during the re-send, want its %d", n, size)
	}
	up2.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 9})
	c.Expect(wire.OpPublishOK, 5)
	if n := e.srv.Gateway().InflightBytes(); n != 0 {
		t.Fatalf("%d bytes still in flight after the answer", n)
	}
	// Moved again during the re-send: 503, and the bytes are released.
	c.SendID(wire.OpPublish, 6, body)
	h, _ = up2.read()
	back := core.NodeID("owner")
	r.target.Store(&back)
	up2.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	h, _ = up.read()
	if n := e.srv.Gateway().InflightBytes(); n != size {
		t.Fatalf("%d bytes in flight during the second re-send, want %d", n, size)
	}
	r.target.Store(&moved)
	up.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	c.ExpectError(wire.OpError, 6, wire.CodeUnavailable)
	if n := e.srv.Gateway().InflightBytes(); n != 0 {
		t.Fatalf("%d bytes still in flight after the second move", n)
	}
}
