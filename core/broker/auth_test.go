package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// rawConn is a frame-level client for the authentication tests: it sends
// any op at any point and reads every answer as it comes.
type rawConn struct {
	t      *testing.T
	nc     net.Conn
	nextID uint64
}

func newRawConn(t *testing.T, nc net.Conn) *rawConn {
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, nextID: 1}
}

func (r *rawConn) send(op wire.Op, body wire.Encoder) uint64 {
	r.t.Helper()
	id := r.nextID
	r.nextID++
	if _, err := r.nc.Write(wire.AppendFrame(nil, op, id, body)); err != nil {
		r.t.Fatalf("write %s: %v", op, err)
	}
	return id
}

// expect reads the next frame (broker PINGs answered and skipped) and
// requires its op and request id.
func (r *rawConn) expect(op wire.Op, id uint64) wire.Body {
	r.t.Helper()
	for range 16 {
		_ = r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		h, raw, err := wire.ReadFrame(r.nc, nil, 1<<20)
		if err != nil {
			r.t.Fatalf("waiting for %s id %d: %v", op, id, err)
		}
		var body wire.Body
		if len(raw) > 0 {
			if body, err = wire.DecodeBody(h.Op, raw); err != nil {
				r.t.Fatalf("undecodable %s: %v", h.Op, err)
			}
		}
		if h.Op == wire.OpPing && op != wire.OpPing {
			_, _ = r.nc.Write(wire.AppendFrame(nil, wire.OpPong, h.RequestID, nil))
			continue
		}
		if h.Op != op || h.RequestID != id {
			r.t.Fatalf("got %s id %d (%+v), want %s id %d", h.Op, h.RequestID, body, op, id)
		}
		return body
	}
	r.t.Fatalf("no %s id %d among 16 frames", op, id)
	return nil
}

func (r *rawConn) expectError(op wire.Op, id uint64, code uint16) *wire.ErrorBody {
	r.t.Helper()
	eb, ok := r.expect(op, id).(*wire.ErrorBody)
	if !ok || eb.Code != code {
		r.t.Fatalf("%s id %d = %+v, want code %d", op, id, eb, code)
	}
	return eb
}

// expectClosed requires the broker to end the connection, with no frame
// before the end.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, _, err := wire.ReadFrame(r.nc, nil, 1<<20)
	switch {
	case err == nil:
		r.t.Fatalf("expected the connection to close, got %s id %d", h.Op, h.RequestID)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), "reset"):
	default:
		r.t.Fatalf("expected the connection to close, got %v", err)
	}
}

func (r *rawConn) hello(resume *wire.ResumeIdentity) *wire.HelloOK {
	r.t.Helper()
	h := &wire.Hello{ClientName: "auth-test", ClientVersion: "0", ProtocolVersion: wire.ProtocolVersion}
	if resume != nil {
		h.Resume = wire.Some(*resume)
	}
	return r.expect(wire.OpHelloOK, r.send(wire.OpHello, h)).(*wire.HelloOK)
}

// S-146: the built-in fibril/fibril login is for loopback clients. A
// stream that arrives through the peer transport is a peer broker's (or a
// same-host proxy's in front of the peer listener), never a loopback
// client, so the login is refused there even from 127.0.0.1 with
// inter-broker TLS off — while the client listener still takes it.
func TestDefaultLoginRefusedOnPeerListener(t *testing.T) {
	bs := startMemClusterWith(t, 1, func(int) []string {
		return []string{"--broker.peer_listener.bind=127.0.0.1:0"}
	})
	b := bs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.DialConn(ctx, b.BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril"})
	if err != nil {
		t.Fatalf("the client listener refused the built-in login from loopback: %v", err)
	}
	c.Close()

	peerAddr := b.transport.Addr().String()
	nc, err := net.Dial("tcp", peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	r := newRawConn(t, nc)
	r.hello(nil)
	id := r.send(wire.OpAuth, &wire.Auth{Username: "fibril", Password: "fibril"})
	eb := r.expectError(wire.OpAuthErr, id, wire.CodeUnauthorized)
	if !strings.Contains(eb.Message, "inter-broker") {
		t.Fatalf("the refusal should say why: %q", eb.Message)
	}
	r.expectClosed()

	// @node still logs in over the same listener.
	nc, err = net.Dial("tcp", peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	n := newRawConn(t, nc)
	n.hello(nil)
	n.expect(wire.OpAuthOK, n.send(wire.OpAuth, &wire.Auth{Username: "@node", Password: "test-secret"}))
}
