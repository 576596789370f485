package forward_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// Handler tests of the gateway against a scripted fake owner:
// the router says Forward for topic "fwd", and the owner is a raw wire
// peer the test drives frame by frame.

// gwRouter forwards topic "fwd" to node "owner" and serves the rest here.
// redirect, when set, is what a re-route after an upstream REDIRECT says.
type gwRouter struct {
	redirect atomic.Pointer[wire.Redirect]
	target   atomic.Pointer[core.NodeID] // forward target; nil: "owner"
	// onRoute, when set, is called with every forwarded partition routed
	// (on the goroutine that routes it) before the answer is given.
	onRoute atomic.Pointer[func(core.PartitionRef)]
}

func (r *gwRouter) Route(ref core.PartitionRef, _ bool, _ uint64, forwarded bool) session.Route {
	if ref.Topic != "fwd" {
		return session.Route{Serve: true}
	}
	if hook := r.onRoute.Load(); hook != nil {
		(*hook)(ref)
	}
	if rd := r.redirect.Load(); rd != nil {
		return session.Route{Redirect: rd}
	}
	owner := core.NodeID("owner")
	if t := r.target.Load(); t != nil {
		owner = *t
	}
	return session.Route{Forward: owner, Err: core.Errorf(core.ErrUnavailable, "cannot forward")}
}
func (r *gwRouter) DeclareQueue(context.Context, queue.QueueSpec) (queue.QueueInfo, error) {
	return queue.QueueInfo{}, core.Errorf(core.ErrBadRequest, "not in this test")
}
func (r *gwRouter) DeclareStream(context.Context, queue.StreamSpec) (queue.StreamInfo, error) {
	return queue.StreamInfo{}, core.Errorf(core.ErrBadRequest, "not in this test")
}
func (r *gwRouter) Topology(wire.TopologyRequest) wire.Topology { return wire.Topology{Generation: 1} }
func (r *gwRouter) Generation() uint64                          { return 1 }
func (r *gwRouter) Changed() <-chan struct{}                    { return nil }

// fakeOwner accepts upstream sessions on loopback and hands each, after
// the handshake (HELLO, AUTH, FORWARDED_SESSION), to the test.
type fakeOwner struct {
	t      *testing.T
	ln     net.Listener
	conns  chan *ownerConn
	dials  atomic.Int32
	refuse atomic.Bool
	ffs    chan wire.ForwardedSession
	// gate, when set before the first dial, holds every dial until it is
	// closed (an owner slow to answer).
	gate chan struct{}
	// outcome answers a HELLO that presents a resume identity; resumes
	// receives each identity presented.
	outcome atomic.Int32
	resumes chan wire.ResumeIdentity
}

type ownerConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func newFakeOwner(t *testing.T) *fakeOwner {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &fakeOwner{t: t, ln: ln, conns: make(chan *ownerConn, 4), ffs: make(chan wire.ForwardedSession, 4),
		resumes: make(chan wire.ResumeIdentity, 4)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			go o.handshake(&ownerConn{t: t, nc: nc, br: bufio.NewReader(nc)})
		}
	}()
	return o
}

func (o *fakeOwner) handshake(c *ownerConn) {
	for _, want := range []wire.Op{wire.OpHello, wire.OpAuth, wire.OpForwardedSession} {
		h, body, err := c.tryRead(5 * time.Second)
		if err != nil || h.Op != want {
			return
		}
		switch h.Op {
		case wire.OpHello:
			ok := &wire.HelloOK{ProtocolVersion: 1, Compliance: wire.Compliance, ServerName: "fake-owner",
				OwnerID: wire.UUID{0xfa}, ClientID: wire.UUID{byte(o.dials.Load())}, ResumeToken: wire.UUID{0x70}}
			var hello wire.Hello
			if hello.Decode(body) == nil {
				if id, ok2 := hello.Resume.Get(); ok2 {
					o.resumes <- id
					ok.ResumeOutcome = wire.ResumeOutcome(o.outcome.Load())
				}
			}
			c.send(wire.OpHelloOK, h.RequestID, ok)
		case wire.OpAuth:
			c.send(wire.OpAuthOK, h.RequestID, nil)
		case wire.OpForwardedSession:
			var fs wire.ForwardedSession
			_ = fs.Decode(body)
			o.ffs <- fs
			c.send(wire.OpForwardedSessionOK, h.RequestID, &wire.ForwardedSessionOK{ForwardingVersion: 2})
		}
	}
	o.conns <- c
}

