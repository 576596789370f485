package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// upstreamReadBuffer is an upstream connection's read buffer and body
// scratch.
const upstreamReadBuffer = 8 << 10

// NodePrincipal is the username of an upstream login (the auth package's
// reserved principal; repeated here so this package stays below auth).
const NodePrincipal = "@node"

// Login describes how to log in to peers: as @node with the cluster
// secret (S-149), naming this node in HELLO.
type Login struct {
	Self   core.NodeID
	Secret string
}

// Dial opens a stream to peer over link and runs the upstream handshake
// on it (HELLO, AUTH as @node; docs/protocol.md#handshake). The returned connection is
// started; closing it closes the stream in order. An error before the
// stream exists wraps core.ErrPeerRefused.
func (u Login) Dial(ctx context.Context, link core.Link, heartbeat time.Duration, onPush func(client.Frame)) (*client.Conn, core.Stream, error) {
	return u.DialResume(ctx, link, heartbeat, nil, onPush)
}

// DialResume is Dial presenting resume in HELLO (nil: none): a gateway
// resuming an upstream session whose link dropped. The connection's
// Handshake says the outcome; AUTH as @node proves the node again, as a
// resumed node session requires (docs/protocol.md#resume).
func (u Login) DialResume(ctx context.Context, link core.Link, heartbeat time.Duration, resume *wire.ResumeIdentity, onPush func(client.Frame)) (*client.Conn, core.Stream, error) {
	var stream core.Stream
	cfg := client.ConnConfig{
		Resume:        resume,
		ClientName:    "fibril-peer " + string(u.Self),
		ClientVersion: "1",
		Username:      NodePrincipal,
		Password:      u.Secret,
		Heartbeat:     heartbeat,
		// Small read buffers: a gateway may hold thousands of mostly idle
		// upstream sessions (core/forward/README.md#bounds); large bodies still get
		// buffers of their own.
		ReadBufferSize: upstreamReadBuffer,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			s, err := link.OpenStream(ctx)
			if err != nil {
				return nil, err
			}
			stream = s
			return s, nil
		},
	}
	if onPush != nil {
		cfg.OnPush = func(_ *client.Conn, f client.Frame) { onPush(f) }
	}
	conn, err := client.DialConn(ctx, link.Peer().Addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	return conn, stream, nil
}

// ProbeResult is what one peer probe found.
type ProbeResult struct {
	Node core.NodeID `json:"node"`
	Addr string      `json:"peer_addr"`
	// OK: the stream opened, the peer accepted @node and answered a
	// TOPOLOGY request.
	OK bool `json:"ok"`
	// VerifiedNode is the node id the peer's certificate names ("" without
	// inter-broker TLS).
	VerifiedNode core.NodeID `json:"verified_node,omitempty"`
	// ConnectMS covers opening the stream and the handshake; RoundTripMS
	// one request/response on the established stream.
	ConnectMS   float64 `json:"connect_ms"`
	RoundTripMS float64 `json:"round_trip_ms"`
	Error       string  `json:"error,omitempty"`
}

