package quic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/transport/internal/streammetrics"
)

// link is a core.Link: a peer plus the streams opened through it. All
// links to one peer share the transport's connection to it.
type link struct {
	t    *Transport
	peer core.Peer

	// guarded by t.mu
	closed  bool
	streams map[*stream]struct{}
}

func (l *link) Peer() core.Peer { return l.peer }

// Close aborts the streams opened on the link. The connection stays: other
// links and the peer's streams use it.
func (l *link) Close() error {
	t := l.t
	t.mu.Lock()
	l.closed = true
	streams := make([]*stream, 0, len(l.streams))
	for s := range l.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	for _, s := range streams {
		_ = s.Abort()
	}
	return nil
}

// OpenStream opens a stream on the connection to the peer, dialing when
// there is none (or it died). A connection that turns out dead while the
// stream is opened is replaced once, within ctx.
func (l *link) OpenStream(ctx context.Context) (core.Stream, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, core.DefaultConnectTimeout)
		defer cancel()
	}
	t := l.t
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var c *conn
		if c, err = t.connFor(ctx, l.peer); err != nil {
			break
		}
		var s *stream
		if s, err = l.openOn(ctx, c); err == nil {
			t.m.OpenResult(true)
			return s, nil
		}
		var reset *quicgo.StatelessResetError
		if ctx.Err() != nil || c.qc.Context().Err() == nil && !errors.As(err, &reset) {
			// (A stateless reset may surface here before the connection's
			// context is cancelled: it is a dead connection all the same.)
			break
		}
		// The connection died under us (the peer restarted, an idle
		// timeout nobody had noticed yet): forget it and dial again.
		t.mu.Lock()
		c.dead = true
		t.mu.Unlock()
	}
	t.m.OpenResult(false)
	return nil, l.refused(err)
}

func (l *link) refused(err error) error {
	why := err.Error()
	switch {
	case errors.Is(err, core.ErrClosed):
		return fmt.Errorf("quic: open a stream to %s (%s): the transport is closed: %w: %w", l.peer.ID, l.peer.Addr, core.ErrPeerRefused, core.ErrClosed)
	case errors.Is(err, context.Canceled):
		why = "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		why = "timed out (" + err.Error() + ")"
	}
	return fmt.Errorf("quic: open a stream to %s (%s): %s: %w", l.peer.ID, l.peer.Addr, why, core.ErrPeerRefused)
}

// openOn opens a QUIC stream on c and sends the preamble. It first tries
// without waiting, to count the opens that had to wait for the peer to
// raise its stream limit (max_incoming_streams).
func (l *link) openOn(ctx context.Context, c *conn) (*stream, error) {
	qs, err := c.qc.OpenStream()
	if limitReached(err) {
		l.t.m.blocked()
		qs, err = c.qc.OpenStreamSync(ctx)
	}
	if err != nil {
		return nil, err
	}
	s, ok := l.t.newStream(c, qs, streammetrics.Out, l)
	if !ok {
		qs.CancelRead(codeStreamAborted)
		qs.CancelWrite(codeStreamAborted)
		l.t.mu.Lock()
		closed := l.closed
		l.t.mu.Unlock()
		if closed {
			return nil, errors.New("the link is closed")
		}
		if c.qc.Context().Err() != nil {
			return nil, context.Cause(c.qc.Context())
		}
		return nil, core.ErrClosed
	}
	if err := handshake(ctx, qs); err != nil {
		s.abortLocal(codeStreamAborted, false)
		return nil, err
	}
	return s, nil
}

// handshake sends the preamble and waits, under ctx, for the acceptor's
// ack (see preamble).
func handshake(ctx context.Context, qs *quicgo.Stream) error {
	if _, err := qs.Write([]byte(preamble)); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline() // OpenStream always sets one
	_ = qs.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = qs.SetReadDeadline(time.Now()) })
	defer stop()
	var b [1]byte
	if _, err := io.ReadFull(qs, b[:]); err != nil {
		// The read deadline is ctx's deadline, so a timeout here is ctx
		// ending, whichever of the two timers fired first.
		if ne, ok := errors.AsType[net.Error](err); ctx.Err() != nil || (ok && ne.Timeout() && !isIdleTimeout(err)) {
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return fmt.Errorf("the peer did not acknowledge the stream: %w", context.DeadlineExceeded)
		}
		return err
	}
	if b[0] != ack {
		return fmt.Errorf("the peer answered the stream preamble with %#x", b[0])
	}
	_ = qs.SetReadDeadline(time.Time{})
	return nil
}

// limitReached reports quic-go's "peer's stream limit reached" (returned as
// a pointer today; the value form is accepted too).
func limitReached(err error) bool {
	if _, ok := errors.AsType[*quicgo.StreamLimitReachedError](err); ok {
		return true
	}
	_, ok := errors.AsType[quicgo.StreamLimitReachedError](err)
	return ok
}

func isIdleTimeout(err error) bool {
	_, ok := errors.AsType[*quicgo.IdleTimeoutError](err)
	return ok
}