// dialer is the gateway's forward.Dialer, to this fake owner.
func (o *fakeOwner) dialer() forward.Dialer {
	return func(ctx context.Context, owner core.NodeID, fs wire.ForwardedSession, resume *wire.ResumeIdentity, onPush func(upclient.Frame)) (forward.Upstream, error) {
		o.dials.Add(1)
		if o.gate != nil {
			select {
			case <-o.gate:
			case <-ctx.Done():
				return forward.Upstream{}, core.Errorf(core.ErrPeerRefused, "connect timed out (test)")
			}
		}
		if o.refuse.Load() {
			return forward.Upstream{}, core.Errorf(core.ErrPeerRefused, "connection refused (test)")
		}
		conn, err := upclient.DialConn(ctx, o.ln.Addr().String(), upclient.ConnConfig{Username: "@node", Password: "s3cret", Resume: resume,
			OnPush: func(_ *upclient.Conn, f upclient.Frame) { onPush(f) }})
		if err != nil {
			return forward.Upstream{}, core.Errorf(core.ErrPeerRefused, "%v", err)
		}
		fs.OriginNodeID = "gw"
		f, err := conn.Do(ctx, wire.OpForwardedSession, &fs)
		if err != nil || f.Op != wire.OpForwardedSessionOK {
			conn.Close()
			return forward.Upstream{}, core.Errorf(core.ErrUnavailable, "FFS refused: %v", err)
		}
		return forward.Upstream{Conn: conn, Abort: func() { conn.Abort(errors.New("aborted")) }}, nil
	}
}

func (o *fakeOwner) next() *ownerConn {
	select {
	case c := <-o.conns:
		return c
	case <-time.After(5 * time.Second):
		o.t.Fatal("no upstream session reached the owner")
		return nil
	}
}

// confirmOnNewUpstream sends a confirmed publish (request id 1) on c that
// opens an upstream session to o, has the owner confirm it at offset 1,
// checks the client's PUBLISH_OK and returns the owner's side of that
// session.
func confirmOnNewUpstream(c *client, o *fakeOwner, payload string) *ownerConn {
	c.t.Helper()
	c.SendID(wire.OpPublish, 1, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte(payload)})
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	up.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 1})
	c.Expect(wire.OpPublishOK, 1)
	return up
}

func (c *ownerConn) tryRead(d time.Duration) (wire.FrameHeader, []byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	h, body, err := wire.ReadFrame(c.br, nil, 1<<20)
	return h, bytes.Clone(body), err
}

// read returns the next frame other than PING/PONG.
func (c *ownerConn) read() (wire.FrameHeader, []byte) {
	c.t.Helper()
	for {
		h, body, err := c.tryRead(5 * time.Second)
		if err != nil {
			c.t.Fatalf("owner read: %v", err)
		}
		if h.Op == wire.OpPing {
			c.send(wire.OpPong, h.RequestID, nil)
			continue
		}
		if h.Op != wire.OpPong {
			return h, body
		}
	}
}

func (c *ownerConn) send(op wire.Op, id uint64, body wire.Encoder) {
	if _, err := c.nc.Write(wire.AppendFrame(nil, op, id, body)); err != nil {
		c.t.Logf("owner write %s: %v", op, err)
	}
}

func newGatewayEnv(t *testing.T) (*env, *fakeOwner, *gwRouter) {
	return newGatewayEnvWith(t, nil)
}

