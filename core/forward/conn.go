package forward

import (
	"log/slog"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// ClientConn is a client connection as the relay sees it: the handful of
// things the relay asks of the session layer's connection. core/session's
// Conn implements it (through a view of itself, relayPort); the relay never
// sees the socket, the session or the engine.
type ClientConn interface {
	// DeferReply hands the reply slot of the request being handled to an
	// answer the relay gives later with Answer or Confirm (reader
	// goroutine).
	DeferReply()
	// Answer queues the answer to a deferred request; its reply slot is
	// given back once it is written (any goroutine).
	Answer(op wire.Op, reqID uint64, body wire.Encoder)
	// Confirm is Answer for a PUBLISH_OK carrying offset, without a body
	// to allocate (the confirm path of every forwarded publish).
	Confirm(reqID, offset uint64)
	// Push queues a frame that answers no request (a relayed DELIVER or
	// SUBSCRIPTION_CLOSED, or the relay's own SUBSCRIPTION_CLOSED).
	// relayed is the body's size when the frame came from an owner: the
	// writer hands it back through Relay.Written once written.
	Push(op wire.Op, reqID uint64, body wire.Encoder, relayed int)
	// Drop counts a fire-and-forget request that failed: it is never
	// answered.
	Drop(op wire.Op, reason string)
	// HasSubscription reports whether the connection's session has a
	// local subscription to the partition (reader goroutine).
	HasSubscription(topic string, group wire.Option[string], partition uint32) bool
	// Route asks this broker's current view where the partition's
	// operations go now (any goroutine).
	Route(topic string, group wire.Option[string], partition uint32, publish bool, version uint64) Target
	// Client describes the connection's client for FORWARDED_SESSION
	// (any goroutine).
	Client() ClientInfo
	// Logger is the connection's logger, with what the handshake learnt.
	Logger() *slog.Logger
	// Opened is closed once the connection may carry pushes (its quiet
	// window is over, docs/protocol.md#quiet-window): a resumed session's
	// relayed pushes wait for it.
	Opened() <-chan struct{}
}

// Target is where this broker's view sends a partition's operation now:
// Owner to relay it to over an upstream session, or Redirect to answer
// with; neither when it is served here or refused.
type Target struct {
	Owner    core.NodeID
	Redirect *wire.Redirect
}

// ClientInfo is who a forwarded session acts for, as FORWARDED_SESSION
// names them.
type ClientInfo struct {
	ConnID   uint64
	Remote   string
	User     string // "" before (or without) authentication
	ClientID string
}

// PublishRef is the part of a PUBLISH or PUBLISH_DELAYED the relay acts
// on: whether the client waits for a confirm, and the partition and
// partitioning version it was routed under (for a re-route after a move).
type PublishRef struct {
	Confirm   bool
	Topic     string
	Group     wire.Option[string]
	Partition uint32
	Version   uint64
}
