package client

import (
	"context"

	"github.com/fibrilgo/fibril/core/wire"
)

// asyncCall is a request whose outcome goes to a callback.
type asyncCall struct {
	pendingReq
	done func(Frame, error)
}

func (a *asyncCall) onReply(f Frame, err error) {
	if err == nil {
		if _, perr := checkReply(a.op, f); perr != nil {
			err = perr
		}
	}
	a.done(f, err)
}

// Go sends a request without waiting for its answer: done is called
// exactly once, with the reply frame (ERROR and REDIRECT included; f.Body
// is only valid during the call) or with an error. NotWritten(err) tells
// that the frame never reached the socket (the broker cannot have acted on
// it); otherwise the outcome is unknown (errors.Is(err,
// ErrOutcomeUnknown)). done runs on the connection's reader goroutine —
// before any later frame is read, so a reply and the pushes that follow
// it are seen in order — or on the goroutine that saw the connection die,
// and must not block for long. Go waits while the write buffer is full.
// An error from Go itself means nothing was queued and done will not run.
//
// A relay (the gateway of forwarded sessions) uses it to keep many
// requests in flight on one upstream connection.
func (c *Conn) Go(op wire.Op, body wire.Encoder, done func(Frame, error)) error {
	a := &asyncCall{done: done}
	a.op, a.h = op, a
	return c.start(context.Background(), &a.pendingReq, body)
}

// NotWritten reports whether err (from Go, Do or a done callback) says the
// request's frame never reached the socket, so the broker cannot have acted
// on it.
func NotWritten(err error) bool { return isNotWritten(err) }

// Abort ends the connection at once, as a broken link would: requests not
// yet written fail as not written, written ones with an unknown outcome.
// Close, by contrast, lets the answers to written requests arrive first.
func (c *Conn) Abort(cause error) {
	c.fail(cause)
}

// ParkReader tells the heartbeat monitor that the reader is waiting on a
// consumer (flow control, not a dead broker), until the returned function
// is called: that time does not count towards the 3-interval silence
// limit, and PINGs keep going out. A relay that makes the reader wait for
// a slow client calls it.
func (c *Conn) ParkReader() func() { return c.parkReader() }