// newGatewayEnvWith is newGatewayEnv with the forwarding limits changed by
// mod (nil: the defaults of these tests).
func newGatewayEnvWith(t *testing.T, mod func(*forward.Limits)) (*env, *fakeOwner, *gwRouter) {
	o := newFakeOwner(t)
	r := &gwRouter{}
	lim := forward.Limits{ForwardTimeout: 2 * time.Second, UpstreamConnectTimeout: 2 * time.Second, UpstreamIdleClose: time.Minute}
	if mod != nil {
		mod(&lim)
	}
	e := newEnv(t, func(opts *session.Options) {
		opts.Router = r
		opts.Upstreams = o.dialer()
		opts.Settings = func() session.Settings {
			return session.Settings{ReconnectGrace: 5 * time.Second, RestartTTL: time.Minute, Forwarding: lim}
		}
	})
	return e, o, r
}

// core/forward/README.md#upstream-sessions: the client's PUBLISH goes up with the same body; its PUBLISH_OK
// comes only from the owner's, with the owner's offset and the client's
// request id; the FORWARDED_SESSION names the client and release_on_close.
func TestGatewayConfirmIsTheOwners(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	c := e.dial()
	c.login()
	body := &wire.Publish{Topic: "fwd", Partition: 2, RequireConfirm: true, Payload: []byte("hello")}
	c.SendID(wire.OpPublish, 77, body)
	up := o.next()
	fs := <-o.ffs
	if fs.ActingUsername != "alice" || fs.HopCount != 1 || !fs.ReleaseOnClose() || fs.OriginNodeID != "gw" || len(fs.ClientID) != 36 {
		t.Fatalf("FORWARDED_SESSION %+v", fs)
	}
	h, got := up.read()
	if h.Op != wire.OpPublish || !bytes.Equal(got, body.AppendTo(nil)) {
		t.Fatalf("owner got %s %q", h.Op, got)
	}
	c.ExpectSilence(150 * time.Millisecond) // no confirm before the owner's
	up.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 777})
	ok := c.Expect(wire.OpPublishOK, 77).(*wire.PublishOK)
	if ok.Offset != 777 {
		t.Fatalf("offset %d, want the owner's 777", ok.Offset)
	}
	// The gateway stored nothing of its own.
	if _, err := e.qm.Partition(queue.Key{Topic: "fwd"}, 2); err == nil {
		t.Fatal("the gateway created the forwarded queue locally")
	}
}

// docs/protocol.md#answers: upstream lost after a confirmed PUBLISH reached the socket →
// ERROR 504 (never replayed); the next publish opens a new upstream.
func TestGatewayUpstreamLostIs504(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	c := e.dial()
	c.login()
	c.SendID(wire.OpPublish, 5, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("x")})
	up := o.next()
	<-o.ffs
	up.read()
	up.nc.Close()
	c.ExpectError(wire.OpError, 5, wire.CodeOutcomeUnknown)
	c.SendID(wire.OpPublish, 6, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("y")})
	up2 := o.next()
	h, _ := up2.read()
	up2.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 1})
	c.Expect(wire.OpPublishOK, 6)
}

// docs/protocol.md#answers: an owner that refused the connection → 503 (nothing was
// sent), and for one second its operations fail fast without a new dial.
func TestGatewayRefusedIs503AndFailsFast(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	o.refuse.Store(true)
	c := e.dial()
	c.login()
	c.SendID(wire.OpPublish, 5, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("x")})
	c.ExpectError(wire.OpError, 5, wire.CodeUnavailable)
	c.SendID(wire.OpPublish, 6, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("x")})
	c.ExpectError(wire.OpError, 6, wire.CodeUnavailable)
	if n := o.dials.Load(); n != 1 {
		t.Fatalf("%d dials; the second publish must fail fast", n)
	}
}

