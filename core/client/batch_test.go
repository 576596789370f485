package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// gateConn wraps a client socket: it counts Write calls and, when armed,
// holds a Write after its bytes reached the socket until released (or the
// connection is closed, as a real socket's Close ends a blocked Write).
// While a Write is held, later frames pile up in the client's buffer.
type gateConn struct {
	net.Conn
	mu        sync.Mutex
	writes    int
	gate      chan struct{}
	held      chan struct{} // one token per Write that reached the gate
	closed    chan struct{}
	closeOnce sync.Once
}

func (g *gateConn) Write(b []byte) (int, error) {
	// The gate is read before the bytes go out: a Write whose bytes the
	// peer may already have seen is never held by a later arm.
	g.mu.Lock()
	g.writes++
	gate := g.gate
	g.mu.Unlock()
	n, err := g.Conn.Write(b)
	if gate != nil {
		g.held <- struct{}{}
		select {
		case <-gate:
		case <-g.closed:
		}
	}
	return n, err
}

func (g *gateConn) Close() error {
	g.closeOnce.Do(func() { close(g.closed) })
	return g.Conn.Close()
}

// arm makes the next Writes wait; release lets them (and later ones) go.
func (g *gateConn) arm() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateConn) release() {
	g.mu.Lock()
	gate := g.gate
	g.gate = nil
	g.mu.Unlock()
	if gate != nil {
		close(gate)
	}
}

// waitHeld waits until a Write is held at the gate.
func (g *gateConn) waitHeld(tb testing.TB) {
	tb.Helper()
	select {
	case <-g.held:
	case <-time.After(stepTimeout):
		tb.Fatal("no Write reached the gate")
	}
}

func (g *gateConn) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.writes
}

// gateDialer is an Options.Dial that wraps every connection in a gateConn.
type gateDialer struct {
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	mu    sync.Mutex
	conns []*gateConn
}

func newGateDialer(tb testing.TB) *gateDialer { return &gateDialer{dial: loopbackDial(tb)} }

func (d *gateDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := d.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g := &gateConn{Conn: nc, held: make(chan struct{}, 64), closed: make(chan struct{})}
	d.mu.Lock()
	d.conns = append(d.conns, g)
	d.mu.Unlock()
	return g, nil
}

func (d *gateDialer) last() *gateConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[len(d.conns)-1]
}

// dialGated dials a Client to fb whose socket is a gateConn; mod, when
// set, adjusts the options first.
func dialGated(t *testing.T, fb *fakeBroker, mod func(*Options)) (*Client, *fakeConn, *gateConn) {
	t.Helper()
	gd := newGateDialer(t)
	opts := testOptions(t, fb.addr)
	opts.Dial = gd.Dial
	if mod != nil {
		mod(&opts)
	}
	c, fc := dialScripted(t, fb, opts, wire.Topology{})
	return c, fc, gd.last()
}

// asyncResult collects PublishAsync callbacks.
type asyncResult struct {
	mu    sync.Mutex
	calls map[int]int // callbacks per publish index
	offs  map[int]uint64
	errs  map[int]error
	order []int
	n     atomic.Int32
}

func newAsyncResult() *asyncResult {
	return &asyncResult{calls: map[int]int{}, offs: map[int]uint64{}, errs: map[int]error{}}
}

func (r *asyncResult) cb(i int) func(uint64, error) {
	return func(off uint64, err error) {
		r.mu.Lock()
		r.calls[i]++
		r.offs[i], r.errs[i] = off, err
		r.order = append(r.order, i)
		r.mu.Unlock()
		r.n.Add(1)
	}
}

func (r *asyncResult) wait(tb testing.TB, n int) {
	tb.Helper()
	testkit.Eventually(tb, stepTimeout, fmt.Sprintf("%d callbacks", n), func() bool { return int(r.n.Load()) >= n })
	time.Sleep(20 * time.Millisecond) // a second callback would show up here
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range r.calls {
		if c != 1 {
			tb.Fatalf("publish %d: %d callbacks", i, c)
		}
	}
	if len(r.calls) != n {
		tb.Fatalf("%d publishes called back, want %d", len(r.calls), n)
	}
}

