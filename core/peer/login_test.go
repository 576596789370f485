package peer

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// pipeStream is one end of a pipe as a core.Stream.
type pipeStream struct{ net.Conn }

func (p pipeStream) CloseWrite() error     { return p.Close() }
func (p pipeStream) Abort() error          { return p.Close() }
func (p pipeStream) PeerNode() core.NodeID { return "" }

// pipeLink opens one stream whose other end runs serve.
type pipeLink struct{ serve func(net.Conn) }

func (l pipeLink) OpenStream(context.Context) (core.Stream, error) {
	a, b := net.Pipe()
	go l.serve(b)
	return pipeStream{a}, nil
}
func (l pipeLink) Peer() core.Peer { return core.Peer{ID: "node-a", Addr: "pipe"} }
func (l pipeLink) Close() error    { return nil }

// fakeOwner answers HELLO, then AUTH (accepting only the right secret),
// then echoes a PING it gets with a PONG.
func fakeOwner(secret string) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 0, 4<<10)
		for {
			h, body, err := wire.ReadFrame(c, buf, 64<<10)
			if err != nil {
				return
			}
			var out []byte
			switch h.Op {
			case wire.OpHello:
				out = wire.AppendFrame(nil, wire.OpHelloOK, h.RequestID, &wire.HelloOK{ProtocolVersion: wire.ProtocolVersion, ServerName: "fake"})
			case wire.OpAuth:
				var a wire.Auth
				if a.Decode(body) != nil || a.Username != NodePrincipal || a.Password != secret {
					out = wire.AppendFrame(nil, wire.OpAuthErr, h.RequestID, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: "bad secret"})
				} else {
					out = wire.AppendFrame(nil, wire.OpAuthOK, h.RequestID, nil)
				}
			case wire.OpPing:
				out = wire.AppendFrame(nil, wire.OpPong, h.RequestID, nil)
			default:
				return
			}
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
}

// DialRaw logs in as @node and hands over a stream that carries frames;
// a refused login is an error naming the peer and the reason.
func TestDialRaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := Login{Self: "node-b", Secret: "s3cret"}.DialRaw(ctx, pipeLink{fakeOwner("s3cret")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(wire.AppendFrame(nil, wire.OpPing, 9, nil)); err != nil {
		t.Fatal(err)
	}
	if h, _, err := wire.ReadFrame(s, nil, 1<<10); err != nil || h.Op != wire.OpPong || h.RequestID != 9 {
		t.Fatalf("after the login: %v %v", h, err)
	}
	s.Close()

	_, err = Login{Self: "node-b", Secret: "wrong"}.DialRaw(ctx, pipeLink{fakeOwner("s3cret")})
	if !errors.Is(err, core.ErrPeerRefused) || !strings.Contains(err.Error(), "node-a") || !strings.Contains(err.Error(), "bad secret") {
		t.Fatalf("a refused login: %v", err)
	}
}