// core/forward/README.md#upstream-sessions: SUBSCRIBE goes up with the client's prefetch; SUBSCRIBE_OK and
// DELIVER come back with the sub id rewritten to ≥ 2^48 and the rest
// byte for byte; ACK goes to the upstream that holds the partition's
// subscription; when the upstream is lost the client gets
// SUBSCRIPTION_CLOSED (OwnerMoved) for it.
func TestGatewaySubscribeDeliverSettle(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	c := e.dial()
	c.login()
	c.SendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 7})
	up := o.next()
	<-o.ffs
	h, body := up.read()
	var sreq wire.Subscribe
	if h.Op != wire.OpSubscribe || sreq.Decode(body) != nil || sreq.Prefetch != 7 || sreq.Partition != 1 {
		t.Fatalf("owner got %s %+v", h.Op, sreq)
	}
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 7})
	ok := c.Expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK)
	if ok.SubID < 1<<48 || ok.Prefetch != 7 {
		t.Fatalf("SUBSCRIBE_OK %+v", ok)
	}
	d := &wire.Deliver{SubID: 5, Topic: "fwd", Partition: 1, Offset: 3, DeliveryTag: 11, Payload: []byte("m")}
	up.send(wire.OpDeliver, 1000, d)
	dh, db := c.Read(2 * time.Second)
	got := dh.Op
	if got != wire.OpDeliver {
		t.Fatalf("client got %s", got)
	}
	want := d.AppendTo(nil)
	wantRewritten := append([]byte(nil), want...)
	copy(wantRewritten[4:12], (&wire.Deliver{SubID: ok.SubID}).AppendTo(nil)[4:12])
	if gotD := db.(*wire.Deliver); gotD.SubID != ok.SubID || !bytes.Equal(gotD.AppendTo(nil), wantRewritten) {
		t.Fatalf("DELIVER %+v: only the sub id may change", gotD)
	}
	ack := &wire.Ack{Topic: "fwd", Partition: 1, Tags: []uint64{11}}
	c.SendID(wire.OpAck, 12, ack)
	ah, abody := up.read()
	if ah.Op != wire.OpAck || !bytes.Equal(abody, ack.AppendTo(nil)) {
		t.Fatalf("owner got %s %x, want the client's ACK", ah.Op, abody)
	}
	up.nc.Close()
	sh, sb := c.Read(3 * time.Second)
	sc, isSC := sb.(*wire.SubscriptionClosed)
	if sh.Op != wire.OpSubscriptionClosed || !isSC || sc.SubID != ok.SubID || sc.Code != wire.ReasonOwnerMoved {
		t.Fatalf("after the upstream died: %s %+v", sh.Op, sb)
	}
}

// core/forward/README.md#upstream-sessions: an upstream REDIRECT is never relayed raw: with the gateway's
// view unchanged the client gets 503; once the view moved, the gateway's
// own REDIRECT.
func TestGatewayRebuildsUpstreamRedirect(t *testing.T) {
	e, o, r := newGatewayEnv(t)
	c := e.dial()
	c.login()
	c.SendID(wire.OpPublish, 5, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("x")})
	up := o.next()
	<-o.ffs
	raw := &wire.Redirect{Topic: "fwd", Owners: []wire.AdvertisedAddress{{Host: "127.0.0.1", Port: 1}}, PartitioningVersion: 3}
	h, _ := up.read()
	up.send(wire.OpRedirect, h.RequestID, raw)
	c.ExpectError(wire.OpError, 5, wire.CodeUnavailable)

	mine := &wire.Redirect{Topic: "fwd", Owners: []wire.AdvertisedAddress{{Host: "127.0.0.1", Port: 2}}, PartitioningVersion: 4}
	c.SendID(wire.OpPublish, 6, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("y")})
	h, _ = up.read()
	r.redirect.Store(mine)
	up.send(wire.OpRedirect, h.RequestID, raw)
	rd := c.Expect(wire.OpRedirect, 6).(*wire.Redirect)
	if rd.PartitioningVersion != 4 || rd.Owners[0].Port != 2 {
		t.Fatalf("redirect %+v, want the gateway's own", rd)
	}
}

