package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Frame is one received frame. Body is owned by the receiver (it is never
// reused by the connection).
type Frame struct {
	Op        wire.Op
	RequestID uint64
	Body      []byte
}

// Decode decodes the body into b.
func (f Frame) Decode(b wire.Body) error { return b.Decode(f.Body) }

// firstRequestID is the first id after the handshake ids 1 (HELLO), 2
// (AUTH) and 3 (RECONCILE_CLIENT), as the Rust, Python and TypeScript SDKs
// count (§2.2).
const firstRequestID = 4

// replyOps are the ops that only ever answer a client request (§2.2).
func isReplyOp(op wire.Op) bool {
	switch op {
	case wire.OpHelloOK, wire.OpHelloErr, wire.OpAuthOK, wire.OpAuthErr, wire.OpPublishOK,
		wire.OpSubscribeOK, wire.OpSubscribeErr, wire.OpDeclareQueueOK, wire.OpDeclarePlexusOK,
		wire.OpTopologyOK, wire.OpRedirect, wire.OpReconcileResult, wire.OpError:
		return true
	}
	return false
}

// isPushOp lists the broker-initiated ops handed to the push handler.
// PING is answered by the connection itself; PONG only proves liveness.
func isPushOp(op wire.Op) bool {
	switch op {
	case wire.OpDeliver, wire.OpSubscriptionClosed, wire.OpTopologyUpdate, wire.OpGoingAway,
		wire.OpAssignmentChanged, wire.OpReconcileServer:
		return true
	}
	return false
}

// acceptsReply reports whether reply is a legal answer to request (§5).
func acceptsReply(request, reply wire.Op) bool {
	if reply == wire.OpError {
		return true
	}
	switch request {
	case wire.OpPublish, wire.OpPublishDelayed:
		return reply == wire.OpPublishOK || reply == wire.OpRedirect
	case wire.OpSubscribe, wire.OpSubscribeStream:
		return reply == wire.OpSubscribeOK || reply == wire.OpSubscribeErr || reply == wire.OpRedirect
	case wire.OpDeclareQueue:
		return reply == wire.OpDeclareQueueOK
	case wire.OpDeclarePlexus:
		return reply == wire.OpDeclarePlexusOK
	case wire.OpTopology:
		return reply == wire.OpTopologyOK
	case wire.OpReconcileClient:
		return reply == wire.OpReconcileResult
	case wire.OpAuth:
		return reply == wire.OpAuthOK || reply == wire.OpAuthErr
	case wire.OpHello:
		return reply == wire.OpHelloOK || reply == wire.OpHelloErr
	}
	return false
}

// ConnConfig configures DialConn.
type ConnConfig struct {
	ClientName, ClientVersion string
	Username, Password        string
	TLS                       *tls.Config
	Heartbeat                 time.Duration // default 5s
	Dial                      func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger                    *slog.Logger
	// Resume is presented in HELLO (§8.4); nil for a first connect.
	Resume *wire.ResumeIdentity
	// Reconcile, when set, is sent as RECONCILE_CLIENT (id 3) in the
	// handshake; its answer is in Handshake().Reconcile.
	Reconcile *wire.ReconcileClient
	// OnPush receives DELIVER, SUBSCRIPTION_CLOSED, TOPOLOGY_UPDATE,
	// GOING_AWAY, ASSIGNMENT_CHANGED and RECONCILE_SERVER frames on the
	// reader goroutine. It must not block for long: nothing else is read
	// while it runs. PINGs are answered by the connection itself.
	OnPush func(c *Conn, f Frame)
}

// Handshake is what the broker said during the handshake.
type Handshake struct {
	Hello     wire.HelloOK
	Reconcile *wire.ReconcileResult // nil when no RECONCILE_CLIENT was sent
}

type pendingReq struct {
	op   wire.Op
	ch   chan Frame // capacity 1
	hook func(Frame)
}

// Conn is one broker connection whose handshake is done: a request/reply
// multiplexer (correlated by opcode, then request id, §2.2), a PING/PONG
// responder and a heartbeat monitor. Most programs use Client; Conn is the
// low-level layer underneath it, handy for tools and tests.
type Conn struct {
	addr  string
	nc    net.Conn
	br    *bufio.Reader
	log   *slog.Logger
	hb    time.Duration
	hs    Handshake
	push  func(*Conn, Frame)
	stats *statCounters

	wmu  sync.Mutex
	wbuf []byte

	nextID   atomic.Uint64
	waiting  atomic.Int32 // Do calls waiting for a reply
	lastRecv atomic.Int64 // unix nanos of the last frame received
	blocked  atomic.Int32 // >0 while the reader waits for a full consumer

	mu      sync.Mutex
	pending map[uint64]*pendingReq
	err     error
	done    chan struct{}

	startOnce sync.Once
}

// DialConn connects to addr, runs the handshake of §8.1 strictly (§8.2) and
// starts reading. Any frame other than the expected reply during the
// handshake fails the dial with ErrProtocol.
func DialConn(ctx context.Context, addr string, cfg ConnConfig) (*Conn, error) {
	c, err := dialConn(ctx, addr, cfg, nil)
	if err != nil {
		return nil, err
	}
	c.Start()
	return c, nil
}

// dialConn connects and handshakes but does not start the reader, so that
// the caller can install the reconcile verdicts before any push is read.
func dialConn(ctx context.Context, addr string, cfg ConnConfig, stats *statCounters) (*Conn, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	if cfg.ClientName == "" {
		cfg.ClientName = DefaultClientName
	}
	if cfg.ClientVersion == "" {
		cfg.ClientVersion = DefaultClientVersion
	}
	if stats == nil {
		stats = new(statCounters)
	}
	nc, err := cfg.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fibril client: dial %s: %w", addr, err)
	}
	if cfg.TLS != nil {
		nc, err = tlsClient(ctx, nc, addr, cfg.TLS)
		if err != nil {
			return nil, err
		}
	}
	c := &Conn{
		addr:    addr,
		nc:      nc,
		br:      bufio.NewReaderSize(nc, 64<<10),
		log:     cfg.Logger.With("broker", addr),
		hb:      cfg.Heartbeat,
		push:    cfg.OnPush,
		stats:   stats,
		pending: make(map[uint64]*pendingReq),
		done:    make(chan struct{}),
	}
	c.nextID.Store(firstRequestID)
	hs, err := c.handshake(ctx, &cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("fibril client: connect %s: %w", addr, err)
	}
	c.hs = hs
	c.lastRecv.Store(time.Now().UnixNano())
	return c, nil
}

