package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/internal/frame"
	"github.com/fibrilgo/fibril/transport/coalesce"
)

const (
	// closeFINTimeout bounds the flush of an orderly Close (the FIN and
	// the bytes before it) when the stream has no write deadline, as the
	// tcp transport bounds its own: a plugin that reads nothing must not
	// make Close hang. Without the FIN the plugin sees an abort.
	closeFINTimeout = 5 * time.Second
	// abortWriteTimeout bounds the RESET an Abort sends.
	abortWriteTimeout = time.Second
	// hostCoalesceLimit bounds a stream's bytes accepted by Write and not
	// yet written to the data connection (coalesce.Writer's pending
	// buffer).
	hostCoalesceLimit = coalesce.DefaultLimit
)

// errWriteAfterCloseWrite is returned by a Write after CloseWrite.
var errWriteAfterCloseWrite = errors.New("transport stream: write after CloseWrite")

// hostStream is the broker's side of a stream of an external transport:
// core.Stream over the framed data connection to the plugin.
//
// Writes are coalesced (transport/coalesce, as the tcp transport does):
// Write copies its frames into a bounded buffer that one flusher
// goroutine hands to the connection in batches, so a pipelining writer
// costs a syscall per batch rather than per Write, and a lone
// request/response writer finds the flusher idle and waits for nothing.
// The write deadline bounds only the wait for room in that buffer, never
// the connection's own write, so a frame is never cut on the wire by a
// deadline; a Write cut short mid-frame keeps the rest of its frame (tail)
// to queue first next time. The read deadline is the connection's, and
// the decoder is safe against it (frame.Reader). Either way a passed
// deadline is an ordinary timeout and the stream stays usable.
type hostStream struct {
	c            net.Conn
	cw           *coalesce.Writer
	peer         core.NodeID
	laddr, raddr net.Addr
	// release forgets the stream in its transport and link (once).
	release     func(*hostStream)
	releaseOnce sync.Once

	rmu sync.Mutex
	fr  *frame.Reader
	// rerr is the read side's end, once reached: io.EOF after FIN, an
	// ErrStreamAborted error after RESET or a lost connection.
	rerr error

	// wdeadline is the caller's write deadline (zero: none), which bounds
	// CloseWrite's and Close's flush as it bounds writes.
	wdeadline atomic.Pointer[time.Time]

	wmu sync.Mutex
	hdr [frame.HeaderLen]byte
	// tail is the rest of a frame a Write could not queue whole before its
	// deadline: it is queued before anything else, so the framing stays
	// whole.
	tail    []byte
	wclosed bool
	// finOut is set once CloseWrite has flushed the FIN to the connection:
	// the connection is then at a frame boundary and idle, and an Abort
	// can still send RESET.
	finOut atomic.Bool

	aborted     atomic.Bool // Abort on this side
	closed      atomic.Bool // Close on this side
	peerAborted atomic.Bool // RESET read
}

var _ core.Stream = (*hostStream)(nil)

func newHostStream(c net.Conn, peer core.NodeID, laddr, raddr net.Addr, release func(*hostStream)) *hostStream {
	if laddr == nil {
		laddr = netAddr{network: "fibril-transport"}
	}
	if raddr == nil {
		raddr = netAddr{network: "fibril-transport"}
	}
	return &hostStream{
		c: c, cw: coalesce.New(c, hostCoalesceLimit), fr: frame.NewReader(c),
		peer: peer, laddr: laddr, raddr: raddr, release: release,
	}
}

func (s *hostStream) Read(p []byte) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	switch {
	case s.aborted.Load():
		return 0, core.Errorf(core.ErrStreamAborted, "transport stream: aborted on this side")
	case s.rerr != nil:
		return 0, s.rerr
	case s.closed.Load():
		return 0, fmt.Errorf("transport stream: %w", net.ErrClosed)
	case len(p) == 0:
		return 0, nil
	}
	// Each pass consumes a frame header from the connection, so the loop
	// is bounded by the input (it only repeats on empty DATA frames).
	for {
		if s.fr.Remaining() > 0 {
			n, err := s.fr.ReadData(p)
			if n > 0 {
				return n, nil // an error reappears on the next Read
			}
			return 0, s.readFailed(err)
		}
		typ, n, reason, err := s.fr.Next()
		if err != nil {
			return 0, s.readFailed(err)
		}
		switch typ {
		case frame.Data:
			if n == 0 {
				continue
			}
		case frame.FIN:
			s.rerr = io.EOF
			return 0, io.EOF
		case frame.Reset:
			s.peerAborted.Store(true)
			if reason == "" {
				reason = "no reason given"
			}
			s.rerr = core.Errorf(core.ErrStreamAborted, "transport stream: aborted by the peer (%s)", reason)
			s.cw.Abort(s.rerr) // the plugin drops the connection: stop writing
			return 0, s.rerr
		}
	}
}