// Probe checks that peer is reachable over the transport as a peer should
// be: a stream opens, the upstream handshake succeeds, and the peer
// answers a TOPOLOGY request. The stream is closed in order afterwards.
func (u Login) Probe(ctx context.Context, links *Links, peer core.Peer) ProbeResult {
	res := ProbeResult{Node: peer.ID, Addr: peer.Addr}
	fail := func(err error) ProbeResult {
		res.Error = err.Error()
		return res
	}
	start := time.Now()
	link, err := links.Get(ctx, peer)
	if err != nil {
		return fail(err)
	}
	conn, stream, err := u.Dial(ctx, link, 0, nil)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	res.ConnectMS = ms(time.Since(start))
	res.VerifiedNode = stream.PeerNode()
	rt := time.Now()
	f, err := conn.Do(ctx, wire.OpTopology, &wire.TopologyRequest{})
	if err != nil {
		return fail(err)
	}
	if f.Op != wire.OpTopologyOK {
		return fail(fmt.Errorf("peer answered TOPOLOGY with %s", f.Op))
	}
	res.RoundTripMS = ms(time.Since(rt))
	res.OK = true
	return res
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Forwarded runs FORWARDED_SESSION on an upstream connection (docs/protocol.md#extensions):
// FFS2 first; an owner that answers 400 (it knows only FFS1) gets FFS1 on
// the same connection (docs/protocol.md#forwarded-session). It returns the owner's forwarding
// version, or an error wrapping core.ErrUnavailable when the owner is not
// forwarding-capable (it refused both).
func Forwarded(ctx context.Context, conn *client.Conn, fs wire.ForwardedSession) (uint16, error) {
	fs.V2 = true
	for {
		f, err := conn.Do(ctx, wire.OpForwardedSession, &fs)
		if err != nil {
			return 0, err
		}
		switch f.Op {
		case wire.OpForwardedSessionOK:
			var ok wire.ForwardedSessionOK
			if err := ok.Decode(f.Body); err != nil {
				return 0, fmt.Errorf("malformed FORWARDED_SESSION_OK: %w", err)
			}
			return ok.ForwardingVersion, nil
		case wire.OpError:
			var eb wire.ErrorBody
			_ = eb.Decode(f.Body)
			if eb.Code == wire.CodeBadRequest && fs.V2 {
				fs.V2, fs.Flags = false, 0
				continue
			}
			return 0, core.Errorf(core.ErrUnavailable, "the owner refused FORWARDED_SESSION (%d %s); it is not forwarding-capable", eb.Code, eb.Message)
		default:
			return 0, fmt.Errorf("FORWARDED_SESSION answered with %s", f.Op)
		}
	}
}

// DialRaw opens a stream to peer over link and logs in on it as @node
// (HELLO without resume, then AUTH; docs/protocol.md#handshake), and hands
// the stream over to a caller that speaks frames itself — a replication
// follower, whose frames the client connection would not let through.
// The login must finish before ctx ends.
func (u Login) DialRaw(ctx context.Context, link core.Link) (core.Stream, error) {
	s, err := link.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { s.Abort() })
	err = u.rawLogin(s)
	if !stop() {
		err = errors.Join(ctx.Err(), err)
	}
	if err != nil {
		s.Abort()
		return nil, fmt.Errorf("%w: log in to %s: %v", core.ErrPeerRefused, link.Peer().ID, err)
	}
	return s, nil
}

// rawLogin runs HELLO and AUTH on s.
func (u Login) rawLogin(s core.Stream) error {
	steps := []struct {
		op       wire.Op
		body     wire.Encoder
		ok, fail wire.Op
	}{
		{wire.OpHello, &wire.Hello{ClientName: "fibril-peer " + string(u.Self), ClientVersion: "1", ProtocolVersion: wire.ProtocolVersion}, wire.OpHelloOK, wire.OpHelloErr},
		{wire.OpAuth, &wire.Auth{Username: NodePrincipal, Password: u.Secret}, wire.OpAuthOK, wire.OpAuthErr},
	}
	buf := make([]byte, 0, 4<<10)
	for i, st := range steps {
		if _, err := s.Write(wire.AppendFrame(nil, st.op, uint64(i+1), st.body)); err != nil {
			return err
		}
		h, body, err := wire.ReadFrame(s, buf, 64<<10)
		if err != nil {
			return err
		}
		switch h.Op {
		case st.ok:
		case st.fail, wire.OpError:
			var e wire.ErrorBody
			if err := e.Decode(body); err != nil {
				return fmt.Errorf("%v refused (malformed answer: %v)", st.op, err)
			}
			return fmt.Errorf("%v refused with %d: %s", st.op, e.Code, e.Message)
		default:
			return fmt.Errorf("%v answered with %v", st.op, h.Op)
		}
	}
	return nil
}