func (r *asyncResult) get(i int) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.offs[i], r.errs[i]
}

func seqPayload(i int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

func payloadSeq(tb testing.TB, f frame) int {
	tb.Helper()
	pb, ok := f.body.(*wire.Publish)
	if !ok || len(pb.Payload) != 8 {
		tb.Fatalf("frame %v is not a numbered PUBLISH", f.hdr.Op)
	}
	return int(binary.BigEndian.Uint64(pb.Payload))
}

// Frames leave in the order they were queued, whatever the batching: one
// goroutine's frames keep their order, ACKs are only merged with the ACK
// right before them, and nothing is lost or duplicated.
func TestBatchingKeepsFrameOrder(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	const writers, per = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := c.Send(wire.OpPublish, 0, &wire.Publish{Topic: fmt.Sprint(w), Payload: seqPayload(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	next := make([]int, writers)
	for range writers * per {
		f := fc.expect(t, wire.OpPublish)
		var w int
		fmt.Sscan(f.body.(*wire.Publish).Topic, &w)
		if got := payloadSeq(t, f); got != next[w] {
			t.Fatalf("writer %d: got %d, want %d", w, got, next[w])
		}
		next[w]++
	}
	wg.Wait()

	// ACK, PUBLISH, ACK for the same partition: the PUBLISH in between
	// keeps them apart.
	ctx := context.Background()
	c.queueAck(ctx, 100, "q", wire.None[string](), 0, []uint64{1})
	c.Send(wire.OpPublish, 0, &wire.Publish{Topic: "q", Payload: seqPayload(7)})
	c.queueAck(ctx, 101, "q", wire.None[string](), 0, []uint64{2})
	for i, want := range []wire.Op{wire.OpAck, wire.OpPublish, wire.OpAck} {
		f := fc.expect(t, want)
		if a, ok := f.body.(*wire.Ack); ok && (len(a.Tags) != 1 || a.Tags[0] != uint64(1+i/2)) {
			t.Fatalf("ACK %d tags %v", i, a.Tags)
		}
	}
}

// While a Write is in progress, a burst of publishes accumulates and goes
// out in the next single Write.
func TestBurstInFewWrites(t *testing.T) {
	fb := newFake(t, nil)
	c, fc, g := dialGated(t, fb, nil)
	pub := c.Publisher("t", PublisherOptions{})
	res := newAsyncResult()
	ctx := context.Background()
	// A write still in progress (the handshake's last frames) would be
	// counted by the gate before this point and by the stats after it:
	// wait until neither moves.
	for quiet, deadline := 0, time.Now().Add(5*time.Second); quiet < 3 && time.Now().Before(deadline); {
		w, n := c.Stats().WriteCalls, g.count()
		time.Sleep(10 * time.Millisecond)
		if c.Stats().WriteCalls == w && g.count() == n {
			quiet++
		} else {
			quiet = 0
		}
	}
	before := g.count()
	s0 := c.Stats()

	g.arm()
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(0)}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t) // the writer is inside Write with publish 0
	const burst = 200
	for i := 1; i <= burst; i++ {
		if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(i)}, res.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	g.release()
	for i := 0; i <= burst; i++ {
		f := fc.expect(t, wire.OpPublish)
		if got := payloadSeq(t, f); got != i {
			t.Fatalf("publish %d arrived as %d", i, got)
		}
		fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: uint64(1000 + i)})
	}
	res.wait(t, burst+1)
	for i := 0; i <= burst; i++ {
		if off, err := res.get(i); err != nil || off != uint64(1000+i) {
			t.Fatalf("publish %d: offset %d err %v", i, off, err)
		}
	}
	if w := g.count() - before; w != 2 {
		t.Fatalf("%d publishes took %d writes, want 2 (the held one, then the burst)", burst+1, w)
	}
	s1 := c.Stats()
	if s1.WriteCalls-s0.WriteCalls != 2 || s1.FramesQueued-s0.FramesQueued != burst+1 {
		t.Fatalf("stats: %d writes, %d frames", s1.WriteCalls-s0.WriteCalls, s1.FramesQueued-s0.FramesQueued)
	}
}