// readFailed maps a failed read of the data connection.
func (s *hostStream) readFailed(err error) error {
	switch {
	case s.aborted.Load():
		return core.Errorf(core.ErrStreamAborted, "transport stream: aborted on this side")
	case s.closed.Load():
		return fmt.Errorf("transport stream: %w", net.ErrClosed)
	case frame.IsTimeout(err):
		return err
	case errors.Is(err, frame.ErrMalformed):
		s.rerr = core.Errorf(core.ErrStreamAborted, "transport stream: %v", err)
		_ = s.Abort()
		return s.rerr
	}
	// EOF without FIN, a reset: the plugin dropped the stream or died.
	// Writing is pointless too: end the flusher now.
	s.rerr = core.Errorf(core.ErrStreamAborted, "transport stream: connection to the transport plugin lost: %v", err)
	s.cw.Abort(s.rerr)
	return s.rerr
}

func (s *hostStream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return 0, err
	}
	if err := s.queueTail(); err != nil {
		return 0, s.writeFailed(err)
	}
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), frame.MaxPayload)]
		frame.PutHeader(s.hdr[:], frame.Data, len(chunk))
		// Two queued writes, contiguous: wmu keeps other Writes out.
		n, err := s.cw.Write(s.hdr[:])
		if err == nil {
			var m int
			m, err = s.cw.Write(chunk)
			n += m
		}
		if err != nil {
			if n > 0 && frame.IsTimeout(err) {
				s.keepTail(n, chunk)
				written += len(chunk)
			}
			return written, s.writeFailed(err)
		}
		written += len(chunk)
		p = p[len(chunk):]
	}
	return written, nil
}

// writable says why nothing can be written, if so.
func (s *hostStream) writable() error {
	switch {
	case s.aborted.Load():
		return core.Errorf(core.ErrStreamAborted, "transport stream: aborted on this side")
	case s.closed.Load():
		return fmt.Errorf("transport stream: %w", net.ErrClosed)
	case s.peerAborted.Load():
		return core.Errorf(core.ErrStreamAborted, "transport stream: aborted by the peer")
	case s.wclosed:
		return errWriteAfterCloseWrite
	}
	return nil
}

// keepTail keeps what a cut-short write left of the frame hdr+chunk, of
// which n bytes were queued. The chunk then counts as written: its bytes
// are committed to leave before any later ones.
func (s *hostStream) keepTail(n int, chunk []byte) {
	tail := make([]byte, 0, frame.HeaderLen+len(chunk)-n)
	if n < frame.HeaderLen {
		tail = append(tail, s.hdr[n:]...)
		tail = append(tail, chunk...)
	} else {
		tail = append(tail, chunk[n-frame.HeaderLen:]...)
	}
	s.tail = tail
}

// queueTail queues the rest of a cut-short frame. Called with wmu held.
func (s *hostStream) queueTail() error {
	if len(s.tail) == 0 {
		return nil
	}
	n, err := s.cw.Write(s.tail)
	s.tail = s.tail[n:]
	if err != nil {
		return err
	}
	s.tail = nil
	return nil
}

// writeFailed maps a failed Write (of the coalescer: a timeout waiting
// for room, or the connection's failure, sticky).
func (s *hostStream) writeFailed(err error) error {
	switch {
	case s.aborted.Load():
		return core.Errorf(core.ErrStreamAborted, "transport stream: aborted on this side")
	case s.closed.Load():
		return fmt.Errorf("transport stream: %w", net.ErrClosed)
	case errors.Is(err, core.ErrStreamAborted):
		return err
	case frame.IsTimeout(err):
		return &net.OpError{Op: "write", Net: s.laddr.Network(), Addr: s.raddr, Err: os.ErrDeadlineExceeded}
	}
	// The plugin closed the connection: the peer aborted the stream, or
	// the plugin dropped it or died.
	return core.Errorf(core.ErrStreamAborted, "transport stream: %v", err)
}

// flushContext bounds a flush by the write deadline, or closeFINTimeout.
func (s *hostStream) flushContext() (context.Context, context.CancelFunc) {
	d := time.Now().Add(closeFINTimeout)
	if w := s.wdeadline.Load(); w != nil && !w.IsZero() {
		d = *w
	}
	return context.WithDeadline(context.Background(), d)
}

