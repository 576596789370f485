package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// This file holds the scripted fake broker the tests drive: a listener on
// 127.0.0.1:0 whose accepted connections are handed to the test, which
// reads and writes frames with core/wire. Nothing here ever leaves the
// loopback interface: every client in these tests dials through
// loopbackDial, which fails the test on any other address.

const stepTimeout = 5 * time.Second

// loopbackDial wraps net.Dialer and refuses any non-loopback address.
func loopbackDial(tb testing.TB) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			msg := fmt.Sprintf("test tried to dial non-loopback address %q", addr)
			if tb != nil {
				tb.Errorf("%s", msg)
			} else {
				panic(msg)
			}
			return nil, errors.New(msg)
		}
		return d.DialContext(ctx, network, addr)
	}
}

type fakeBroker struct {
	ln       net.Listener
	addr     string
	accepted chan *fakeConn
	handler  func(*fakeConn)

	mu    sync.Mutex
	conns []*fakeConn
}

// newFake starts a fake broker. With a nil handler, accepted connections
// are queued for the test (fb.next); otherwise each runs handler in its
// own goroutine.
func newFake(tb testing.TB, handler func(*fakeConn)) *fakeBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		if tb == nil {
			panic(err)
		}
		tb.Fatal(err)
	}
	fb := &fakeBroker{ln: ln, addr: ln.Addr().String(), accepted: make(chan *fakeConn, 16), handler: handler}
	go fb.acceptLoop()
	if tb != nil {
		tb.Cleanup(fb.close)
	}
	return fb
}

func (fb *fakeBroker) acceptLoop() {
	for {
		nc, err := fb.ln.Accept()
		if err != nil {
			return
		}
		fc := &fakeConn{nc: nc, br: bufio.NewReader(nc)}
		fb.mu.Lock()
		fb.conns = append(fb.conns, fc)
		fb.mu.Unlock()
		if fb.handler != nil {
			go fb.handler(fc)
		} else {
			fb.accepted <- fc
		}
	}
}

func (fb *fakeBroker) close() {
	fb.ln.Close()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for _, fc := range fb.conns {
		fc.nc.Close()
	}
}

// next returns the next accepted connection.
func (fb *fakeBroker) next(tb testing.TB) *fakeConn {
	tb.Helper()
	select {
	case fc := <-fb.accepted:
		return fc
	case <-time.After(stepTimeout):
		tb.Fatalf("fake broker %s: no connection within %v", fb.addr, stepTimeout)
		return nil
	}
}

// host and port of the fake, as a topology endpoint.
func (fb *fakeBroker) endpoint() wire.AdvertisedAddress {
	host, port, _ := net.SplitHostPort(fb.addr)
	var p uint16
	fmt.Sscan(port, &p)
	return wire.AdvertisedAddress{Host: host, Port: p}
}

type fakeConn struct {
	nc  net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
	// standing, once dialScripted set it, answers a TOPOLOGY that arrives
	// while a script expects another op, as a broker would: a Subscribe
	// to every partition reads the count when the cache has none.
	standing *wire.Topology
}

type frame struct {
	hdr  wire.FrameHeader
	body wire.Body
}

// readRaw reads one frame, whatever it is.
func (fc *fakeConn) readRaw(timeout time.Duration) (frame, error) {
	fc.nc.SetReadDeadline(time.Now().Add(timeout))
	h, b, err := wire.ReadFrame(fc.br, nil, math.MaxUint32)
	if err != nil {
		return frame{}, err
	}
	if h.Op == wire.OpPing || h.Op == wire.OpPong {
		return frame{hdr: h, body: &wire.Empty{}}, nil
	}
	body, err := wire.DecodeBody(h.Op, b)
	if err != nil {
		return frame{hdr: h}, err
	}
	return frame{hdr: h, body: body}, nil
}

// read returns the next frame that is not a heartbeat: client PINGs are
// answered with PONG and PONGs skipped, so scripts need not care about them.
func (fc *fakeConn) read(tb testing.TB) frame {
	tb.Helper()
	for {
		f, err := fc.readRaw(stepTimeout)
		if err != nil {
			tb.Fatalf("fake: read: %v", err)
		}
		switch f.hdr.Op {
		case wire.OpPing:
			fc.send(wire.OpPong, f.hdr.RequestID, nil)
			continue
		case wire.OpPong:
			continue
		}
		return f
	}
}

