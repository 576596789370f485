package session

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/wire"
)

// Conn is one client socket: a reader goroutine (serve) that handles frames
// in order, and a writer goroutine (writeLoop) that owns the write side.
type Conn struct {
	srv     *Server
	nc      net.Conn
	br      frameSource
	bw      *bufio.Writer // from writeBufs while a write round has bytes to flush; nil when idle
	counted *countingConn // nc, counting bytes: what br and bw read and write
	id      uint64        // process-unique, never reused
	// clientAddr is what the loopback rule of the built-in login sees
	// (S-146): the socket's remote IP, or the zero Addr for a stream that
	// arrived through the peer transport, which is never a loopback client.
	clientAddr netip.Addr
	remote     string
	tlsState   *tls.ConnectionState
	log        *slog.Logger

	// Reader-only state.
	sess      *Session     // set once HELLO succeeded, never changed
	principal *Principal   // nil until authenticated
	peerNode  string       // node named by the verified peer certificate of an @node login (NodeIdentity)
	repl      *replStreams // running replication streams (replication.go); reader goroutine
	// forwarded is the accepted FORWARDED_SESSION of an upstream
	// connection (docs/protocol.md#extensions): nil on a client's own connection.
	forwarded *wire.ForwardedSession
	// forwardedResumed: forwarded is the session's, taken over when a
	// resume proved @node again, not one sent on this connection; the
	// gateway may announce it once more (handleForwardedSession).
	forwardedResumed bool
	// nodeProof: this connection resumed a node session and has not
	// proven @node yet (docs/protocol.md#resume). It is not attached to the
	// session until it has; until then only AUTH and PING are answered.
	nodeProof   bool
	rbuf        []byte // frame buffer reused between frames while input is waiting; nil when idle
	slotPending bool   // the request being handled holds an unused reply slot
	acks        pendingAcks
	stopReading bool      // the request answered with close-after
	owed        committer // a deferred publish awaits commitOwed (see serve)

	slots chan struct{} // reply slots (see package doc, Backpressure)

	mu       sync.Mutex // guards replies, spare and holdKick
	replies  []outFrame
	spare    []outFrame
	holdKick bool // the reader writes what is queued itself (commitOwed): enqueue does not wake the writer

	// wlock is the write side: the writer holds it for each round, and the
	// reader when it writes answers itself (writeAnswers). bw, scratch and spare belong
	// to its holder.
	wlock sync.Mutex

	wake       chan struct{} // cap 1: the writer has something to do
	done       chan struct{} // closed when the connection is ending
	closeOnce  sync.Once
	writerDone chan struct{}

	draining   atomic.Bool   // shutdown: stop reading, answer what is in flight, then close
	windowOpen atomic.Bool   // quiet window over (docs/protocol.md#quiet-window)
	opened     chan struct{} // closed when windowOpen turns true
	lastRecv   atomic.Int64  // unix nanos of the end of the last frame's handling (of the handshake before one)
	// handling: the reader is busy with a frame it read (serve), so the
	// connection is not idle however long that takes (S-11 counts the
	// client's silence, not this broker's work or backpressure).
	handling atomic.Bool
	orderly  atomic.Bool // the peer ended the stream at a frame boundary
	// releaseOnClose: an accepted FFS2 asked for the session to end at
	// once on an orderly close (docs/protocol.md#forwarded-session) instead of waiting its grace.
	releaseOnClose atomic.Bool

	// relay is the connection's forwarding state (core/forward): upstream
	// sessions and forwarded subscriptions, and the relayed bytes queued
	// for the writer.
	relay    *forward.Relay
	identity atomic.Pointer[connIdentity] // published by the reader (connections.go)
	topoAck  atomic.Uint64

	// Writer-only state (pushID), and state of the wlock holder (scratch).
	pushID  uint64 // broker-initiated request ids: one counter from 0 (docs/protocol.md#request-ids)
	scratch []byte
}

// outFrame is one queued answer. PUBLISH_OK is kept inline (op and offset)
// so the confirm path allocates nothing; other answers carry a body.
type outFrame struct {
	op          wire.Op
	reqID       uint64
	offset      uint64       // PUBLISH_OK when body is nil
	body        wire.Encoder // nil for empty bodies and inline PUBLISH_OK
	slot        bool         // return a reply slot once written
	opensWindow bool         // RECONCILE_RESULT: the quiet window ends once it is written
	closeAfter  bool         // close the connection once this frame is on the wire
	relay       int          // bytes of a relayed frame (relay backpressure, forward.Relay.Written)
	finish      bool         // no frame: close once everything queued so far (pushes too) is written
}

// frameSource is what the reader reads frames from: a bufio.Reader, or
// for plaintext TCP once the handshake is over an idleReader.
type frameSource interface {
	io.Reader
	Buffered() int
}

// Per-connection buffers. An idle connection (a client that holds a
// session and waits) keeps no buffer on plaintext TCP (idleReader) and
// only its read buffer otherwise: the frame buffer and the write buffer
// come from pools while frames flow and go back when the connection
// waits, so ten thousand idle clients cost well under 32 KiB each.
const (
	readBufSize  = 16 << 10 // the socket read buffer
	writeBufSize = 64 << 10 // the write buffer of one round (one syscall per round)
	rbufKeep     = 64 << 10 // frame buffer kept between frames; larger frames get their own
)

