package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Handshake request ids, as every SDK numbers them (docs/protocol.md#request-ids, docs/protocol.md#handshake).
const (
	helloID     = 1
	authID      = 2
	reconcileID = 3
)

// handshakeMaxBody bounds handshake replies: HELLO_OK, AUTH_* and ERROR
// are tiny; RECONCILE_RESULT grows with the subscription count.
const handshakeMaxBody = 64 << 20

// handshake runs HELLO, then AUTH when credentials are set, then
// RECONCILE_CLIENT when cfg.Reconcile is set (docs/protocol.md#handshake). Replies are read
// synchronously and the very next frame must be the reply (docs/protocol.md#quiet-window): a PING,
// DELIVER, TOPOLOGY_UPDATE or any other frame fails the connect. This
// strictness is what makes a broker's quiet-window bugs visible.
func (c *Conn) handshake(ctx context.Context, cfg *ConnConfig) (Handshake, error) {
	var hs Handshake
	deadline := time.Now().Add(DefaultDialTimeout)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	c.nc.SetDeadline(deadline)
	defer c.nc.SetDeadline(time.Time{})

	// Step 1: HELLO (id 1) → HELLO_OK | HELLO_ERR | ERROR.
	hello := &wire.Hello{
		ClientName:      cfg.ClientName,
		ClientVersion:   cfg.ClientVersion,
		ProtocolVersion: wire.ProtocolVersion,
	}
	if cfg.Resume != nil {
		hello.Resume = wire.Some(*cfg.Resume)
	}
	f, err := c.roundTripSync(wire.OpHello, helloID, hello, "HELLO", cfg.TLS != nil)
	if err != nil {
		return hs, err
	}
	switch f.Op {
	case wire.OpHelloOK:
		if err := f.Decode(&hs.Hello); err != nil {
			return hs, protocolErrorf("malformed HELLO_OK: %v", err)
		}
		if hs.Hello.ProtocolVersion != wire.ProtocolVersion {
			return hs, protocolErrorf("HELLO_OK protocol_version %d, want %d", hs.Hello.ProtocolVersion, wire.ProtocolVersion)
		}
		if hs.Hello.Compliance != wire.Compliance {
			return hs, protocolErrorf("compliance marker mismatch: got %q", hs.Hello.Compliance)
		}
	case wire.OpHelloErr:
		return hs, errorFromBody(wire.OpHello, f.Body)
	case wire.OpError:
		err := errorFromBody(wire.OpHello, f.Body)
		var be *Error
		if errors.As(err, &be) && be.Code == wire.CodeTLSRequired {
			return hs, fmt.Errorf("%w: %v", ErrTLSRequired, err)
		}
		return hs, err
	default:
		return hs, protocolErrorf("unexpected frame %v during HELLO", f.Op)
	}

	// Step 2: AUTH (id 2) → AUTH_OK | AUTH_ERR (| ERROR, accepted like the Go SDK).
	if cfg.Username != "" {
		f, err := c.roundTripSync(wire.OpAuth, authID, &wire.Auth{Username: cfg.Username, Password: cfg.Password}, "AUTH", false)
		if err != nil {
			return hs, err
		}
		switch f.Op {
		case wire.OpAuthOK:
			if len(f.Body) != 0 {
				return hs, protocolErrorf("AUTH_OK with a %d-byte body", len(f.Body))
			}
		case wire.OpAuthErr, wire.OpError:
			return hs, errorFromBody(wire.OpAuth, f.Body)
		default:
			return hs, protocolErrorf("unexpected frame %v during AUTH", f.Op)
		}
	}

	// Step 3: RECONCILE_CLIENT (id 3) → RECONCILE_RESULT | ERROR.
	if cfg.Reconcile != nil {
		f, err := c.roundTripSync(wire.OpReconcileClient, reconcileID, cfg.Reconcile, "RECONCILE_CLIENT", false)
		if err != nil {
			return hs, err
		}
		switch f.Op {
		case wire.OpReconcileResult:
			res := new(wire.ReconcileResult)
			if err := f.Decode(res); err != nil {
				return hs, protocolErrorf("malformed RECONCILE_RESULT: %v", err)
			}
			hs.Reconcile = res
		case wire.OpError:
			return hs, errorFromBody(wire.OpReconcileClient, f.Body)
		default:
			return hs, protocolErrorf("unexpected frame %v during RECONCILE_CLIENT", f.Op)
		}
	}
	return hs, nil
}

// roundTripSync writes one handshake request and reads the very next
// frame, which must carry the same request id.
func (c *Conn) roundTripSync(op wire.Op, id uint64, body wire.Encoder, phase string, tlsOn bool) (Frame, error) {
	buf := wire.AppendFrame(nil, op, id, body)
	if _, err := c.nc.Write(buf); err != nil {
		return Frame{}, fmt.Errorf("%w: %s: write: %v", ErrConnectionLost, phase, err)
	}
	h, b, err := wire.ReadFrame(c.br, nil, handshakeMaxBody)
	if err != nil {
		if errors.Is(err, wire.ErrFrameTooLarge) {
			return Frame{}, protocolErrorf("%s: %v", phase, err)
		}
		if tlsOn && op == wire.OpHello && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			return Frame{}, fmt.Errorf("%w: %s: connection closed (broker is probably plaintext): %v", ErrConnectionLost, phase, err)
		}
		return Frame{}, fmt.Errorf("%w: %s: read: %v", ErrConnectionLost, phase, err)
	}
	f := Frame{Op: h.Op, RequestID: h.RequestID, Body: b}
	if isReplyOp(f.Op) && f.RequestID != id {
		return f, protocolErrorf("%v answering %s carries request id %d, want %d", f.Op, phase, f.RequestID, id)
	}
	return f, nil
}

// tlsClient runs the TLS handshake on nc. ServerName defaults to the host
// of addr.
func tlsClient(ctx context.Context, nc net.Conn, addr string, cfg *tls.Config) (net.Conn, error) {
	cfg = cfg.Clone()
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("fibril client: TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}