// expect reads the next non-heartbeat frame and checks its op. A TOPOLOGY
// read is answered with the standing topology when the script waits for
// something else.
func (fc *fakeConn) expect(tb testing.TB, op wire.Op) frame {
	tb.Helper()
	f := fc.read(tb)
	for f.hdr.Op == wire.OpTopology && op != wire.OpTopology && fc.standing != nil {
		fc.send(wire.OpTopologyOK, f.hdr.RequestID, &wire.TopologyOK{Topology: *fc.standing})
		f = fc.read(tb)
	}
	if f.hdr.Op != op {
		tb.Fatalf("fake: got %v (id %d), want %v", f.hdr.Op, f.hdr.RequestID, op)
	}
	return f
}

// expectEOF waits for the client to close the connection; frames before
// that (other than heartbeats) fail the test.
func (fc *fakeConn) expectEOF(tb testing.TB) {
	tb.Helper()
	for {
		f, err := fc.readRaw(stepTimeout)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return
		}
		if err != nil {
			tb.Fatalf("fake: waiting for EOF: %v", err)
		}
		if f.hdr.Op != wire.OpPing && f.hdr.Op != wire.OpPong {
			tb.Fatalf("fake: got %v while waiting for the client to close", f.hdr.Op)
		}
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

func (fc *fakeConn) send(op wire.Op, id uint64, body wire.Encoder) error {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	_, err := fc.nc.Write(wire.AppendFrame(nil, op, id, body))
	return err
}

func (fc *fakeConn) close() { fc.nc.Close() }

func uuidOf(b byte) wire.UUID {
	var u wire.UUID
	for i := range u {
		u[i] = b
	}
	return u
}

// helloOK builds a compliant HELLO_OK.
func helloOK(id wire.ResumeIdentity, outcome wire.ResumeOutcome) *wire.HelloOK {
	return &wire.HelloOK{
		ProtocolVersion: 1, OwnerID: id.OwnerID, ClientID: id.ClientID, ResumeToken: id.ResumeToken,
		ResumeOutcome: outcome, ServerName: "fake", Compliance: wire.Compliance,
	}
}

var identityA = wire.ResumeIdentity{OwnerID: uuidOf(1), ClientID: uuidOf(2), ResumeToken: uuidOf(3)}

// acceptHello reads HELLO (id 1) and answers HELLO_OK with id/outcome.
func (fc *fakeConn) acceptHello(tb testing.TB, id wire.ResumeIdentity, outcome wire.ResumeOutcome) *wire.Hello {
	tb.Helper()
	f := fc.expect(tb, wire.OpHello)
	if f.hdr.RequestID != 1 {
		tb.Fatalf("HELLO request id %d, want 1", f.hdr.RequestID)
	}
	fc.send(wire.OpHelloOK, 1, helloOK(id, outcome))
	return f.body.(*wire.Hello)
}

// answerTopology reads TOPOLOGY and answers with topo.
func (fc *fakeConn) answerTopology(tb testing.TB, topo wire.Topology) *wire.TopologyRequest {
	tb.Helper()
	f := fc.expect(tb, wire.OpTopology)
	fc.send(wire.OpTopologyOK, f.hdr.RequestID, &wire.TopologyOK{Topology: topo})
	return f.body.(*wire.TopologyRequest)
}

func (fc *fakeConn) sendError(id uint64, code uint16, msg string) {
	fc.send(wire.OpError, id, &wire.ErrorBody{Code: code, Message: msg})
}

// testOptions are client options for a fake at addr: loopback-only dial,
// fast backoff, and a heartbeat long enough not to disturb scripts.
func testOptions(tb testing.TB, addrs ...string) Options {
	return Options{
		Addrs:            addrs,
		Dial:             loopbackDial(tb),
		Heartbeat:        10 * time.Second,
		BackoffInitial:   5 * time.Millisecond,
		BackoffMax:       50 * time.Millisecond,
		DialTimeout:      stepTimeout,
		OperationTimeout: stepTimeout,
	}
}

// dialScripted runs Dial against fb, playing the broker's side of the
// handshake (identityA, outcome new) and of the initial TOPOLOGY.
func dialScripted(tb testing.TB, fb *fakeBroker, opts Options, topo wire.Topology) (*Client, *fakeConn) {
	tb.Helper()
	type result struct {
		c   *Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := Dial(context.Background(), opts)
		ch <- result{c, err}
	}()
	fc := fb.next(tb)
	fc.acceptHello(tb, identityA, wire.ResumeNew)
	fc.answerTopology(tb, topo)
	fc.standing = &topo
	r := <-ch
	if r.err != nil {
		tb.Fatalf("Dial: %v", r.err)
	}
	tb.Cleanup(func() { r.c.Close() })
	return r.c, fc
}

// async runs f in a goroutine and returns a channel with its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func wait(tb testing.TB, ch <-chan error) error {
	tb.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(2 * stepTimeout):
		tb.Fatal("operation did not return")
		return nil
	}
}