// core/forward/README.md#bounds: the per-owner cap answers 503 and is released when
// an upstream session ends; the in-flight byte accounting returns to zero
// after a success, an owner's error and an owner's REDIRECT.
func TestGatewayLimitAccounting(t *testing.T) {
	o := newFakeOwner(t)
	r := &gwRouter{}
	e := newEnv(t, func(opts *session.Options) {
		opts.Router = r
		opts.Upstreams = o.dialer()
		opts.Settings = func() session.Settings {
			// No reconnect grace: a connection's end ends its session, and
			// with it the session's upstream sessions.
			return session.Settings{ReconnectGrace: 0, RestartTTL: time.Minute, Forwarding: forward.Limits{
				ForwardTimeout: 2 * time.Second, UpstreamConnectTimeout: 2 * time.Second, UpstreamIdleClose: time.Minute,
				MaxUpstreamsPerOwner: 1, MaxInflightForwardBytes: 1 << 20}}
		}
	})
	a := e.dial()
	a.login()
	up := confirmOnNewUpstream(a, o, "a")
	// A second connection to the same owner is over the cap.
	b := e.dial()
	b.login()
	b.SendID(wire.OpPublish, 2, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("b")})
	if eb := b.ExpectError(wire.OpError, 2, wire.CodeUnavailable); !bytes.Contains([]byte(eb.Message), []byte("max_upstream_sessions_per_owner")) {
		t.Fatalf("over the cap: %q", eb.Message)
	}
	// The owner's error and REDIRECT answers release their bytes too.
	a.SendID(wire.OpPublish, 3, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("e")})
	h, _ := up.read()
	up.send(wire.OpError, h.RequestID, &wire.ErrorBody{Code: wire.CodeNotFound, Message: "gone"})
	a.ExpectError(wire.OpError, 3, wire.CodeNotFound)
	a.SendID(wire.OpPublish, 4, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("r")})
	h, _ = up.read()
	up.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	a.ExpectError(wire.OpError, 4, wire.CodeUnavailable)
	if n := e.srv.Gateway().InflightBytes(); n != 0 {
		t.Fatalf("%d in-flight bytes still counted", n)
	}
	// The first connection ends: its upstream closes in order (core/forward/README.md#upstream-sessions: an
	// empty RECONCILE_CLIENT, then a clean end of stream) and the cap frees.
	a.nc.Close()
	h, body := up.read()
	var rc wire.ReconcileClient
	if h.Op != wire.OpReconcileClient || rc.Decode(body) != nil || len(rc.Subscriptions) != 0 {
		t.Fatalf("closing upstream sent %s %+v, want an empty RECONCILE_CLIENT", h.Op, rc)
	}
	up.send(wire.OpReconcileResult, h.RequestID, &wire.ReconcileResult{})
	if _, _, err := up.tryRead(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after the reconcile the upstream must end in order (EOF), got %v", err)
	}
	testkit.Eventually(t, 5*time.Second, "the upstream released", func() bool { return e.srv.Gateway().Open() == 0 })
	b.SendID(wire.OpPublish, 5, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("b2")})
	up2 := o.next()
	h, _ = up2.read()
	up2.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 2})
	b.Expect(wire.OpPublishOK, 5)
}

// core/forward/README.md#upstream-sessions: when the owner answers REDIRECT and this broker's
// view names another private owner, the publish gets one more attempt
// there, with the same body, and the client gets that owner's confirm; a
// second move answers 503 (the client retries).
func TestGatewayRetriesOnceOnMove(t *testing.T) {
	e, o, r := newGatewayEnv(t)
	c := e.dial()
	c.login()
	body := &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("moving")}
	c.SendID(wire.OpPublish, 5, body)
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	moved := core.NodeID("owner2")
	r.target.Store(&moved)
	up.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	up2 := o.next() // the upstream session to the new owner
	if fs := <-o.ffs; fs.ActingUsername != "alice" {
		t.Fatalf("FORWARDED_SESSION to the new owner: %+v", fs)
	}
	h, got := up2.read()
	if h.Op != wire.OpPublish || !bytes.Equal(got, body.AppendTo(nil)) {
		t.Fatalf("the new owner got %s %q", h.Op, got)
	}
	up2.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 9})
	if ok := c.Expect(wire.OpPublishOK, 5).(*wire.PublishOK); ok.Offset != 9 {
		t.Fatalf("offset %d, want the new owner's 9", ok.Offset)
	}
	// Moved again during the retry: 503, no third attempt.
	c.SendID(wire.OpPublish, 6, body)
	h, _ = up2.read()
	back := core.NodeID("owner")
	r.target.Store(&back)
	up2.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	h, _ = up.read() // the retry, on the first owner's upstream
	r.target.Store(&moved)
	up.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd"})
	c.ExpectError(wire.OpError, 6, wire.CodeUnavailable)
}