// CloseWrite queues FIN behind the bytes written so far and waits until
// they are all out (bounded by the write deadline, or closeFINTimeout).
// On a timeout the FIN is still queued; the stream is left for the caller
// to Close or Abort.
func (s *hostStream) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	switch err := s.writable(); {
	case errors.Is(err, errWriteAfterCloseWrite):
		return nil
	case err != nil:
		return err
	}
	if err := s.queueTail(); err != nil {
		return s.writeFailed(err)
	}
	if n, err := s.cw.Write(fin[:]); err != nil {
		if n > 0 && frame.IsTimeout(err) {
			s.tail = append([]byte(nil), fin[n:]...)
		}
		return s.writeFailed(err)
	}
	s.wclosed = true
	ctx, cancel := s.flushContext()
	defer cancel()
	if err := s.cw.Close(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return &net.OpError{Op: "close", Net: s.laddr.Network(), Addr: s.raddr, Err: os.ErrDeadlineExceeded}
		}
		return s.writeFailed(err)
	}
	s.finOut.Store(true)
	return nil
}

// Close ends the stream in order: FIN (unless sent already) behind every
// byte written, flushed within the write deadline or closeFINTimeout, then
// the connection closes. The plugin closes the transport's stream, which
// the peer reads as EOF. A flush that does not finish in time, or a Write
// still in progress, leaves the connection to end without FIN: the plugin
// aborts the stream, the most that can be done for a peer that reads
// nothing.
func (s *hostStream) Close() error {
	if s.aborted.Load() || s.closed.Swap(true) {
		return nil
	}
	// A Write in progress (blocked on backpressure, typically) holds wmu
	// for as long as the peer does not read: no clean end can be queued
	// behind it, so the stream resets instead, and the Write returns.
	if !s.wmu.TryLock() {
		s.cw.Abort(nil)
		err := s.c.Close()
		s.done()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		return err
	}
	ok := true
	if !s.wclosed {
		ok = s.queueTail() == nil
		if ok {
			_, err := s.cw.Write(fin[:])
			ok = err == nil
		}
		s.wclosed = true
	}
	s.wmu.Unlock()
	if ok {
		ctx, cancel := s.flushContext()
		ok = s.cw.Close(ctx) == nil
		cancel()
	}
	if !ok {
		s.cw.Abort(nil)
	}
	err := s.c.Close() // also unblocks a flusher stuck in a write
	s.done()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Abort resets the stream: queued bytes are dropped and the connection
// closes, which the plugin reads as an abort (it saw no FIN). After a
// CloseWrite, whose FIN the plugin has seen, an explicit RESET says it.
func (s *hostStream) Abort() error {
	if s.closed.Load() || s.aborted.Swap(true) {
		return nil
	}
	s.cw.Abort(core.Errorf(core.ErrStreamAborted, "transport stream: aborted on this side"))
	if s.finOut.Load() {
		// CloseWrite flushed and closed the coalescer: its flusher is
		// gone and the connection sits at a frame boundary.
		_ = s.c.SetWriteDeadline(time.Now().Add(abortWriteTimeout))
		_ = frame.WriteControl(s.c, frame.Reset, "aborted by the broker")
	}
	_ = s.c.Close()
	s.done()
	return nil
}

func (s *hostStream) done() {
	s.releaseOnce.Do(func() {
		if s.release != nil {
			s.release(s)
		}
	})
}

func (s *hostStream) LocalAddr() net.Addr               { return s.laddr }
func (s *hostStream) RemoteAddr() net.Addr              { return s.raddr }
func (s *hostStream) SetReadDeadline(t time.Time) error { return s.c.SetReadDeadline(t) }
func (s *hostStream) PeerNode() core.NodeID             { return s.peer }

func (s *hostStream) SetDeadline(t time.Time) error {
	_ = s.SetWriteDeadline(t)
	return s.c.SetReadDeadline(t)
}

// SetWriteDeadline bounds Writes waiting for room in the coalescer, never
// the connection's own writes (see hostStream).
func (s *hostStream) SetWriteDeadline(t time.Time) error {
	s.wdeadline.Store(&t)
	s.cw.SetDeadline(t)
	return nil
}

// fin is a FIN frame.
var fin = [frame.HeaderLen]byte{frame.FIN}

// netAddr is a net.Addr described by the plugin.
type netAddr struct{ network, address string }

func (a netAddr) Network() string { return a.network }
func (a netAddr) String() string  { return a.address }