// Consecutive ACKs for one partition that wait in the buffer together
// become one ACK frame with every tag; another partition, or a NACK, ends
// the run.
func TestAckMerging(t *testing.T) {
	fb := newFake(t, nil)
	c, fc, g := dialGated(t, fb, nil)
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Partitions: []uint32{0, 1}, Prefetch: 16}, 1, 2)
	var ids []uint64
	for i := 1; i <= 6; i++ {
		ids = append(ids, sendDeliver(fc, 1, "q", 0, uint64(i), "m"))
	}
	sendDeliver(fc, 2, "q", 1, 50, "other partition")
	var ds []*Delivery
	for range 7 {
		ds = append(ds, next(t, sub))
	}
	byTag := map[uint64]*Delivery{}
	for _, d := range ds {
		byTag[d.Tag] = d
	}
	ctx := context.Background()
	s0 := c.Stats()
	g.arm()
	if err := byTag[1].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t)
	for _, tag := range []uint64{2, 3, 4} {
		if err := byTag[tag].Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := byTag[50].Ack(ctx); err != nil { // other partition: a new frame
		t.Fatal(err)
	}
	if err := byTag[5].Ack(ctx); err != nil { // not merged across it
		t.Fatal(err)
	}
	if err := byTag[6].Fail(ctx); err != nil {
		t.Fatal(err)
	}
	g.release()
	want := []struct {
		op   wire.Op
		id   uint64
		part uint32
		tags []uint64
	}{
		{wire.OpAck, ids[0], 0, []uint64{1}},
		{wire.OpAck, ids[1], 0, []uint64{2, 3, 4}},
		{wire.OpAck, 0, 1, []uint64{50}},
		{wire.OpAck, ids[4], 0, []uint64{5}},
		{wire.OpNack, ids[5], 0, []uint64{6}},
	}
	for _, w := range want {
		f := fc.expect(t, w.op)
		var part uint32
		var tags []uint64
		switch b := f.body.(type) {
		case *wire.Ack:
			part, tags = b.Partition, b.Tags
		case *wire.Nack:
			part, tags = b.Partition, b.Tags
		}
		if (w.id != 0 && f.hdr.RequestID != w.id) || part != w.part || fmt.Sprint(tags) != fmt.Sprint(w.tags) {
			t.Fatalf("%v id %d partition %d tags %v; want id %d partition %d tags %v", f.hdr.Op, f.hdr.RequestID, part, tags, w.id, w.part, w.tags)
		}
	}
	if n := c.Stats().AcksMerged - s0.AcksMerged; n != 2 {
		t.Fatalf("acks merged = %d, want 2", n)
	}
}

