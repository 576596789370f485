package integration

// Raw wire connections: a bare socket speaking core/wire frames.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// rawConn is a bare socket that speaks core/wire frames, for the tests
// that need to see exactly what the broker writes.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

type frame struct {
	h    wire.FrameHeader
	body []byte
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	g := newGuard(t)
	nc, err := g.dial(ctxT(t, opTimeout), "tcp", addr)
	if err != nil {
		t.Fatalf("raw dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (r *rawConn) writeBytes(b []byte) {
	r.t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(opTimeout))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

func (r *rawConn) send(op wire.Op, id uint64, body wire.Encoder) {
	r.t.Helper()
	r.writeBytes(wire.AppendFrame(nil, op, id, body))
}

// sendBody sends a frame with an arbitrary (possibly malformed) body.
func (r *rawConn) sendBody(op wire.Op, id uint64, body []byte) {
	r.t.Helper()
	b := wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: uint32(len(body)), Version: 1, Op: op, RequestID: id})
	r.writeBytes(append(b, body...))
}

// read returns the next frame, or the read error.
func (r *rawConn) read(within time.Duration) (frame, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(within))
	h, body, err := wire.ReadFrame(r.br, nil, 64<<20)
	return frame{h, body}, err
}

// expect reads the next frame that is not a broker PING (PINGs are
// answered) and requires op and request id.
func (r *rawConn) expect(op wire.Op, id uint64) []byte {
	r.t.Helper()
	for {
		f, err := r.read(waitTimeout)
		if err != nil {
			r.t.Fatalf("waiting for %v (request id %d): %v", op, id, err)
		}
		if f.h.Op == wire.OpPing {
			r.send(wire.OpPong, f.h.RequestID, nil)
			continue
		}
		if f.h.Op != op || f.h.RequestID != id {
			r.t.Fatalf("got %v request id %d (%s), want %v request id %d", f.h.Op, f.h.RequestID, describe(f), op, id)
		}
		return f.body
	}
}

// expectError requires an error-carrying frame (ERROR, HELLO_ERR,
// AUTH_ERR, SUBSCRIBE_ERR) with the given op, request id and code.
func (r *rawConn) expectError(op wire.Op, id uint64, code uint16) wire.ErrorBody {
	r.t.Helper()
	body := r.expect(op, id)
	var e wire.ErrorBody
	if err := e.Decode(body); err != nil {
		r.t.Fatalf("%v body: %v", op, err)
	}
	if e.Code != code {
		r.t.Fatalf("%v code %d (%q), want %d", op, e.Code, e.Message, code)
	}
	return e
}

// expectClosed requires the broker to close the connection without
// writing another byte.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
	var b [1]byte
	n, err := r.br.Read(b[:])
	if n > 0 {
		rest, _ := r.br.Peek(r.br.Buffered())
		r.t.Fatalf("expected the broker to close; it sent more bytes: % x", append(b[:1], rest...))
	}
	if !closedErr(err) {
		r.t.Fatalf("expected the broker to close the connection, got %v", err)
	}
}

// closedErr reports whether err is the peer closing (FIN or RST).
func closedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// expectQuiet requires that the broker sends nothing but PINGs during d.
func (r *rawConn) expectQuiet(d time.Duration) {
	r.t.Helper()
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		f, err := r.read(left)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if err != nil {
			r.t.Fatalf("expecting silence: %v", err)
		}
		if f.h.Op == wire.OpPing {
			r.send(wire.OpPong, f.h.RequestID, nil)
			continue
		}
		r.t.Fatalf("expecting silence, got %v request id %d (%s)", f.h.Op, f.h.RequestID, describe(f))
	}
}

// ping proves the connection is open and in sync: PING → PONG, same id.
func (r *rawConn) ping(id uint64) {
	r.t.Helper()
	r.send(wire.OpPing, id, nil)
	r.expect(wire.OpPong, id)
}

// hello sends HELLO (id 1) and requires HELLO_OK.
func (r *rawConn) hello() wire.HelloOK {
	r.t.Helper()
	r.send(wire.OpHello, 1, &wire.Hello{ClientName: "integration-raw", ClientVersion: "0", ProtocolVersion: wire.ProtocolVersion})
	var ok wire.HelloOK
	if err := ok.Decode(r.expect(wire.OpHelloOK, 1)); err != nil {
		r.t.Fatalf("HELLO_OK: %v", err)
	}
	if ok.Compliance != wire.Compliance || ok.ProtocolVersion != wire.ProtocolVersion {
		r.t.Fatalf("HELLO_OK: version %d compliance %q", ok.ProtocolVersion, ok.Compliance)
	}
	return ok
}

// login runs HELLO (id 1) and AUTH fibril/fibril (id 2).
func (r *rawConn) login() {
	r.t.Helper()
	r.hello()
	r.send(wire.OpAuth, 2, &wire.Auth{Username: "fibril", Password: "fibril"})
	if b := r.expect(wire.OpAuthOK, 2); len(b) != 0 {
		r.t.Fatalf("AUTH_OK with a %d-byte body", len(b))
	}
}

func describe(f frame) string {
	switch f.h.Op {
	case wire.OpError, wire.OpHelloErr, wire.OpAuthErr, wire.OpSubscribeErr:
		var e wire.ErrorBody
		if e.Decode(f.body) == nil {
			return fmt.Sprintf("code %d %q", e.Code, e.Message)
		}
	}
	return fmt.Sprintf("%d-byte body", len(f.body))
}