// frameBufs and writeBufs are the pools behind rbuf and bw.
var (
	frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, rbufKeep); return &b }}
	writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}
)

func newConn(srv *Server, nc net.Conn, id uint64) *Conn {
	c := &Conn{
		srv:        srv,
		nc:         nc,
		id:         id,
		remote:     nc.RemoteAddr().String(),
		slots:      make(chan struct{}, srv.opts.ReplySlots),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		writerDone: make(chan struct{}),
		opened:     make(chan struct{}),
	}
	if _, viaPeer := nc.(core.Stream); !viaPeer {
		// Only the peer transport hands the server a core.Stream; its
		// remote end is a peer broker, or a proxy in front of the peer
		// listener, and 127.0.0.1 there says nothing about a client.
		if ap, err := netip.ParseAddrPort(c.remote); err == nil {
			c.clientAddr = ap.Addr().Unmap()
		}
	}
	if ts, ok := nc.(core.TLSStater); ok {
		// *tls.Conn, or a transport stream that ran a TLS handshake
		st := ts.ConnectionState()
		c.tlsState = &st
	}
	c.counted = &countingConn{Conn: nc, m: srv.opts.Metrics}
	c.br = bufio.NewReaderSize(c.counted, readBufSize)
	c.log = srv.opts.Logger.With("conn", id, "remote", c.remote)
	c.relay = srv.gw.NewRelay((*relayPort)(c), c.done)
	c.lastRecv.Store(srv.opts.Now().UnixNano())
	return c
}

// serve runs the reader: the HELLO exchange, then every later frame in
// order. It returns when the connection is over, after the session (if
// any) has been told.
func (c *Conn) serve() {
	defer c.terminate()
	defer c.flushAcks()
	defer c.commitOwed()
	if !c.handshake() {
		return
	}
	go c.writeLoop()
	c.useIdleReader()
	max := c.srv.opts.maxBody()
	defer c.releaseFrameBuf()
	for !c.stopReading {
		h, body, err := wire.ReadFrame(c.br, c.frameBuf(), max)
		if err != nil {
			c.readFailed(h, err)
			return
		}
		c.handling.Store(true)
		if h.Op != wire.OpAck {
			c.flushAcks()
		}
		c.dispatch(h, body)
		if c.br.Buffered() == 0 { // about to wait for input
			c.flushAcks()
			c.commitOwed()
		}
		c.lastRecv.Store(c.srv.opts.Now().UnixNano())
		c.handling.Store(false)
	}
}

// useIdleReader moves a plaintext TCP connection to an idleReader once its
// handshake is over (the handshake reads through bufio, with its first
// frame deadline): from then on the connection holds a read buffer only
// while input waits. Other connections (TLS, streams of the inter-broker
// transport, pipes in tests) keep their bufio.Reader.
func (c *Conn) useIdleReader() {
	br, ok := c.br.(*bufio.Reader)
	if !ok {
		return
	}
	tcp, ok := plainTCP(c.nc)
	if !ok {
		return
	}
	pre, _ := br.Peek(br.Buffered())
	if r, ok := newIdleReader(tcp, c.srv.opts.Metrics, pre); ok {
		c.br = r
	}
}

// plainTCP returns the TCP socket under nc when its reads can go straight
// to it: nc is one, or a wrapper that says so (tlsconf's replay of sniffed
// bytes, once they are all read).
func plainTCP(nc net.Conn) (*net.TCPConn, bool) {
	switch x := nc.(type) {
	case *net.TCPConn:
		return x, true
	case interface{ PlainTCP() (*net.TCPConn, bool) }:
		return x.PlainTCP()
	}
	return nil, false
}

// frameBuf is the buffer for the next frame's body: the pooled one while
// input is already buffered (frames are flowing), none when the reader is
// about to wait (ReadFrame then allocates the body of the frame that ends
// the wait, and an idle connection holds no frame buffer).
func (c *Conn) frameBuf() []byte {
	if c.br.Buffered() == 0 {
		c.releaseFrameBuf()
		return nil
	}
	if c.rbuf == nil {
		c.rbuf = *frameBufs.Get().(*[]byte)
	}
	return c.rbuf[:0]
}

func (c *Conn) releaseFrameBuf() {
	if c.rbuf != nil {
		b := c.rbuf[:0]
		frameBufs.Put(&b)
		c.rbuf = nil
	}
}

