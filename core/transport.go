package core

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"
)

// TransportAPIVersion is the version of the Transport contract (and of the
// external transport plugin protocol that carries it). Bump it only on
// an incompatible change.
const TransportAPIVersion = 1

// Transport is how a broker reaches its peers: forwarding (upstream
// sessions) and, later, replication open bidirectional streams to another
// broker through it. Built-ins are transport/tcp (a stream is one TLS
// connection) and transport/quic (a stream is a QUIC stream on the one
// connection between two brokers); third parties serve the same contract
// as external plugins.
//
// Lifecycle: the factory that creates a Transport also binds its peer
// listener, if it has one; Accept then yields every stream a peer opens,
// Dial yields links to peers, and Close ends the listener, every link and
// every stream (aborting those still open) and makes a blocked Accept
// return ErrClosed. All methods are safe for concurrent use.
type Transport interface {
	// Accept waits for the next stream a peer opened towards this broker.
	// It returns ctx's error when ctx ends and an error wrapping ErrClosed
	// once the transport is closed. A transport without a listener of its
	// own (tcp sharing the client listener) blocks until then.
	Accept(ctx context.Context) (Stream, error)

	// Dial returns a link to peer. It may connect lazily (the first
	// OpenStream does) and may share one underlying connection between
	// all links to the same peer. An error wraps ErrPeerRefused.
	Dial(ctx context.Context, peer Peer) (Link, error)

	// Addr is the bound peer listener, or nil when the transport has none.
	Addr() net.Addr

	Close() error
}

// Peer names a broker to dial: its node id (which its certificate must
// carry when inter-broker TLS is on) and the address it advertises to
// peers (broker.peer_advertise, host:port).
type Peer struct {
	ID   NodeID
	Addr string
}

// Link is this broker's way to one peer. Streams opened on it are
// independent: one that stalls never stops another (QUIC flow control is
// per stream; tcp streams are separate connections).
type Link interface {
	// OpenStream opens a new stream to the peer. It honours ctx's deadline
	// (routing.upstream_connect_timeout_ms is applied by the caller; a
	// transport applies DefaultConnectTimeout when ctx has none). A link
	// whose connection died re-establishes it here.
	//
	// Success means the peer was there to take the stream: a transport
	// whose streams are invisible until data flows (QUIC) exchanges a
	// preamble first, so that a stream to a crashed peer fails here rather
	// than at the first read. One case still shows only later: with TLS
	// 1.3 the dialer finishes its handshake before the listener has checked
	// the dialer's certificate, so a peer that refuses it aborts the stream
	// at the first read.
	//
	// An error wraps ErrPeerRefused: no stream exists, so nothing written
	// to one can have reached the peer. (Handshake bytes may have been
	// exchanged; whether a request counts as sent is the caller's
	// question, answered per request.) The message says why: refused,
	// timed out, or a certificate that does not name the peer.
	OpenStream(ctx context.Context) (Stream, error)

	// Peer is the peer this link reaches.
	Peer() Peer

	// Close aborts every stream opened on the link and releases it.
	Close() error
}

// Stream is one bidirectional byte stream between two brokers. It is a
// net.Conn, so the session server serves an accepted one like a client
// socket, with deadlines. Writes may be coalesced by the transport (many
// small writes leave as one packet or record); a Write returns once the
// bytes are accepted, and backpressure from a peer that does not read
// shows as a Write that blocks (bounded by the write deadline).
//
// Ends: orderly means end of stream at a frame boundary; abort is
// everything else (reset, read error, timeout). release_on_close releases
// only on an orderly end (docs/protocol.md#forwarded-session):
//   - CloseWrite sends an orderly end of this direction (TCP FIN after a TLS
//     close_notify, QUIC stream FIN) once written bytes are out; the peer
//     reads them all and then io.EOF.
//   - Close is CloseWrite plus closing the read side: an orderly close.
//   - Abort resets the stream (TCP RST, QUIC RESET_STREAM); the peer's
//     next Read fails with an error wrapping ErrStreamAborted and bytes
//     in flight may be lost.
//
// A Write after the peer closed its read side (its Close) fails with an
// error wrapping ErrStreamAborted, like a broken pipe. Close while a Write
// is blocked on backpressure cannot deliver a clean end and resets instead.
//
// Read distinguishes them: io.EOF only after the peer's orderly end, an
// error wrapping ErrStreamAborted after an abort, a lost link (reset,
// connection closed with a non-zero code, idle or keepalive timeout) or
// Abort on this side. A read or write deadline that passes is a timeout
// (net.Error.Timeout, os.ErrDeadlineExceeded), not an abort: the stream
// stays usable.
type Stream interface {
	net.Conn
	CloseWrite() error
	Abort() error
	// PeerNode is the node id the peer's verified certificate names, or ""
	// when the stream carries no verified peer identity (plain TCP with
	// inter-broker TLS off). The session layer still requires AUTH as @node.
	PeerNode() NodeID
}

// TLSStater is implemented by a stream or connection that ran a TLS
// handshake (*tls.Conn does): what it negotiated, for logs and for
// checking a peer certificate.
type TLSStater interface {
	ConnectionState() tls.ConnectionState
}

var (
	// ErrPeerRefused is wrapped by a Dial or OpenStream that produced no
	// stream: connection refused, unreachable, connect timeout, a refused
	// or failed handshake, a stream limit at the peer.
	ErrPeerRefused = errors.New("peer refused or unreachable")

	// ErrPeerNotListening is wrapped, besides ErrPeerRefused, when the
	// peer's host answered that nothing listens on the peer's address
	// (TCP: connection refused): its process is gone, not merely out of
	// reach. Replication takes it, with a dropped stream, as evidence that
	// an owner crashed (docs/cluster.md#replication). A transport that
	// cannot tell wraps ErrPeerRefused alone.
	ErrPeerNotListening = errors.New("nothing listens on the peer's address")

	// ErrStreamAborted is wrapped by the Read or Write of a stream that
	// ended without an orderly close.
	ErrStreamAborted = errors.New("stream aborted")
)

// DefaultConnectTimeout bounds OpenStream when the caller's context has no
// deadline (routing.upstream_connect_timeout_ms's default).
const DefaultConnectTimeout = 5 * time.Second
