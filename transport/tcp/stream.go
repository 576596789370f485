package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/transport/coalesce"
)

// stream is one TCP connection (TLS inside when the transport has peer
// material). Reads go straight to the connection; writes go through a
// coalescer whose flusher is the only writer of the connection until the
// stream ends.
type stream struct {
	t    *Transport
	link *link // nil for accepted streams
	dir  string
	raw  *net.TCPConn
	tc   *tls.Conn // nil: plain TCP
	conn net.Conn  // tc or raw: what Read reads
	node core.NodeID
	w    *coalesce.Writer

	mu         sync.Mutex
	wdeadline  time.Time
	finSent    bool  // the orderly end went out (close_notify, FIN)
	closed     bool  // Close began
	abortCause error // set by abort: this side reset the stream
	sawAbort   bool  // the stream ended by an abort (either side): counted once
	released   bool  // untracked
}

func newStream(raw *net.TCPConn, tc *tls.Conn, node core.NodeID, dir string, t *Transport, l *link) *stream {
	s := &stream{t: t, link: l, dir: dir, raw: raw, tc: tc, conn: raw, node: node}
	if tc != nil {
		s.conn = tc
	}
	s.w = coalesce.New(s.conn, coalesce.DefaultLimit)
	return s
}

// tlsStream is a stream that ran a TLS handshake: it also reports what was
// negotiated (core.TLSStater). Plain streams do not have the method, so a
// type assertion tells the two apart.
type tlsStream struct{ *stream }

func (s tlsStream) ConnectionState() tls.ConnectionState { return s.tc.ConnectionState() }

// public is what Accept and OpenStream return.
func (s *stream) public() core.Stream {
	if s.tc != nil {
		return tlsStream{s}
	}
	return s
}

func (s *stream) PeerNode() core.NodeID { return s.node }
func (s *stream) LocalAddr() net.Addr   { return s.raw.LocalAddr() }
func (s *stream) RemoteAddr() net.Addr  { return s.raw.RemoteAddr() }

func (s *stream) SetDeadline(t time.Time) error {
	if err := s.SetReadDeadline(t); err != nil {
		return err
	}
	return s.SetWriteDeadline(t)
}

func (s *stream) SetReadDeadline(t time.Time) error { return s.raw.SetReadDeadline(t) }

// SetWriteDeadline bounds Writes waiting for room in the coalescer, never
// the connection's own writes: a TLS connection whose write timed out is
// broken for good, while a timed-out wait leaves the stream usable.
func (s *stream) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.wdeadline = t
	s.mu.Unlock()
	s.w.SetDeadline(t)
	return nil
}

func (s *stream) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.raw.LocalAddr(), Addr: s.raw.RemoteAddr(), Err: err}
}

// aborted wraps cause as the abort of this stream and counts the abort once.
func (s *stream) aborted(op string, cause error) error {
	s.mu.Lock()
	first := !s.sawAbort
	s.sawAbort = true
	s.mu.Unlock()
	if first {
		s.t.m.Aborted()
	}
	return fmt.Errorf("tcp stream %s %s (%s): %w: %w", op, s.RemoteAddr(), s.describePeer(), core.ErrStreamAborted, cause)
}

func (s *stream) describePeer() string {
	if s.node == "" {
		return "peer unverified"
	}
	return "node " + string(s.node)
}

// Read reads from the connection. io.EOF is the peer's orderly end (a TLS
// close_notify or a FIN at a record boundary); a reset, a truncated record
// or this side's Abort is an error wrapping core.ErrStreamAborted; a read
// deadline is a timeout and the stream stays usable.
func (s *stream) Read(p []byte) (int, error) {
	n, err := s.conn.Read(p)
	if err == nil {
		return n, nil
	}
	return n, s.readErr(err)
}

func (s *stream) readErr(err error) error {
	s.mu.Lock()
	cause, closed := s.abortCause, s.closed
	s.mu.Unlock()
	switch {
	case cause != nil:
		return s.aborted("read from", cause)
	case err == io.EOF:
		return io.EOF
	case isTimeout(err):
		return err
	case closed && errors.Is(err, net.ErrClosed):
		return err // read after this side's orderly Close
	}
	// Reset, unexpected EOF, a TLS alert: the connection is gone, so
	// writing to it is pointless too; end the flusher now.
	ae := s.aborted("read from", err)
	s.w.Abort(ae)
	return ae
}

