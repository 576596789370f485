// Package wiretest is a strict raw Fibril v1 client for tests of a
// broker's connection handling (core/session) and of what runs on it (the
// relay in core/forward). It speaks frames, nothing more: every frame it
// reads is decoded and checked by the test, so a broker that writes an
// undecodable body, an unexpected frame or a wrong request id fails the
// test at that frame. It imports only core/wire and the standard library.
package wiretest

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// ExpectWithin is how long Expect waits for a frame.
const ExpectWithin = 5 * time.Second

// Client is one raw connection to a broker. Not safe for concurrent use.
type Client struct {
	tb     testing.TB
	nc     net.Conn
	nextID uint64
	// open is set once this client sent something other than HELLO, AUTH
	// or RECONCILE_CLIENT: the quiet window is over from its side
	// (docs/protocol.md#quiet-window), so the broker may PING.
	open bool
}

// Dial connects to addr; the connection closes when the test ends.
func Dial(tb testing.TB, addr string) *Client {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	return &Client{tb: tb, nc: nc, nextID: 1}
}

// New is a client on an open connection (a net.Pipe to a server's
// ServeConn, say); it closes when the test ends.
func New(tb testing.TB, nc net.Conn) *Client {
	tb.Cleanup(func() { nc.Close() })
	return &Client{tb: tb, nc: nc, nextID: 1}
}

// Conn is the connection, for tests that write raw bytes or end it.
func (c *Client) Conn() net.Conn { return c.nc }

// Send writes a frame with the next request id and returns that id.
func (c *Client) Send(op wire.Op, body wire.Encoder) uint64 {
	c.tb.Helper()
	id := c.nextID
	c.nextID++
	c.SendID(op, id, body)
	return id
}

// SendID writes a frame with the given request id.
func (c *Client) SendID(op wire.Op, id uint64, body wire.Encoder) {
	c.tb.Helper()
	if op != wire.OpHello && op != wire.OpAuth && op != wire.OpReconcileClient {
		c.open = true
	}
	if _, err := c.nc.Write(wire.AppendFrame(nil, op, id, body)); err != nil {
		c.tb.Fatalf("write %s: %v", op, err)
	}
}

// Read returns the next frame, failing the test after d.
func (c *Client) Read(d time.Duration) (wire.FrameHeader, wire.Body) {
	c.tb.Helper()
	h, b, err := c.TryRead(d)
	if err != nil {
		c.tb.Fatalf("reading a frame: %v", err)
	}
	return h, b
}

// TryRead returns the next frame or the read error (a timeout after d).
// A body that does not decode fails the test.
func (c *Client) TryRead(d time.Duration) (wire.FrameHeader, wire.Body, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	h, raw, err := wire.ReadFrame(c.nc, nil, 64<<20)
	if err != nil {
		return h, nil, err
	}
	if len(raw) == 0 {
		return h, nil, nil
	}
	body, err := wire.DecodeBody(h.Op, raw)
	if err != nil {
		c.tb.Fatalf("broker sent an undecodable %s: %v", h.Op, err)
	}
	return h, body, nil
}

// Expect reads the next frame and requires op and request id. Once the
// quiet window is over, broker PINGs may come first: they are answered
// and skipped, as SDKs do. Before that any other frame fails the test.
func (c *Client) Expect(op wire.Op, id uint64) wire.Body {
	c.tb.Helper()
	h, b := c.Read(ExpectWithin)
	for h.Op == wire.OpPing && op != wire.OpPing && c.open {
		c.SendID(wire.OpPong, h.RequestID, nil)
		h, b = c.Read(ExpectWithin)
	}
	if h.Op != op || h.RequestID != id {
		c.tb.Fatalf("got %s id %d (%+v), want %s id %d", h.Op, h.RequestID, b, op, id)
	}
	return b
}

// ExpectError reads an error-bodied frame with the given op, id and code.
func (c *Client) ExpectError(op wire.Op, id uint64, code uint16) *wire.ErrorBody {
	c.tb.Helper()
	b := c.Expect(op, id)
	eb, ok := b.(*wire.ErrorBody)
	if !ok || eb.Code != code {
		c.tb.Fatalf("%s id %d = %+v, want code %d", op, id, b, code)
	}
	return eb
}

// ExpectSilence requires that nothing arrives within d and the
// connection stays open.
func (c *Client) ExpectSilence(d time.Duration) {
	c.tb.Helper()
	h, b, err := c.TryRead(d)
	if err == nil {
		c.tb.Fatalf("unexpected frame %s id %d: %+v", h.Op, h.RequestID, b)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.tb.Fatalf("connection ended while expecting silence: %v", err)
	}
}

// ExpectClosed requires the broker to close the connection within d,
// with no frame before the close.
func (c *Client) ExpectClosed(d time.Duration) {
	c.tb.Helper()
	h, _, err := c.TryRead(d)
	switch {
	case err == nil:
		c.tb.Fatalf("expected close, got %s id %d", h.Op, h.RequestID)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset"):
	default:
		c.tb.Fatalf("expected close, got %v", err)
	}
}
