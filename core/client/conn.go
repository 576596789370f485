package client

import (
	"bufio"
	"bytes"
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
// count (docs/protocol.md#request-ids).
const firstRequestID = 4

// replyOps are the ops that only ever answer a client request (docs/protocol.md#request-ids).
func isReplyOp(op wire.Op) bool {
	switch op {
	case wire.OpHelloOK, wire.OpHelloErr, wire.OpAuthOK, wire.OpAuthErr, wire.OpPublishOK,
		wire.OpSubscribeOK, wire.OpSubscribeErr, wire.OpDeclareQueueOK, wire.OpDeclarePlexusOK,
		wire.OpTopologyOK, wire.OpRedirect, wire.OpReconcileResult, wire.OpError,
		wire.OpForwardedSessionOK, // a gateway's upstream session (docs/protocol.md#extensions)
		wire.OpNodeAdminOK:        // a peer's admin request (docs/protocol.md#node-admin)
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

// acceptsReply reports whether reply is a legal answer to request (core/wire/ops.go).
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
	case wire.OpForwardedSession:
		return reply == wire.OpForwardedSessionOK
	case wire.OpNodeAdmin:
		return reply == wire.OpNodeAdminOK
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
	// Resume is presented in HELLO (docs/protocol.md#resume); nil for a first connect.
	Resume *wire.ResumeIdentity
	// Reconcile, when set, is sent as RECONCILE_CLIENT (id 3) in the
	// handshake; its answer is in Handshake().Reconcile.
	Reconcile *wire.ReconcileClient
	// OnPush receives DELIVER, SUBSCRIPTION_CLOSED, TOPOLOGY_UPDATE,
	// GOING_AWAY, ASSIGNMENT_CHANGED and RECONCILE_SERVER frames on the
	// reader goroutine. It must not block for long: nothing else is read
	// while it runs. PINGs are answered by the connection itself. The
	// frame's body belongs to OnPush (the reader does not reuse it), so it
	// may keep or modify it.
	OnPush func(c *Conn, f Frame)
	// WriteBufferSize bounds the bytes queued for writing before callers
	// wait for the writer (default DefaultWriteBufferSize).
	WriteBufferSize int
	// ReadBufferSize is the socket read buffer and the reusable body
	// scratch (default 64 KiB each; larger bodies get their own buffer).
	// A gateway keeping thousands of mostly idle upstream connections uses
	// a small one.
	ReadBufferSize int
}

// Handshake is what the broker said during the handshake.
type Handshake struct {
	Hello     wire.HelloOK
	Reconcile *wire.ReconcileResult // nil when no RECONCILE_CLIENT was sent
}

// replyHandler receives the outcome of one registered request, exactly
// once: the reply frame (err nil), or a *notWrittenError (the frame never
// reached the socket: it may be re-sent) or an *OutcomeUnknownError. f.Body
// is only valid during the call. It must not block: it runs on the reader
// goroutine, on the writer goroutine (connection death), on a context
// watcher or on the sweep.
type replyHandler interface {
	onReply(f Frame, err error)
}

// pendingReq is one request awaiting its reply. The connection's pending
// map owns it: whoever removes it from the map (the reply, the death of
// the connection) completes it, so its handler runs exactly once. A
// request whose caller gave up (context, deadline) is marked abandoned and
// stays in the map without a handler, so that its late reply is
// recognised rather than taken for an uncorrelated one.
type pendingReq struct {
	id   uint64
	op   wire.Op
	h    replyHandler
	hook func(Frame) // reader goroutine, before h, even when abandoned
	// ctx, when set, is watched for cancellation (async requests); sync
	// callers watch their own ctx.
	ctx    context.Context
	done   <-chan struct{} // ctx.Done() while the watch is counted
	expire int64           // unix nanos after which the sweep gives up; 0 = never
	// end is the stream offset just past the request's frame (guarded by
	// wmu; 0 = not queued). The request was written iff end ≤ the offset
	// handed to the socket's Write.
	end       uint64
	dead      bool // guarded by wmu: given up before it was queued; never queue it
	abandoned bool // guarded by mu
}

// ctxWatch is one context.AfterFunc shared by every pending request with
// the same Done channel on a connection.
type ctxWatch struct {
	ctx  context.Context
	n    int // pending requests counted on it
	stop func() bool
}

// Conn is one broker connection whose handshake is done: a request/reply
// multiplexer (correlated by opcode, then request id, docs/protocol.md#request-ids), a PING/PONG
// responder, a heartbeat monitor and a batching writer.
//
// Writes: frames are appended to a per-connection buffer and one writer
// goroutine hands whatever accumulated to the socket in a single Write.
// When the writer is idle a frame goes out at once; while a Write is in
// progress later frames accumulate and leave together with the next one.
// There is no timer and no added delay. The buffer is bounded
// (backpressure: callers wait while it holds Options.WriteBufferSize bytes
// or more); PING, PONG and TOPOLOGY_UPDATE_ACK never wait.
//
// On plaintext TCP (Unix) a frame that is alone — the only request
// awaiting an answer, the ACK of the only delivery held, a control frame —
// is written by the caller itself when the writer is idle: one
// non-blocking write, whatever it could not take left to the writer. That
// saves a goroutine hand-off (a thread wake-up) per message when messages
// go one at a time, and changes nothing when they go many at a time,
// which is when the writer's batching pays.
//
// A request counts as written once its frame was handed to the socket's
// Write (minus the tail of a Write that failed part-way: those bytes never
// left). If the connection dies, requests still buffered were never
// written and may be re-sent; written ones have an unknown outcome.
//
// Most programs use Client; Conn is the low-level layer underneath it,
// handy for tools and tests.
type Conn struct {
	addr  string
	nc    net.Conn
	br    *bufio.Reader
	rbuf  []byte // reader scratch: bodies that fit are read here and borrowed
	log   *slog.Logger
	hb    time.Duration
	hs    Handshake
	push  func(*Conn, Frame)
	stats *statCounters

	// Write side, guarded by wmu.
	wmu        sync.Mutex
	wcond      sync.Cond     // the writer waits here for frames
	wbuf       []byte        // queued frames, not yet handed to Write
	wspare     []byte        // the other buffer, reused
	wmax       int           // bound on len(wbuf) before callers wait
	wbase      uint64        // stream offset of wbuf[0]
	whanded    uint64        // stream offset handed to Write (final once the writer exited)
	wwaiting   bool          // the writer is waiting on wcond
	wwriting   bool          // the writer is inside Write
	wclosed    bool          // no more frames are accepted
	wdrain     chan struct{} // set by Close: no more frames; closed once all are handed to Write
	werr       error         // why (set with wclosed)
	wspace     chan struct{} // closed when the buffer empties (callers waiting for room)
	raw        *rawWriter    // plaintext TCP on Unix: a caller's non-blocking write of a lone frame (nil otherwise)
	lastAck    ackTail       // the ACK that ends wbuf, for merging
	ackScratch wire.Ack      // encoding scratch for queueAck

	nextID   atomic.Uint64
	lastRecv atomic.Int64 // unix nanos of the last frame received
	blocked  atomic.Int32 // >0 while the reader waits for a full consumer
	// unsettled counts deliveries received here and not settled yet; a
	// hint for the lone ACK (writer.go). Allocated on its own: a delivery
	// the application keeps after a reconnect holds the counter, not the
	// dead connection and its buffers.
	unsettled *atomic.Int64

	mu      sync.Mutex
	pending map[uint64]*pendingReq
	live    atomic.Int32 // pending requests not abandoned (changed with mu held; read without it as a hint)
	watch   map[<-chan struct{}]*ctxWatch
	err     error
	done    chan struct{}

	startOnce sync.Once
}

// ackTail describes the ACK frame at the end of wbuf (valid only while it
// is the last frame and has not been handed to the writer).
type ackTail struct {
	valid     bool
	start     int // offset of its header in wbuf
	count     int // offset of its tag count in wbuf
	n         int // tags so far
	topic     string
	group     wire.Option[string]
	partition uint32
}

// maxMergedTags bounds the tags of one merged ACK (32 KiB of tags).
const maxMergedTags = 4096

// DialConn connects to addr, runs the handshake of docs/protocol.md#handshake strictly (docs/protocol.md#quiet-window) and
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
// The writer runs from here on: frames queued before Start go out at once.
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
	if cfg.WriteBufferSize <= 0 {
		cfg.WriteBufferSize = DefaultWriteBufferSize
	}
	if cfg.ReadBufferSize <= 0 {
		cfg.ReadBufferSize = readScratch
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
		br:      bufio.NewReaderSize(nc, cfg.ReadBufferSize),
		rbuf:    make([]byte, 0, cfg.ReadBufferSize),
		log:     cfg.Logger.With("broker", addr),
		hb:      cfg.Heartbeat,
		push:    cfg.OnPush,
		stats:   stats,
		wmax:    cfg.WriteBufferSize,
		pending: make(map[uint64]*pendingReq),
		done:    make(chan struct{}),
	}
	c.wcond.L = &c.wmu
	c.raw = newRawWriter(nc)
	c.unsettled = new(atomic.Int64)
	c.nextID.Store(firstRequestID)
	hs, err := c.handshake(ctx, &cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("fibril client: connect %s: %w", addr, err)
	}
	c.hs = hs
	c.lastRecv.Store(time.Now().UnixNano())
	go c.writeLoop()
	return c, nil
}

// readScratch is the reader's reusable body buffer; larger bodies are
// allocated per frame.
const readScratch = 64 << 10

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

// Close ends the connection. It first stops accepting frames and lets
// the writer hand what is already queued (acks, unconfirmed publishes,
// requests) to the socket, for at most closeFlushTimeout; then requests
// still waiting for a reply fail with ErrOutcomeUnknown (those that could
// not be written in time, as never written).
func (c *Conn) Close() error {
	c.wmu.Lock()
	if !c.wclosed && c.wdrain == nil {
		c.wdrain = make(chan struct{})
		c.checkDrainedLocked()
	}
	drained := c.wdrain
	c.wmu.Unlock()
	if drained != nil {
		t := time.NewTimer(closeFlushTimeout)
		select {
		case <-drained:
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
	}
	c.fail(ErrClosed)
	return nil
}

// closeFlushTimeout bounds the flush of Close.
const closeFlushTimeout = 2 * time.Second

// checkDrainedLocked signals a closing connection whose queued frames are
// all handed to the socket.
func (c *Conn) checkDrainedLocked() {
	if c.wdrain != nil && len(c.wbuf) == 0 && !c.wwriting {
		select {
		case <-c.wdrain:
		default:
			close(c.wdrain)
		}
	}
}

// refuseLocked is the error for a frame queued after the end (or the
// Close) of the connection.
func (c *Conn) refuseLocked() error {
	if c.wclosed {
		return &notWrittenError{err: c.werr}
	}
	if c.wdrain != nil {
		return &notWrittenError{err: ErrClosed}
	}
	return nil
}

// NextID hands out the next request id (ids count up from 4, docs/protocol.md#request-ids).
func (c *Conn) NextID() uint64 { return c.nextID.Add(1) - 1 }

// fail ends the connection once, recording the first reason. The writer
// then stops (a Write in progress is interrupted by closing the socket)
// and completes every pending request (resolvePending).
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	c.mu.Unlock()
	c.wmu.Lock()
	c.closeWritesLocked(err)
	c.wmu.Unlock()
	c.nc.Close()
	if !errors.Is(err, ErrClosed) {
		c.log.Debug("connection ended", "err", err)
	}
}

func (c *Conn) closeWritesLocked(err error) {
	if c.wclosed {
		return
	}
	c.wclosed = true
	c.werr = err
	c.wcond.Broadcast()
	if c.wspace != nil {
		close(c.wspace)
		c.wspace = nil
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

// --- requests ---------------------------------------------------------------

// register gives p a request id and adds it to the pending map. It fails
// with a *notWrittenError once the connection has ended.
func (c *Conn) register(p *pendingReq) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return &notWrittenError{err: c.err}
	}
	p.id = c.NextID()
	p.end = 0
	p.dead = false
	p.abandoned = false
	p.done = nil
	if p.ctx != nil {
		if d := p.ctx.Done(); d != nil {
			w := c.watch[d]
			if w == nil {
				if c.watch == nil {
					c.watch = make(map[<-chan struct{}]*ctxWatch)
				}
				w = &ctxWatch{ctx: p.ctx}
				w.stop = context.AfterFunc(p.ctx, func() { c.ctxEnded(d) })
				c.watch[d] = w
			}
			w.n++
			p.done = d
		}
	}
	c.pending[p.id] = p
	c.live.Add(1)
	return nil
}

// releaseLocked uncounts p (taken from the map, or abandoned).
func (c *Conn) releaseLocked(p *pendingReq) {
	c.live.Add(-1)
	if p.done != nil {
		if w := c.watch[p.done]; w != nil {
			w.n--
		}
		p.done = nil
	}
}

// unregister removes p (registered under id) if it is still pending;
// false means someone else (the reply or the connection's death) took it
// and completes it. p's fields are only read once it is known to be still
// ours: a taken request may already be registered elsewhere (a re-send).
func (c *Conn) unregister(id uint64, p *pendingReq) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[id] != p || p.abandoned {
		return false
	}
	delete(c.pending, id)
	c.releaseLocked(p)
	return true
}