func queueEntry(topic string, p, n uint32, version uint64, owners ...wire.AdvertisedAddress) wire.QueueEntry {
	return wire.QueueEntry{Topic: topic, Partition: p, Owners: owners, PartitioningVersion: version, PartitionCount: n}
}

// expectRaw reads the very next frame, heartbeats included.
func (fc *fakeConn) expectRaw(tb testing.TB, op wire.Op) frame {
	tb.Helper()
	f, err := fc.readRaw(stepTimeout)
	if err != nil {
		tb.Fatalf("fake: read: %v", err)
	}
	if f.hdr.Op != op {
		tb.Fatalf("fake: got %v (id %d), want %v", f.hdr.Op, f.hdr.RequestID, op)
	}
	return f
}

func publishAsync(p *Publisher, m Message) (<-chan error, *uint64) {
	var off uint64
	ch := async(func() error {
		o, err := p.PublishConfirmed(context.Background(), m)
		off = o
		return err
	})
	return ch, &off
}

// openConn dials a low-level Conn against fb and plays HELLO.
func openConn(t *testing.T, fb *fakeBroker, cfg ConnConfig) (*Conn, *fakeConn) {
	t.Helper()
	cc, ec := dialConnAsync(t, fb.addr, cfg)
	fc := fb.next(t)
	fc.acceptHello(t, identityA, wire.ResumeNew)
	if err := wait(t, ec); err != nil {
		t.Fatal(err)
	}
	return <-cc, fc
}

func connConfig(tb testing.TB) ConnConfig {
	return ConnConfig{Dial: loopbackDial(tb), ClientName: "test", ClientVersion: "1"}
}

// dialConnAsync starts DialConn and returns the result channel.
func dialConnAsync(tb testing.TB, addr string, cfg ConnConfig) (<-chan *Conn, <-chan error) {
	cc := make(chan *Conn, 1)
	ec := make(chan error, 1)
	go func() {
		c, err := DialConn(context.Background(), addr, cfg)
		if c != nil {
			tb.Cleanup(func() { c.Close() })
		}
		cc <- c
		ec <- err
	}()
	return cc, ec
}

// answerSubscribe reads one SUBSCRIBE and answers SUBSCRIBE_OK with subID,
// echoing the request.
func answerSubscribe(t *testing.T, fc *fakeConn, subID uint64) *wire.Subscribe {
	t.Helper()
	f := fc.expect(t, wire.OpSubscribe)
	s := f.body.(*wire.Subscribe)
	fc.send(wire.OpSubscribeOK, f.hdr.RequestID, &wire.SubscribeOK{
		SubID: subID, Topic: s.Topic, Partition: s.Partition, Group: s.Group, Prefetch: s.Prefetch,
	})
	return s
}

// subscribeScripted subscribes and answers one SUBSCRIBE per sub id.
func subscribeScripted(t *testing.T, c *Client, fc *fakeConn, topic string, opts SubscribeOptions, subIDs ...uint64) *Subscription {
	t.Helper()
	var sub *Subscription
	ch := async(func() error {
		var err error
		sub, err = c.Subscribe(context.Background(), topic, opts)
		return err
	})
	for _, id := range subIDs {
		answerSubscribe(t, fc, id)
	}
	if err := wait(t, ch); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

func sendDeliver(fc *fakeConn, subID uint64, topic string, partition uint32, tag uint64, payload string) uint64 {
	deliverID++
	fc.send(wire.OpDeliver, deliverID, &wire.Deliver{
		SubID: subID, Topic: topic, Partition: partition, Offset: tag, DeliveryTag: tag,
		PublishReceived: 1_700_000_000_000, ContentType: wire.ContentType{Tag: wire.ContentText},
		Headers: wire.Headers{{Key: RetriesHeader, Value: "2"}}, Payload: []byte(payload),
	})
	return deliverID
}