// The boundary of docs/protocol.md#answers with batching: when the socket dies, a publish whose
// frame was handed to Write has an unknown outcome; publishes still in
// the buffer were never written and are re-sent, in order, after the
// reconnect (PublishAsync and PublishConfirmed alike).
func TestWrittenBoundaryOnSocketDeath(t *testing.T) {
	fb := newFake(t, nil)
	c, fc, g := dialGated(t, fb, nil)
	pub := c.Publisher("t", PublisherOptions{})
	ctx := context.Background()
	res := newAsyncResult()

	g.arm()
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(0)}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t) // publish 0 reached the socket; its Write has not returned
	for i := 1; i <= 3; i++ {
		if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(i)}, res.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	queued := c.Stats().FramesQueued
	syncErr := async(func() error {
		_, err := pub.PublishConfirmed(ctx, Message{Payload: seqPayload(4)})
		return err
	})
	testkit.Eventually(t, stepTimeout, "the confirmed publish queued", func() bool { return c.Stats().FramesQueued == queued+1 })
	if f := fc.expect(t, wire.OpPublish); payloadSeq(t, f) != 0 {
		t.Fatal("publish 0 was not the first frame")
	}
	fc.close() // the socket dies with 1..4 still buffered

	fc2 := fb.next(t)
	fc2.acceptHello(t, identityA, wire.ResumeResumed)
	got := map[int]bool{}
	for range 4 {
		f := fc2.expect(t, wire.OpPublish)
		i := payloadSeq(t, f)
		if got[i] || i == 0 {
			t.Fatalf("publish %d re-sent (twice, or although written)", i)
		}
		got[i] = true
		fc2.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: uint64(10 + i)})
	}
	res.wait(t, 4)
	if _, err := res.get(0); !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("written publish: %v", err)
	}
	for i := 1; i <= 3; i++ {
		if off, err := res.get(i); err != nil || off != uint64(10+i) {
			t.Fatalf("buffered publish %d: offset %d err %v", i, off, err)
		}
	}
	if err := wait(t, syncErr); err != nil {
		t.Fatalf("buffered PublishConfirmed: %v", err)
	}
	// The async ones went out again in their original order.
	res.mu.Lock()
	order := fmt.Sprint(res.order[1:])
	res.mu.Unlock()
	if order != "[1 2 3]" {
		t.Fatalf("callbacks of the re-sent publishes in order %s", order)
	}
}

// A buffered publish that cannot be re-sent before its deadline fails as
// never written: retryable, and not an unknown outcome.
func TestNeverWrittenFailsWithinDeadline(t *testing.T) {
	fb := newFake(t, nil)
	c, fc, g := dialGated(t, fb, nil)
	pub := c.Publisher("t", PublisherOptions{})
	res := newAsyncResult()
	g.arm()
	if err := pub.PublishAsync(context.Background(), Message{Payload: seqPayload(0)}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(1)}, res.cb(1)); err != nil {
		t.Fatal(err)
	}
	fc.expect(t, wire.OpPublish)
	fc.close()
	fb.next(t) // the reconnect is accepted but never answered
	res.wait(t, 2)
	if _, err := res.get(0); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("written: %v", err)
	}
	_, err := res.get(1)
	if !isNotWritten(err) || errors.Is(err, ErrOutcomeUnknown) || !Retryable(err) {
		t.Fatalf("never written: %v", err)
	}
}