// abandon marks p (registered under id) as given up by its caller if it
// is still pending; its entry stays so that a late reply is recognised.
// False means the reply (or the death of the connection) got there first
// and completes it.
func (c *Conn) abandon(id uint64, p *pendingReq) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[id] != p || p.abandoned {
		return false
	}
	p.abandoned = true
	c.releaseLocked(p)
	return true
}

// ctxEnded gives up every request watched on the context whose Done
// channel is d: their outcome is unknown (the frame may be written yet).
func (c *Conn) ctxEnded(d <-chan struct{}) {
	c.mu.Lock()
	w := c.watch[d]
	if w == nil {
		c.mu.Unlock()
		return
	}
	delete(c.watch, d)
	var out []*pendingReq
	for _, p := range c.pending {
		if p.done == d && !p.abandoned {
			p.abandoned = true
			c.live.Add(-1)
			p.done = nil
			out = append(out, p)
		}
	}
	queued := c.markDead(out)
	c.mu.Unlock()
	c.giveUp(out, queued, w.ctx.Err())
}

// markDead (mu held) tells which of the given-up requests were queued;
// the others are marked so that they never will be.
func (c *Conn) markDead(ps []*pendingReq) []bool {
	if len(ps) == 0 {
		return nil
	}
	queued := make([]bool, len(ps))
	c.wmu.Lock()
	for i, p := range ps {
		queued[i] = p.end != 0
		if !queued[i] {
			p.dead = true
		}
	}
	c.wmu.Unlock()
	return queued
}