// readFailed handles the end of the read side.
func (c *Conn) readFailed(h wire.FrameHeader, err error) {
	var tooBig *wire.FrameTooLargeError
	switch {
	case errors.As(err, &tooBig):
		// docs/protocol.md#answers: ERROR 400 with that frame's request id, then close;
		// the stream cannot be resynchronised.
		c.log.Warn("frame larger than broker.max_frame_bytes", "announced_body", tooBig.Header.BodyLen, "max_body", tooBig.Max)
		c.srv.opts.Metrics.ConnErrors.WithLabelValues("frame_too_large").Inc()
		if c.acquireSlot() {
			c.enqueue(outFrame{op: wire.OpError, reqID: h.RequestID, slot: true, closeAfter: true,
				body: &wire.ErrorBody{Code: wire.CodeBadRequest, Message: frameTooLargeMsg(tooBig)}})
			c.awaitWriter()
		}
	case c.draining.Load():
		c.finishGracefully()
	case errors.Is(err, io.EOF):
		c.orderly.Store(true)
	case errors.Is(err, net.ErrClosed):
		// closed by us (writer failure, idle timeout, shutdown)
	default:
		c.srv.opts.Metrics.ConnErrors.WithLabelValues("read").Inc()
		c.log.Debug("read ended", "err", err)
	}
}

// awaitWriter waits (bounded by the writer's own deadlines) until the
// writer has put a close-after frame on the wire and closed the socket.
func (c *Conn) awaitWriter() {
	select {
	case <-c.writerDone:
	case <-time.After(3 * c.srv.opts.Heartbeat):
	}
}

// stopForShutdown makes the reader stop taking requests (its blocked read
// returns at once); the reader then finishes gracefully.
func (c *Conn) stopForShutdown() {
	c.draining.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
}

// finishGracefully waits (bounded) until every answer in flight — confirms
// waiting for their fsync included — has been written, then lets the
// writer flush what is queued, pushes included, and close.
func (c *Conn) finishGracefully() {
	if c.sess == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.slots) > 0 && time.Now().Before(deadline) {
		select {
		case <-c.done:
			return
		case <-time.After(time.Millisecond):
		}
	}
	c.enqueue(outFrame{finish: true})
	c.awaitWriter()
}

// terminate ends the connection once: closes the socket, stops the writer
// and detaches the connection from its session.
func (c *Conn) terminate() {
	c.close()
	c.endForwarded()
	c.endReplication()
	parked := false
	if c.sess != nil {
		select {
		case <-c.writerDone:
		case <-time.After(3 * c.srv.opts.Heartbeat):
		}
		parked = c.sess.detach(c)
	}
	if !parked {
		c.relay.Close() // its upstream sessions close in order
	}
	c.srv.forget(c)
}

// close closes the socket and wakes everything waiting on the connection.
// Safe from any goroutine, any number of times.
func (c *Conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.nc.Close()
	})
}

// acquireSlot takes a reply slot, waiting while the client is not reading
// its answers. It reports false when the connection is ending.
func (c *Conn) acquireSlot() bool {
	select {
	case c.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case c.slots <- struct{}{}:
		return true
	case <-c.done:
		return false
	}
}

func (c *Conn) releaseSlot() { <-c.slots }

// reply queues the answer to the request being handled, using its slot.
// Reader goroutine only.
func (c *Conn) reply(op wire.Op, reqID uint64, body wire.Encoder) {
	c.slotPending = false
	c.enqueue(outFrame{op: op, reqID: reqID, body: body, slot: true})
}

// replyError answers with ERROR (op 255) and the given code (docs/protocol.md#answers).
func (c *Conn) replyError(reqID uint64, code uint16, msg string) {
	c.reply(wire.OpError, reqID, &wire.ErrorBody{Code: code, Message: msg})
}

// replyAndClose answers and then closes the connection (handshake-phase
// failures, 401s). The reader stops reading.
func (c *Conn) replyAndClose(op wire.Op, reqID uint64, body wire.Encoder) {
	c.slotPending = false
	c.stopReading = true
	c.enqueue(outFrame{op: op, reqID: reqID, body: body, slot: true, closeAfter: true})
	c.awaitWriter()
}

// deferReply hands the request's slot to an answer that comes later (a
// confirm once the log is durable): whoever produces that answer enqueues
// it with slot set, from any goroutine. Reader goroutine only.
func (c *Conn) deferReply() {
	c.slotPending = false
}

// enqueue adds an answer and wakes the writer, unless the reader is about
// to write the queue itself (holdKick, see commitOwed). Any goroutine.
func (c *Conn) enqueue(f outFrame) {
	c.mu.Lock()
	c.replies = append(c.replies, f)
	hold := c.holdKick
	c.mu.Unlock()
	if !hold {
		c.kick()
	}
}

// kick wakes the writer without blocking.
func (c *Conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// openWindow ends the quiet window (docs/protocol.md#quiet-window): pushes may flow.
func (c *Conn) openWindow() {
	if !c.windowOpen.Swap(true) {
		close(c.opened)
		c.kick()
	}
}

func frameTooLargeMsg(e *wire.FrameTooLargeError) string {
	return fmt.Sprintf("frame of %d bytes exceeds broker.max_frame_bytes (%d)",
		uint64(e.Header.BodyLen)+wire.HeaderSize, uint64(e.Max)+wire.HeaderSize)
}

// countingConn counts bytes for fibril_tcp_bytes_{in,out}_total.
type countingConn struct {
	net.Conn
	m *Metrics
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.BytesIn.Add(float64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.m.BytesOut.Add(float64(n))
	return n, err
}
