package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/tlsconf"
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

// docs/protocol.md#resume, with real inter-broker TLS (peers share the
// client port): a node session's resume token is not a peer's credential.
// After the upstream of a forwarded session from n1 is lost, a connection
// without n1's certificate that resumes it gets ERROR 401 and a close for
// PUBLISH, ACK or FORWARDED_SESSION, and AUTH_ERR 401 and a close for an
// ordinary user's AUTH, for @node without a certificate and for @node
// with another node's certificate; n1's certificate and AUTH as @node
// resume it.
func TestResumedNodeSessionNeedsPeerCertificate(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	bs := startMemClusterWith(t, 2, func(int) []string {
		return append(tlsFlags(ca), "--runtime_seed.connection.reconnect_grace_ms=60000")
	})
	addr := bs[0].BrokerAddr().String()
	peerCert := func(b *Broker) []tls.Certificate {
		dir := filepath.Join(b.cfg.Server.DataDir, "tls", "peer")
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsconf.PeerFile), filepath.Join(dir, tlsconf.PeerKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	dial := func(certs []tls.Certificate) *rawConn {
		nc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: certs}) //nolint:gosec // the test broker's own CA
		if err != nil {
			t.Fatal(err)
		}
		return newRawConn(t, nc)
	}
	ffs := func(origin string) *wire.ForwardedSession {
		return &wire.ForwardedSession{V2: true, OriginNodeID: origin, HopCount: 1, ActingUsername: "alice",
			ClientID: "0190c0de-0000-7000-8000-000000000001", ConnectionID: 7, ClientRemoteAddr: "127.0.0.1:5123"}
	}
	nodeAuth := &wire.Auth{Username: "@node", Password: "test-secret"}

	g := dial(peerCert(bs[1]))
	ident := g.hello(nil).Identity()
	g.expect(wire.OpAuthOK, g.send(wire.OpAuth, nodeAuth))
	g.expect(wire.OpForwardedSessionOK, g.send(wire.OpForwardedSession, ffs("n1")))
	g.nc.Close() // the upstream is lost; the session waits out its grace

	resume := func(certs []tls.Certificate) *rawConn {
		r := dial(certs)
		if ok := r.hello(&ident); ok.ResumeOutcome != wire.ResumeResumed {
			t.Fatalf("resume outcome %s", ok.ResumeOutcome)
		}
		return r
	}
	for name, send := range map[string]func(r *rawConn) uint64{
		"PUBLISH": func(r *rawConn) uint64 {
			return r.send(wire.OpPublish, &wire.Publish{Topic: "orders", RequireConfirm: true, Payload: []byte("forged")})
		},
		"ACK": func(r *rawConn) uint64 {
			id := r.nextID
			r.send(wire.OpAck, &wire.Ack{Topic: "orders", Tags: []uint64{1}})
			return id
		},
		"FORWARDED_SESSION": func(r *rawConn) uint64 { return r.send(wire.OpForwardedSession, ffs("n0")) },
	} {
		r := resume(nil)
		r.expectError(wire.OpError, send(r), wire.CodeUnauthorized)
		r.expectClosed()
		t.Logf("%s before AUTH: 401, closed", name)
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		auth  *wire.Auth
	}{
		{"an ordinary user", nil, &wire.Auth{Username: "fibril", Password: "fibril"}},
		{"@node without a certificate", nil, nodeAuth},
		{"@node with n0's certificate", peerCert(bs[0]), nodeAuth},
	} {
		r := resume(c.certs)
		r.expectError(wire.OpAuthErr, r.send(wire.OpAuth, c.auth), wire.CodeUnauthorized)
		r.expectClosed()
		t.Logf("AUTH as %s: refused, closed", c.name)
	}

	n := resume(peerCert(bs[1]))
	n.expect(wire.OpAuthOK, n.send(wire.OpAuth, nodeAuth))
	n.expect(wire.OpForwardedSessionOK, n.send(wire.OpForwardedSession, ffs("n1")))
	n.expect(wire.OpPong, n.send(wire.OpPing, nil))
}