// giveUp completes requests given up by their context or deadline: an
// unknown outcome once queued (the frame may be on its way), else never
// written.
func (c *Conn) giveUp(ps []*pendingReq, queued []bool, cause error) {
	for i, p := range ps {
		if queued[i] {
			p.h.onReply(Frame{}, &OutcomeUnknownError{Op: p.op, Cause: cause})
		} else {
			p.h.onReply(Frame{}, &notWrittenError{err: cause})
		}
	}
}

// sweep gives up requests whose expiry passed (operations whose context
// has no deadline are bounded by OperationTimeout this way, without a
// timer per call) and drops context watches nobody uses.
func (c *Conn) sweep(now time.Time) {
	ns := now.UnixNano()
	c.mu.Lock()
	var out []*pendingReq
	for _, p := range c.pending {
		if p.expire != 0 && p.expire <= ns && !p.abandoned {
			p.abandoned = true
			c.releaseLocked(p)
			out = append(out, p)
		}
	}
	for d, w := range c.watch {
		if w.n <= 0 {
			w.stop()
			delete(c.watch, d)
		}
	}
	queued := c.markDead(out)
	c.mu.Unlock()
	c.giveUp(out, queued, context.DeadlineExceeded)
}

// start registers p and queues its frame. On error nothing was queued and
// p's handler will not run, except when the connection's death took p
// first: then the handler runs (with a not-written error) and start
// returns nil.
func (c *Conn) start(ctx context.Context, p *pendingReq, body wire.Encoder) error {
	if err := c.waitRoom(ctx); err != nil {
		return err
	}
	if err := c.register(p); err != nil {
		return err
	}
	id := p.id
	if err := c.queueFrame(ctx, p.op, id, body, p, false); err != nil {
		if c.unregister(id, p) {
			return err
		}
	}
	return nil
}