// core/forward/README.md#upstream-sessions, core/forward/README.md#bounds: opening the upstream session does not hold up the client's
// connection (a PING is answered while the owner is slow to accept), and
// the operations that wait for the session reach the owner in the order
// the client sent them, then are confirmed.
func TestGatewayDialDoesNotBlockTheReader(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	o.gate = make(chan struct{})
	c := e.dial()
	c.login()
	c.SendID(wire.OpPublish, 5, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("a")})
	c.SendID(wire.OpPublish, 0, &wire.Publish{Topic: "fwd", Payload: []byte("b")}) // fire-and-forget
	c.SendID(wire.OpPublish, 6, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("c")})
	c.SendID(wire.OpPing, 7, nil)
	c.Expect(wire.OpPong, 7)
	close(o.gate)
	up := o.next()
	<-o.ffs
	for _, want := range []string{"a", "b", "c"} {
		h, body := up.read()
		var p wire.Publish
		if h.Op != wire.OpPublish || p.Decode(body) != nil || string(p.Payload) != want {
			t.Fatalf("owner got %s %q, want the publish of %q (client order)", h.Op, p.Payload, want)
		}
		if p.RequireConfirm {
			up.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: uint64(len(want))})
		}
	}
	c.Expect(wire.OpPublishOK, 5)
	c.Expect(wire.OpPublishOK, 6)
	if n := o.dials.Load(); n != 1 {
		t.Fatalf("%d dials for one owner, want 1", n)
	}
}

// core/forward/README.md#upstream-sessions: a SUBSCRIBE whose owner answers REDIRECT while this broker's
// view names another private owner is sent once more, there, and the
// client's subscription is the new owner's.
func TestGatewaySubscribeRetriesOnceOnMove(t *testing.T) {
	e, o, r := newGatewayEnv(t)
	c := e.dial()
	c.login()
	sub := &wire.Subscribe{Topic: "fwd", Partition: 3, Prefetch: 4}
	c.SendID(wire.OpSubscribe, 9, sub)
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	moved := core.NodeID("owner2")
	r.target.Store(&moved)
	up.send(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: "fwd", Partition: 3})
	up2 := o.next()
	<-o.ffs
	h, got := up2.read()
	if h.Op != wire.OpSubscribe || !bytes.Equal(got, sub.AppendTo(nil)) {
		t.Fatalf("the new owner got %s %q", h.Op, got)
	}
	up2.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 8, Topic: "fwd", Partition: 3, Prefetch: 4})
	ok := c.Expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK)
	up2.send(wire.OpDeliver, 1000, &wire.Deliver{SubID: 8, Topic: "fwd", Partition: 3, DeliveryTag: 1, Payload: []byte("m")})
	if dh, db := c.Read(2 * time.Second); dh.Op != wire.OpDeliver || db.(*wire.Deliver).SubID != ok.SubID {
		t.Fatalf("client got %s %+v, want the new owner's delivery", dh.Op, db)
	}
}