func TestPublishAsyncHappyPath(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	pub := c.Publisher("orders", PublisherOptions{Group: "g"})
	res := newAsyncResult()
	ctx := context.Background()
	for i := range 10 {
		if err := pub.PublishAsync(ctx, Message{Key: []byte("k"), ContentType: "application/json", TTL: time.Second, Payload: seqPayload(i)}, res.cb(i)); err != nil {
			t.Fatal(err)
		}
	}
	var fs []frame
	for i := range 10 {
		f := fc.expect(t, wire.OpPublish)
		pb := f.body.(*wire.Publish)
		if payloadSeq(t, f) != i || !pb.RequireConfirm || pb.Group != wire.Some("g") || string(pb.PartitionKey.Value) != "k" ||
			pb.ContentType.Tag != wire.ContentJSON || pb.TTLMillis.Value != 1000 {
			t.Fatalf("PUBLISH %+v", pb)
		}
		fs = append(fs, f)
	}
	for i := len(fs) - 1; i >= 0; i-- { // answered out of order
		fc.send(wire.OpPublishOK, fs[i].hdr.RequestID, &wire.PublishOK{Offset: uint64(i)})
	}
	res.wait(t, 10)
	for i := range 10 {
		if off, err := res.get(i); err != nil || off != uint64(i) {
			t.Fatalf("publish %d: offset %d err %v", i, off, err)
		}
	}
	if err := pub.PublishAsync(ctx, Message{}, nil); err == nil {
		t.Fatal("nil callback accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	called := false
	if err := pub.PublishAsync(cctx, Message{}, func(uint64, error) { called = true }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	c.Close()
	if err := pub.PublishAsync(ctx, Message{}, func(uint64, error) { called = true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed client: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if called {
		t.Fatal("callback of a refused publish ran")
	}
}

// REDIRECT and 503 are re-sent; 504 is final and never replayed.
func TestPublishAsyncResends(t *testing.T) {
	a := newFake(t, nil)
	b := newFake(t, nil)
	c, afc := dialScripted(t, a, testOptions(t, a.addr), wire.Topology{})
	pub := c.Publisher("t", PublisherOptions{})
	ctx := context.Background()
	res := newAsyncResult()

	// REDIRECT with a newer partitioning version: refresh, dial, re-send.
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(0)}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	f := afc.expect(t, wire.OpPublish)
	afc.send(wire.OpRedirect, f.hdr.RequestID, &wire.Redirect{Topic: "t", Owners: []wire.AdvertisedAddress{b.endpoint()}, PartitioningVersion: 4})
	afc.answerTopology(t, wire.Topology{})
	bfc := b.next(t)
	bfc.acceptHello(t, identityA, wire.ResumeNew)
	f = bfc.expect(t, wire.OpPublish)
	if pb := f.body.(*wire.Publish); pb.PartitioningVersion != 4 || payloadSeq(t, f) != 0 {
		t.Fatalf("re-sent PUBLISH %+v", pb)
	}
	bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 7})
	res.wait(t, 1)
	if off, err := res.get(0); err != nil || off != 7 {
		t.Fatalf("redirected: offset %d err %v", off, err)
	}
	if n := c.Stats().Fenced; n != 1 {
		t.Fatalf("Stats().Fenced = %d, want 1", n)
	}

	// 503, then 409 (topology refresh), then OK.
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(1)}, res.cb(1)); err != nil {
		t.Fatal(err)
	}
	f = bfc.expect(t, wire.OpPublish)
	bfc.sendError(f.hdr.RequestID, 503, "recovering")
	f = bfc.expect(t, wire.OpPublish)
	bfc.sendError(f.hdr.RequestID, 409, "not owner")
	afc.answerTopology(t, wire.Topology{Generation: 2, Queues: []wire.QueueEntry{queueEntry("t", 0, 1, 4, b.endpoint())}})
	f = bfc.expect(t, wire.OpPublish)
	bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 8})
	res.wait(t, 2)
	if off, err := res.get(1); err != nil || off != 8 {
		t.Fatalf("after 503: offset %d err %v", off, err)
	}

	// 504: outcome unknown, not replayed.
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(2)}, res.cb(2)); err != nil {
		t.Fatal(err)
	}
	f = bfc.expect(t, wire.OpPublish)
	bfc.sendError(f.hdr.RequestID, 504, "owner did not answer")
	res.wait(t, 3)
	var be *Error
	if _, err := res.get(2); !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &be) || be.Code != 504 {
		t.Fatalf("504: %v", err)
	}
	// 400: returned as is.
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(3)}, res.cb(3)); err != nil {
		t.Fatal(err)
	}
	f = bfc.expect(t, wire.OpPublish) // not a replay of 2
	if payloadSeq(t, f) != 3 {
		t.Fatal("504 was replayed")
	}
	bfc.sendError(f.hdr.RequestID, 400, "bad")
	res.wait(t, 4)
	if _, err := res.get(3); !errors.Is(err, core.ErrBadRequest) || Retryable(err) {
		t.Fatalf("400: %v", err)
	}

	// 503 until the deadline: the last 503 (or an unknown outcome if the
	// deadline caught an attempt in flight).
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := pub.PublishAsync(dctx, Message{Payload: seqPayload(4)}, res.cb(4)); err != nil {
		t.Fatal(err)
	}
	for res.n.Load() < 5 {
		fr, err := bfc.readRaw(20 * time.Millisecond)
		if err != nil {
			continue
		}
		bfc.sendError(fr.hdr.RequestID, 503, "busy")
	}
	res.wait(t, 5)
	_, err := res.get(4)
	if !errors.Is(err, core.ErrUnavailable) && !(errors.Is(err, ErrOutcomeUnknown) && errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("503 until the deadline: %v", err)
	}
}