// Send queues a fire-and-forget frame (ACK, NACK, unconfirmed PUBLISH,
// TOPOLOGY_UPDATE_ACK, PONG) with the given request id; 0 allocates one.
// It returns once the frame is queued for writing, waiting while the
// write buffer is full; a frame still queued when the connection dies is
// never written, and nobody is told.
func (c *Conn) Send(op wire.Op, id uint64, body wire.Encoder) error {
	if id == 0 {
		id = c.NextID()
	}
	return c.queueFrame(context.Background(), op, id, body, nil, false)
}

// sendControl queues a frame that must never wait for room (it is sent
// from the reader or the heartbeat).
func (c *Conn) sendControl(op wire.Op, id uint64, body wire.Encoder) {
	if err := c.queueFrame(context.Background(), op, id, body, nil, true); err != nil {
		c.log.Debug("frame not written", "op", op, "err", err)
	}
}

// syncCall is a request whose caller waits for its reply.
type syncCall struct {
	pendingReq
	ch chan syncResult // capacity 1
}

type syncResult struct {
	f   Frame
	err error
}

func (s *syncCall) onReply(f Frame, err error) {
	if err == nil {
		f.Body = bytes.Clone(f.Body) // the reader reuses its buffer
	}
	s.ch <- syncResult{f, err}
}