// core/forward/README.md#resume: the link to the owner drops under two
// forwarded subscriptions. With resume on, the gateway dials again
// presenting the session's identity. Resumed: it lists its subscriptions
// in a RECONCILE_CLIENT; the one the owner still has stays (its
// deliveries and settles flow on the new connection), the one it lost is
// closed towards the client. Not found: both are closed, and the next
// operation runs on the new session.
func TestGatewayUpstreamResume(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome wire.ResumeOutcome
	}{{"resumed", wire.ResumeResumed}, {"not_found", wire.ResumeNotFound}} {
		t.Run(tc.name, func(t *testing.T) {
			e, o, _ := newGatewayEnvWith(t, func(l *forward.Limits) { l.ResumeWithin = 5 * time.Second })
			o.outcome.Store(int32(tc.outcome))
			c := e.dial()
			c.login()
			var up *ownerConn
			clientIDs := map[uint64]uint64{} // owner sub id → client-facing
			for i, p := range []uint32{1, 2} {
				c.SendID(wire.OpSubscribe, uint64(10+i), &wire.Subscribe{Topic: "fwd", Partition: p, Prefetch: 4})
				if up == nil {
					up = o.next()
					<-o.ffs
				}
				h, _ := up.read()
				up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: uint64(5 + i), Topic: "fwd", Partition: p, Prefetch: 4})
				clientIDs[uint64(5+i)] = c.Expect(wire.OpSubscribeOK, uint64(10+i)).(*wire.SubscribeOK).SubID
			}
			// A confirmed publish written and not answered when the link
			// drops: its outcome is unknown (504), resume or not.
			c.SendID(wire.OpPublish, 20, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("in flight")})
			if h, _ := up.read(); h.Op != wire.OpPublish {
				t.Fatalf("owner got %s", h.Op)
			}
			up.nc.Close() // the link drops
			c.ExpectError(wire.OpError, 20, wire.CodeOutcomeUnknown)
			up2 := o.next()
			<-o.ffs
			if id := <-o.resumes; id.OwnerID != (wire.UUID{0xfa}) || id.ResumeToken != (wire.UUID{0x70}) {
				t.Fatalf("the resume presented %+v, not the session's identity", id)
			}
			if tc.outcome != wire.ResumeResumed {
				closed := map[uint64]bool{}
				for range 2 {
					_, b := c.Read(3 * time.Second)
					if sc, ok := b.(*wire.SubscriptionClosed); ok && sc.Code == wire.ReasonOwnerMoved {
						closed[sc.SubID] = true
					}
				}
				if !closed[clientIDs[5]] || !closed[clientIDs[6]] {
					t.Fatalf("after a lost session the client got closes for %v, want both %v", closed, clientIDs)
				}
				c.SendID(wire.OpPublish, 30, &wire.Publish{Topic: "fwd", RequireConfirm: true, Payload: []byte("x")})
				h, _ := up2.read()
				up2.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 1})
				c.Expect(wire.OpPublishOK, 30)
				return
			}
			h, body := up2.read()
			var rc wire.ReconcileClient
			if h.Op != wire.OpReconcileClient || rc.Decode(body) != nil || len(rc.Subscriptions) != 2 {
				t.Fatalf("after the resume the owner got %s %+v, want RECONCILE_CLIENT with both subscriptions", h.Op, rc)
			}
			var entries []wire.ReconcileEntry
			for _, s := range rc.Subscriptions {
				a := wire.ActionKeep
				if s.SubID == 6 {
					a = wire.ActionCloseClientSide // the owner lost this one
				}
				entries = append(entries, wire.ReconcileEntry{Client: wire.Some(s), Server: wire.Some(s), Action: a})
			}
			up2.send(wire.OpReconcileResult, h.RequestID, &wire.ReconcileResult{Entries: entries})
			_, b := c.Read(3 * time.Second)
			if sc, ok := b.(*wire.SubscriptionClosed); !ok || sc.SubID != clientIDs[6] {
				t.Fatalf("client got %+v, want SUBSCRIPTION_CLOSED for the lost subscription only", b)
			}
			up2.send(wire.OpDeliver, 0, &wire.Deliver{SubID: 5, Topic: "fwd", Partition: 1, DeliveryTag: 9, Payload: []byte("m")})
			if _, b := c.Read(3 * time.Second); b.(*wire.Deliver).SubID != clientIDs[5] {
				t.Fatalf("the kept subscription's delivery: %+v", b)
			}
			c.SendID(wire.OpAck, 0, &wire.Ack{Topic: "fwd", Partition: 1, Tags: []uint64{9}})
			if h, _ := up2.read(); h.Op != wire.OpAck {
				t.Fatalf("the ACK went up as %s", h.Op)
			}
		})
	}
}