// Socket death with the publish written, and ctx cancellation: both are
// unknown outcomes; a late reply after the cancellation is recognised
// (the connection survives).
func TestPublishAsyncDeathAndCancel(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	pub := c.Publisher("t", PublisherOptions{})
	res := newAsyncResult()

	ctx, cancel := context.WithCancel(context.Background())
	if err := pub.PublishAsync(ctx, Message{Payload: seqPayload(0)}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	f := fc.expect(t, wire.OpPublish)
	cancel()
	res.wait(t, 1)
	if _, err := res.get(0); !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	fc.sendError(f.hdr.RequestID, 500, "late") // recognised: not an uncorrelated ERROR
	if err := pub.PublishAsync(context.Background(), Message{Payload: seqPayload(1)}, res.cb(1)); err != nil {
		t.Fatal(err)
	}
	f = fc.expect(t, wire.OpPublish)
	fc.close()
	res.wait(t, 2)
	if _, err := res.get(1); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("in flight at socket death: %v", err)
	}
	if s := c.Stats(); s.UncorrelatedErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
	fc2 := fb.next(t)
	fc2.acceptHello(t, identityA, wire.ResumeResumed)
	tch := async(func() error { _, err := c.Topology(context.Background(), ""); return err })
	fc2.answerTopology(t, wire.Topology{}) // nothing was replayed before it
	if err := wait(t, tch); err != nil {
		t.Fatal(err)
	}
}

// A context without deadline is bounded by OperationTimeout through the
// sweep, for PublishAsync and PublishConfirmed alike.
func TestOperationTimeoutSweep(t *testing.T) {
	fb := newFake(t, nil)
	opts := testOptions(t, fb.addr)
	opts.OperationTimeout = 300 * time.Millisecond
	c, fc := dialScripted(t, fb, opts, wire.Topology{})
	pub := c.Publisher("t", PublisherOptions{})
	res := newAsyncResult()
	start := time.Now()
	if err := pub.PublishAsync(context.Background(), Message{}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	ch := async(func() error { _, err := pub.PublishConfirmed(context.Background(), Message{}); return err })
	fc.expect(t, wire.OpPublish)
	fc.expect(t, wire.OpPublish)
	res.wait(t, 1)
	err := wait(t, ch)
	_, aerr := res.get(0)
	for _, e := range []error{err, aerr} {
		if !errors.Is(e, ErrOutcomeUnknown) || !errors.Is(e, context.DeadlineExceeded) {
			t.Fatalf("err = %v", e)
		}
	}
	if el := time.Since(start); el < opts.OperationTimeout || el > opts.OperationTimeout+3*time.Second {
		t.Fatalf("gave up after %v", el)
	}
}

// A full write buffer blocks the caller (backpressure) until the writer
// drains it, or until ctx ends (nothing queued, no callback).
func TestWriteBufferBackpressure(t *testing.T) {
	fb := newFake(t, nil)
	c, fc, g := dialGated(t, fb, func(o *Options) { o.WriteBufferSize = 4 << 10 })
	pub := c.Publisher("t", PublisherOptions{})
	res := newAsyncResult()
	payload := make([]byte, 1000)
	g.arm()
	if err := pub.PublishAsync(context.Background(), Message{Payload: payload}, res.cb(0)); err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t)
	n := 1
	for ; n <= 5; n++ { // 4 KiB: the fifth 1 KiB frame finds the buffer full
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := pub.PublishAsync(ctx, Message{Payload: payload}, res.cb(n))
		cancel()
		if err != nil {
			if !isNotWritten(err) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("blocked publish: %v", err)
			}
			break
		}
	}
	if n != 5 {
		t.Fatalf("blocked at publish %d, want 5", n)
	}
	blocked := async(func() error { return pub.PublishAsync(context.Background(), Message{Payload: payload}, res.cb(n)) })
	select {
	case err := <-blocked:
		t.Fatalf("publish into a full buffer returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	if err := wait(t, blocked); err != nil {
		t.Fatal(err)
	}
	for range n + 1 {
		f := fc.expect(t, wire.OpPublish)
		fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	}
	res.wait(t, n+1) // publishes 0..4 and the one that waited; not the refused one
}