// Start begins reading frames and sending heartbeats. DialConn calls it;
// it is idempotent.
func (c *Conn) Start() {
	c.startOnce.Do(func() {
		c.lastRecv.Store(time.Now().UnixNano())
		go c.readLoop()
		go c.heartbeatLoop()
	})
}

// Addr is the host:port this connection was dialed with.
func (c *Conn) Addr() string { return c.addr }

// Handshake returns the broker's handshake answers.
func (c *Conn) Handshake() Handshake { return c.hs }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while it is open).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection. Requests still in flight fail with
// ErrOutcomeUnknown.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// NextID hands out the next request id (ids count up from 4, §2.2).
func (c *Conn) NextID() uint64 { return c.nextID.Add(1) - 1 }

// fail ends the connection once, recording the first reason.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	if !errors.Is(err, ErrClosed) {
		c.log.Debug("connection ended", "err", err)
	}
}

func (c *Conn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// writeFrame writes one complete frame. A failed write leaves the broker
// with at most a truncated frame, which it cannot act on: the error is a
// *notWrittenError (safe to re-send elsewhere) and the connection is
// ended, since the byte stream is now unusable.
func (c *Conn) writeFrame(op wire.Op, id uint64, body wire.Encoder) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed() {
		return &notWrittenError{err: c.connErr()}
	}
	c.wbuf = wire.AppendFrame(c.wbuf[:0], op, id, body)
	c.nc.SetWriteDeadline(time.Now().Add(max(10*time.Second, 3*c.hb)))
	_, err := c.nc.Write(c.wbuf)
	if cap(c.wbuf) > 1<<20 {
		c.wbuf = nil // do not pin a large payload buffer
	}
	if err != nil {
		c.fail(fmt.Errorf("%w: write: %v", ErrConnectionLost, err))
		return &notWrittenError{err: err}
	}
	return nil
}

func (c *Conn) connErr() error {
	if err := c.Err(); err != nil {
		return err
	}
	return ErrConnectionLost
}

// Send writes a fire-and-forget frame (ACK, NACK, unconfirmed PUBLISH,
// TOPOLOGY_UPDATE_ACK, PONG) with the given request id; 0 allocates one.
// It returns once the frame is written.
func (c *Conn) Send(op wire.Op, id uint64, body wire.Encoder) error {
	if id == 0 {
		id = c.NextID()
	}
	return c.writeFrame(op, id, body)
}

// sendAsync writes a frame without blocking the reader goroutine: if the
// reader waited on a write while the broker waits on its own write to us,
// full TCP buffers on both sides would deadlock the connection.
func (c *Conn) sendAsync(op wire.Op, id uint64, body wire.Encoder) {
	go func() {
		if err := c.Send(op, id, body); err != nil {
			c.log.Debug("frame not written", "op", op, "err", err)
		}
	}()
}

// Do sends a request and waits for its reply frame (any of the legal reply
// ops for that request, ERROR and REDIRECT included; the caller interprets
// them). A reply op that cannot answer this request fails with
// ErrProtocol. If the frame could not be written the error is retryable;
// once written, a lost connection or an expired ctx gives an error
// matching ErrOutcomeUnknown: the request is never replayed.
func (c *Conn) Do(ctx context.Context, op wire.Op, body wire.Encoder) (Frame, error) {
	return c.do(ctx, op, body, nil)
}