// core/forward/README.md#client-resume: a client that resumes its own
// session on the gateway keeps its forwarded subscriptions. Its connection
// drops; the upstream session stays, and a DELIVER the owner sends
// meanwhile waits; the client resumes on a new connection (AUTH again,
// then RECONCILE_CLIENT), its forwarded subscription is kept under its id,
// the waiting DELIVER arrives, and its ACKs reach the owner on the same
// upstream session — no new dial, no close towards the owner.
func TestGatewayClientResumeKeepsForwardedSubscriptions(t *testing.T) {
	e, o, _ := newGatewayEnv(t)
	c := e.dial()
	id := c.Send(wire.OpHello, &wire.Hello{ClientName: "test", ClientVersion: "0", ProtocolVersion: 1})
	ident := c.Expect(wire.OpHelloOK, id).(*wire.HelloOK).Identity()
	c.Expect(wire.OpAuthOK, c.Send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "secret"}))
	c.SendID(wire.OpSubscribe, 9, &wire.Subscribe{Topic: "fwd", Partition: 1, Prefetch: 4})
	up := o.next()
	<-o.ffs
	h, _ := up.read()
	up.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 5, Topic: "fwd", Partition: 1, Prefetch: 4})
	subID := c.Expect(wire.OpSubscribeOK, 9).(*wire.SubscribeOK).SubID
	up.send(wire.OpDeliver, 0, &wire.Deliver{SubID: 5, Topic: "fwd", Partition: 1, DeliveryTag: 11, Payload: []byte("m1")})
	if _, b := c.Read(3 * time.Second); b.(*wire.Deliver).DeliveryTag != 11 {
		t.Fatalf("first delivery %+v", b)
	}
	c.nc.Close()
	testkit.Eventually(t, 5*time.Second, "the gateway saw the connection end", func() bool { return e.srv.Stats().Connections == 0 })
	up.send(wire.OpDeliver, 0, &wire.Deliver{SubID: 5, Topic: "fwd", Partition: 1, DeliveryTag: 12, Payload: []byte("m2")})

	c2 := e.dial()
	id = c2.Send(wire.OpHello, &wire.Hello{ClientName: "test", ClientVersion: "0", ProtocolVersion: 1, Resume: wire.Some(ident)})
	if ok := c2.Expect(wire.OpHelloOK, id).(*wire.HelloOK); ok.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("resume outcome %v", ok.ResumeOutcome)
	}
	// The resumed session's deliveries may come as soon as HELLO_OK
	// (S-101), before the answers that follow.
	var waited *wire.Deliver
	until := func(op wire.Op, reqID uint64) wire.Body {
		t.Helper()
		for {
			h, b := c2.Read(3 * time.Second)
			if d, ok := b.(*wire.Deliver); ok {
				waited = d
				continue
			}
			if h.Op != op || h.RequestID != reqID {
				t.Fatalf("got %s id %d, want %s id %d", h.Op, h.RequestID, op, reqID)
			}
			return b
		}
	}
	until(wire.OpAuthOK, c2.Send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "secret"}))
	id = c2.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative,
		Subscriptions: []wire.ReconcileSub{{SubID: subID, Topic: "fwd", Partition: 1, Prefetch: 4}}})
	res := until(wire.OpReconcileResult, id).(*wire.ReconcileResult)
	if len(res.Entries) != 1 || res.Entries[0].Action != wire.ActionKeep || res.Entries[0].Server.Value.SubID != subID {
		t.Fatalf("reconcile after the resume: %+v", res)
	}
	if waited == nil {
		_, b := c2.Read(3 * time.Second)
		waited, _ = b.(*wire.Deliver)
	}
	if waited == nil || waited.DeliveryTag != 12 || waited.SubID != subID {
		t.Fatalf("the delivery that waited: %+v", waited)
	}
	c2.SendID(wire.OpAck, 0, &wire.Ack{Topic: "fwd", Partition: 1, Tags: []uint64{11, 12}})
	if h, body := up.read(); h.Op != wire.OpAck {
		t.Fatalf("owner got %s %x, want the ACK on the same upstream", h.Op, body)
	}
	if n := o.dials.Load(); n != 1 {
		t.Fatalf("%d dials: the resume opened a new upstream session", n)
	}
}