// Heartbeats go through the same buffer: a PONG answered while frames are
// piled up keeps its place, and nothing is reordered around it.
func TestPongThroughBuffer(t *testing.T) {
	fb := newFake(t, nil)
	gd := newGateDialer(t)
	cfg := connConfig(t)
	cfg.Dial = gd.Dial
	c, fc := openConn(t, fb, cfg)
	g := gd.last()
	g.arm()
	c.Send(wire.OpPublish, 0, &wire.Publish{Topic: "t", Payload: seqPayload(0)})
	g.waitHeld(t)
	c.Send(wire.OpPublish, 0, &wire.Publish{Topic: "t", Payload: seqPayload(1)})
	fc.send(wire.OpPing, 42, nil)
	testkit.Eventually(t, stepTimeout, "PONG queued", func() bool { return c.stats.framesQueued.Load() == 3 })
	c.Send(wire.OpPublish, 0, &wire.Publish{Topic: "t", Payload: seqPayload(2)})
	g.release()
	fc.expectRaw(t, wire.OpPublish)
	fc.expectRaw(t, wire.OpPublish)
	if p := fc.expectRaw(t, wire.OpPong); p.hdr.RequestID != 42 {
		t.Fatalf("PONG id %d", p.hdr.RequestID)
	}
	if f := fc.expectRaw(t, wire.OpPublish); payloadSeq(t, f) != 2 {
		t.Fatal("order")
	}
}

// No goroutine outlives the client: readers, writers, heartbeats,
// completers and re-send goroutines all end.
func TestNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		fb := newFake(nil, nil)
		defer fb.close()
		opts := testOptions(t, fb.addr)
		ch := make(chan *Client, 1)
		go func() {
			c, err := Dial(context.Background(), opts)
			if err != nil {
				t.Error(err)
			}
			ch <- c
		}()
		fc := fb.next(t)
		fc.acceptHello(t, identityA, wire.ResumeNew)
		fc.answerTopology(t, wire.Topology{})
		c := <-ch
		if c == nil {
			return
		}
		pub := c.Publisher("t", PublisherOptions{})
		res := newAsyncResult()
		for i := range 20 {
			if err := pub.PublishAsync(context.Background(), Message{Payload: seqPayload(i)}, res.cb(i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 10 {
			f := fc.expect(t, wire.OpPublish)
			fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: uint64(i)})
		}
		c.Close() // the other 10 fail with an unknown outcome
		res.wait(t, 20)
		fc.close()
	}()
	testkit.EventuallyReport(t, stepTimeout, func() bool { return runtime.NumGoroutine() <= base }, func() string {
		buf := make([]byte, 1<<16)
		return fmt.Sprintf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	})
}

// --- benchmarks against a fast fake broker ----------------------------------