// syncCalls recycles synchronous calls; each call makes its own channel,
// for the reason pubOps gives.
var syncCalls = sync.Pool{New: func() any {
	s := &syncCall{}
	s.h = s
	return s
}}

// Do sends a request and waits for its reply frame (any of the legal reply
// ops for that request, ERROR and REDIRECT included; the caller interprets
// them). A reply op that cannot answer this request fails with
// ErrProtocol. If the frame was never written the error is retryable;
// once written, a lost connection or an expired ctx gives an error
// matching ErrOutcomeUnknown: the request is never replayed.
func (c *Conn) Do(ctx context.Context, op wire.Op, body wire.Encoder) (Frame, error) {
	return c.do(ctx, op, body, nil, time.Time{})
}

// do is Do with a hook run on the reader goroutine when the reply arrives,
// before any later frame is read (used to register a new sub_id before
// its first DELIVER is dispatched). The hook also runs if the caller has
// already given up. A non-zero expire bounds the wait without a timer
// (the heartbeat's sweep gives up after it).
func (c *Conn) do(ctx context.Context, op wire.Op, body wire.Encoder, hook func(Frame), expire time.Time) (Frame, error) {
	if err := ctx.Err(); err != nil {
		return Frame{}, &notWrittenError{err: err}
	}
	if err := c.waitRoom(ctx); err != nil {
		return Frame{}, err
	}
	s := syncCalls.Get().(*syncCall)
	s.op, s.hook, s.ctx, s.expire = op, hook, nil, 0
	s.ch = make(chan syncResult, 1)
	if !expire.IsZero() {
		s.expire = expire.UnixNano()
	}
	if err := c.register(&s.pendingReq); err != nil {
		s.hook = nil
		syncCalls.Put(s)
		return Frame{}, err
	}
	id := s.id
	if err := c.queueFrame(ctx, op, id, body, &s.pendingReq, false); err != nil && c.unregister(id, &s.pendingReq) {
		s.hook = nil
		syncCalls.Put(s)
		return Frame{}, err
	}
	var r syncResult
	select {
	case r = <-s.ch:
	case <-ctx.Done():
		if c.abandon(id, &s.pendingReq) {
			// The entry stays registered (without a waiter) so that a late
			// reply is recognised as ours; s is not reused.
			return Frame{}, &OutcomeUnknownError{Op: op, Cause: ctx.Err()}
		}
		r = <-s.ch // the reply raced the cancellation
	}
	if !s.abandoned { // given up by the sweep: its entry stays registered
		s.hook = nil
		syncCalls.Put(s)
	}
	if r.err != nil {
		return Frame{}, r.err
	}
	return checkReply(op, r.f)
}