// do is Do with a hook run on the reader goroutine when the reply arrives,
// before any later frame is read (used to register a new sub_id before
// its first DELIVER is dispatched). The hook also runs if the caller has
// already given up.
func (c *Conn) do(ctx context.Context, op wire.Op, body wire.Encoder, hook func(Frame)) (Frame, error) {
	if err := ctx.Err(); err != nil {
		return Frame{}, &notWrittenError{err: err}
	}
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	id := c.NextID()
	p := &pendingReq{op: op, ch: make(chan Frame, 1), hook: hook}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return Frame{}, &notWrittenError{err: c.connErr()}
	}
	c.pending[id] = p
	c.mu.Unlock()
	if err := c.writeFrame(op, id, body); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return Frame{}, err
	}
	select {
	case f := <-p.ch:
		return checkReply(op, f)
	case <-c.done:
		select {
		case f := <-p.ch: // the reply raced the close
			return checkReply(op, f)
		default:
		}
		return Frame{}, &OutcomeUnknownError{Op: op, Cause: c.connErr()}
	case <-ctx.Done():
		// The entry stays registered (without a waiter) so that a late
		// reply is recognised as ours rather than as an uncorrelated one.
		return Frame{}, &OutcomeUnknownError{Op: op, Cause: ctx.Err()}
	}
}

func checkReply(op wire.Op, f Frame) (Frame, error) {
	if !acceptsReply(op, f.Op) {
		return f, protocolErrorf("%v answered with %v (request id %d)", op, f.Op, f.RequestID)
	}
	return f, nil
}

func (c *Conn) readLoop() {
	for {
		h, body, err := wire.ReadFrame(c.br, nil, math.MaxUint32)
		if err != nil {
			c.fail(fmt.Errorf("%w: read: %v", ErrConnectionLost, err))
			return
		}
		c.lastRecv.Store(time.Now().UnixNano())
		c.dispatch(Frame{Op: h.Op, RequestID: h.RequestID, Body: body})
		if c.closed() {
			return
		}
	}
}

// dispatch routes one frame: opcode first, then request id (§2.2).
func (c *Conn) dispatch(f Frame) {
	switch {
	case isReplyOp(f.Op):
		c.mu.Lock()
		p := c.pending[f.RequestID]
		delete(c.pending, f.RequestID)
		c.mu.Unlock()
		if p == nil {
			if f.Op == wire.OpError {
				// Every SDK drops the connection here (§2.2, §19 item 5).
				err := errorFromBody(wire.OpError, f.Body)
				c.stats.uncorrelatedErrors.Add(1)
				c.log.Warn("uncorrelated ERROR; dropping the connection", "request_id", f.RequestID, "err", err)
				c.fail(fmt.Errorf("%w: uncorrelated ERROR for request id %d: %v", ErrConnectionLost, f.RequestID, err))
				return
			}
			c.stats.unmatchedReplies.Add(1)
			c.log.Debug("reply for no pending request", "op", f.Op, "request_id", f.RequestID)
			return
		}
		if !acceptsReply(p.op, f.Op) {
			c.stats.protocolViolations.Add(1)
		}
		if p.hook != nil {
			p.hook(f)
		}
		p.ch <- f
	case f.Op == wire.OpPing:
		c.sendAsync(wire.OpPong, f.RequestID, nil)
	case f.Op == wire.OpPong:
		// Liveness only (already counted by lastRecv).
	case isPushOp(f.Op):
		if c.push != nil {
			c.push(c, f)
		}
	default:
		// Unknown opcodes are ignored, which keeps new push ops safe (§8.9).
		c.stats.ignoredFrames.Add(1)
		c.log.Debug("ignoring frame", "op", f.Op, "request_id", f.RequestID)
	}
}

// heartbeatLoop sends a PING every interval and declares the connection
// dead when nothing arrived for more than 3 intervals (§8.6). Time spent
// with the reader parked on a full auto-ack consumer does not count.
func (c *Conn) heartbeatLoop() {
	t := time.NewTicker(c.hb)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if c.blocked.Load() == 0 {
			idle := time.Since(time.Unix(0, c.lastRecv.Load()))
			if idle > 3*c.hb {
				c.fail(fmt.Errorf("%w: nothing received for %v", ErrHeartbeatTimeout, idle.Round(time.Millisecond)))
				return
			}
		}
		if err := c.Send(wire.OpPing, 0, nil); err != nil {
			return
		}
	}
}

// parkReader marks the reader as waiting on a consumer (flow control, not
// a dead broker) and returns the function that unparks it.
func (c *Conn) parkReader() func() {
	c.blocked.Add(1)
	return func() {
		c.lastRecv.Store(time.Now().UnixNano())
		c.blocked.Add(-1)
	}
}

// waiters is the number of Do calls still waiting for a reply (requests
// whose caller gave up do not count).
func (c *Conn) waiters() int { return int(c.waiting.Load()) }