// fastBroker answers HELLO, TOPOLOGY, PUBLISH (PUBLISH_OK with increasing
// offsets) and PING, batching its replies like a real broker.
func fastBroker(tb testing.TB) *fakeBroker {
	return newFake(tb, func(fc *fakeConn) {
		br := bufio.NewReaderSize(fc.nc, 64<<10)
		bw := bufio.NewWriterSize(fc.nc, 64<<10)
		ok := &wire.PublishOK{} // reused: the broker side allocates nothing per publish
		buf := make([]byte, 0, 64<<10)
		for {
			h, _, err := wire.ReadFrame(br, buf, math.MaxUint32)
			if err != nil {
				return
			}
			var out []byte
			switch h.Op {
			case wire.OpHello:
				out = wire.AppendFrame(nil, wire.OpHelloOK, h.RequestID, helloOK(identityA, wire.ResumeNew))
			case wire.OpTopology:
				out = wire.AppendFrame(nil, wire.OpTopologyOK, h.RequestID, &wire.TopologyOK{})
			case wire.OpPublish:
				out = wire.AppendFrame(buf[:0], wire.OpPublishOK, h.RequestID, ok)
				ok.Offset++
			case wire.OpPing:
				out = wire.AppendFrame(nil, wire.OpPong, h.RequestID, nil)
			}
			bw.Write(out)
			if br.Buffered() == 0 {
				if bw.Flush() != nil {
					return
				}
			}
		}
	})
}

func benchClient(b *testing.B) *Publisher {
	fb := fastBroker(b)
	opts := testOptions(b, fb.addr)
	c, err := Dial(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c.Publisher("t", PublisherOptions{})
}

// BenchmarkPublishConfirmed: one publish at a time (the allocation and
// latency cost of the synchronous call).
func BenchmarkPublishConfirmed(b *testing.B) {
	pub := benchClient(b)
	ctx := context.Background()
	payload := make([]byte, 1024)
	part := uint32(0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := pub.PublishConfirmed(ctx, Message{Partition: &part, Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishConfirmedWindow256: the old way to keep a window, 256
// goroutines each calling PublishConfirmed.
func BenchmarkPublishConfirmedWindow256(b *testing.B) {
	pub := benchClient(b)
	ctx := context.Background()
	part := uint32(0)
	work := make(chan struct{}, 1024)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, 1024)
			for range work {
				if _, err := pub.PublishConfirmed(ctx, Message{Partition: &part, Payload: payload}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}

// BenchmarkPublishAsync: a window of 256 publishes in flight from one
// goroutine, bounded by a slot pool released by the callbacks (the
// pattern of fibrilctl bench).
func BenchmarkPublishAsync(b *testing.B) {
	pub := benchClient(b)
	ctx := context.Background()
	const window = 256
	type slot struct {
		payload []byte
		done    func(uint64, error)
	}
	free := make(chan *slot, window)
	var failed atomic.Int64
	for range window {
		s := &slot{payload: make([]byte, 1024)}
		s.done = func(_ uint64, err error) {
			if err != nil {
				failed.Add(1)
			}
			free <- s
		}
		free <- s
	}
	part := uint32(0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s := <-free
		if err := pub.PublishAsync(ctx, Message{Partition: &part, Payload: s.payload}, s.done); err != nil {
			b.Fatal(err)
		}
	}
	for range window {
		<-free
	}
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d publishes failed", failed.Load())
	}
}

// Close hands what is queued to the socket before closing it: an Ack or
// an unconfirmed publish that returned just before Close is not lost.
func TestCloseFlushesQueuedFrames(t *testing.T) {
	fb := newFake(t, nil)
	c, fc, g := dialGated(t, fb, nil)
	pub := c.Publisher("t", PublisherOptions{})
	ctx := context.Background()
	g.arm()
	if err := pub.Publish(ctx, Message{Payload: seqPayload(0)}); err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t)
	for i := 1; i <= 3; i++ {
		if err := pub.Publish(ctx, Message{Payload: seqPayload(i)}); err != nil {
			t.Fatal(err)
		}
	}
	closed := async(func() error { return c.Close() })
	time.Sleep(20 * time.Millisecond)
	if err := pub.Publish(ctx, Message{Payload: seqPayload(9)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish while closing: %v", err)
	}
	g.release()
	for i := 0; i <= 3; i++ {
		if f := fc.expect(t, wire.OpPublish); payloadSeq(t, f) != i {
			t.Fatalf("publish %d lost", i)
		}
	}
	fc.expectEOF(t)
	if err := wait(t, closed); err != nil {
		t.Fatal(err)
	}
}