func checkReply(op wire.Op, f Frame) (Frame, error) {
	if !acceptsReply(op, f.Op) {
		return f, protocolErrorf("%v answered with %v (request id %d)", op, f.Op, f.RequestID)
	}
	return f, nil
}

// --- read side ----------------------------------------------------------------

func (c *Conn) readLoop() {
	for {
		h, body, err := wire.ReadFrame(c.br, c.rbuf, math.MaxUint32)
		if err != nil {
			c.fail(fmt.Errorf("%w: read: %v", ErrConnectionLost, err))
			return
		}
		c.lastRecv.Store(time.Now().UnixNano())
		// Bodies that fit the scratch buffer are borrowed; the rest were
		// allocated for this frame.
		c.dispatch(Frame{Op: h.Op, RequestID: h.RequestID, Body: body}, int(h.BodyLen) <= cap(c.rbuf))
		if c.closed() {
			return
		}
	}
}

// dispatch routes one frame: opcode first, then request id (docs/protocol.md#request-ids).
// borrowed tells that f.Body is the reader's scratch buffer.
func (c *Conn) dispatch(f Frame, borrowed bool) {
	switch {
	case isReplyOp(f.Op):
		c.mu.Lock()
		p := c.pending[f.RequestID]
		if p != nil {
			delete(c.pending, f.RequestID)
			if !p.abandoned {
				c.releaseLocked(p)
			}
		}
		c.mu.Unlock()
		if p == nil {
			if f.Op == wire.OpError {
				// Every SDK drops the connection here (docs/protocol.md#request-ids, docs/protocol.md#answers).
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
		if !p.abandoned {
			p.h.onReply(f, nil)
		}
	case f.Op == wire.OpPing:
		c.sendControl(wire.OpPong, f.RequestID, nil)
	case f.Op == wire.OpPong:
		// Liveness only (already counted by lastRecv).
	case isPushOp(f.Op):
		if c.push != nil {
			if borrowed {
				f.Body = bytes.Clone(f.Body) // pushes own their body
			}
			c.push(c, f)
		}
	default:
		// Unknown opcodes are ignored, which keeps new push ops safe (docs/protocol.md#malformed).
		c.stats.ignoredFrames.Add(1)
		c.log.Debug("ignoring frame", "op", f.Op, "request_id", f.RequestID)
	}
}

// heartbeatLoop sends a PING every interval and declares the connection
// dead when nothing arrived for more than 3 intervals (docs/protocol.md#heartbeats). Time spent
// with the reader parked on a full auto-ack consumer does not count. It
// also runs the sweep of expired requests, at least once a second.
func (c *Conn) heartbeatLoop() {
	t := time.NewTicker(c.hb)
	defer t.Stop()
	var sweepC <-chan time.Time
	if c.hb > time.Second {
		st := time.NewTicker(time.Second)
		defer st.Stop()
		sweepC = st.C
	}
	for {
		select {
		case <-c.done:
			return
		case now := <-sweepC:
			c.sweep(now)
			continue
		case <-t.C:
		}
		if c.blocked.Load() == 0 {
			idle := time.Since(time.Unix(0, c.lastRecv.Load()))
			if idle > 3*c.hb {
				c.fail(fmt.Errorf("%w: nothing received for %v", ErrHeartbeatTimeout, idle.Round(time.Millisecond)))
				return
			}
		}
		c.sweep(time.Now())
		if err := c.queueFrame(context.Background(), wire.OpPing, c.NextID(), nil, nil, true); err != nil {
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

// waiters is the number of requests still waiting for a reply (requests
// whose caller gave up do not count).
func (c *Conn) waiters() int { return int(c.live.Load()) }