// Write hands p to the coalescer; it returns once p is accepted. It blocks
// while the peer does not read and the buffer is full, up to the write
// deadline.
func (s *stream) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		return n, s.writeErr(err)
	}
	return n, nil
}

func (s *stream) writeErr(err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return s.opError("write", os.ErrDeadlineExceeded)
	case errors.Is(err, core.ErrStreamAborted):
		return err
	case errors.Is(err, coalesce.ErrClosed):
		return s.opError("write", fmt.Errorf("the stream's write side is closed: %w", net.ErrClosed))
	}
	// The connection's write failed (reset, broken pipe): the flusher
	// stopped with this error.
	return s.aborted("write to", err)
}

// closeTimeout is the deadline of an orderly end's flush: the write
// deadline when one is set, else CloseTimeout from now.
func (s *stream) closeTimeout() (context.Context, context.CancelFunc) {
	s.mu.Lock()
	d := s.wdeadline
	s.mu.Unlock()
	if d.IsZero() {
		d = time.Now().Add(CloseTimeout)
	}
	return context.WithDeadline(context.Background(), d)
}

// CloseWrite ends this direction in order: everything written is sent,
// then a TLS close_notify and a TCP FIN. The peer reads it all, then
// io.EOF; this side can still read. When the bytes cannot leave before the
// write deadline (or CloseTimeout) it returns a timeout and the stream is
// left for the caller to Abort or Close.
func (s *stream) CloseWrite() error {
	s.mu.Lock()
	if s.abortCause != nil {
		cause := s.abortCause
		s.mu.Unlock()
		return s.aborted("close", cause)
	}
	if s.finSent {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	// A second call after a timed-out one waits for the flush again.
	return s.closeWrite()
}

func (s *stream) closeWrite() error {
	ctx, cancel := s.closeTimeout()
	defer cancel()
	if err := s.w.Close(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return s.opError("close", fmt.Errorf("pending bytes not sent before the deadline: %w", os.ErrDeadlineExceeded))
		}
		return s.writeErr(err)
	}
	if s.tc != nil {
		if err := s.tc.CloseWrite(); err != nil {
			return s.aborted("close", err)
		}
	}
	if err := s.raw.CloseWrite(); err != nil {
		return s.aborted("close", err)
	}
	s.mu.Lock()
	s.finSent = true
	s.mu.Unlock()
	return nil
}

// Close is the orderly close: CloseWrite, then the connection closes. If
// the pending bytes cannot be sent in time the stream is aborted instead
// and Close says so. (As with any TCP socket, closing while unread bytes
// from the peer are queued makes the kernel send an RST: read to EOF
// first for an orderly close in both directions.)
func (s *stream) Close() error {
	s.mu.Lock()
	if s.closed || s.released {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	// A stream already ended by an abort has nothing to end in order;
	// one whose CloseWrite timed out gets another bounded try, so its
	// pending bytes are never dropped behind a FIN that looks orderly.
	needFin := !s.finSent && s.abortCause == nil && !s.sawAbort
	s.mu.Unlock()

	var err error
	if needFin {
		err = s.closeWrite()
	}
	if err != nil {
		s.abort(err)
		return s.aborted("close", err)
	}
	// Abort ends the flusher if the orderly path did not (a dead stream).
	s.w.Abort(nil)
	s.raw.Close()
	s.release()
	return nil
}

// Abort resets the stream: pending bytes are dropped and the peer's next
// Read fails with an error wrapping core.ErrStreamAborted.
func (s *stream) Abort() error {
	s.abort(errLocalAbort)
	return nil
}

var errLocalAbort = errors.New("aborted by this side")

func (s *stream) abort(cause error) {
	s.mu.Lock()
	if s.abortCause != nil || s.released {
		s.mu.Unlock()
		return
	}
	s.abortCause = cause
	s.mu.Unlock()
	s.w.Abort(s.aborted("write to", cause))
	abortConn(s.raw)
	s.release()
}

// release untracks the stream once.
func (s *stream) release() {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	s.mu.Unlock()
	s.t.forget(s)
}
