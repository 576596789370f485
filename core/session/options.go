package session

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// Principal is who a connection is authenticated as.
type Principal struct {
	Name   string // user name, or "@node" for a peer broker
	Node   bool   // the node principal (cluster secret)
	Method string // how it authenticated: password, certificate, default-loopback, node-secret
}

// Same reports whether p and o are the same identity (semantics D-1: an
// AUTH repeated on an authenticated connection must name the same one).
func (p Principal) Same(o Principal) bool { return p.Name == o.Name && p.Node == o.Node }

// Authenticator checks AUTH credentials (S-146). It returns an error whose
// message is safe and useful to show the client.
type Authenticator interface {
	Authenticate(ctx context.Context, username, password string, peer netip.Addr) (Principal, error)
}

// CertAuthenticator maps a verified client certificate to a user at HELLO
// time (S-154). ok is false when the certificate names no allowed user; the
// connection may still authenticate with AUTH.
type CertAuthenticator func(state tls.ConnectionState) (p Principal, ok bool)

// Settings are the runtime settings the session layer reads on every use,
// so a change applies to later events (S-105).
type Settings struct {
	ReconnectGrace time.Duration // connection.reconnect_grace_ms (0 disables)
	RestartTTL     time.Duration // connection.resume_session_restart_ttl_ms (0 disables)

	// Forwarding are the relay's limits (routing.*; core/forward).
	Forwarding forward.Limits
}

// The actions Options.Authorize is asked about (docs/admin.md#permissions).
const (
	ActionDeclare = "declare"
	ActionPublish = "publish"
	ActionConsume = "consume"
)

// Options configure a Server.
type Options struct {
	Queues   *queue.Manager
	Router   Router // nil = standalone mode
	Auth     Authenticator
	CertAuth CertAuthenticator // nil = no certificate logins
	// Authorize says whether user may do action (ActionDeclare,
	// ActionPublish, ActionConsume) with topic: nil, or an error the
	// client reads (ERROR 403). It is asked for the connection's user, or
	// on a forwarded session for the acting user; a peer broker's own
	// operations are not asked. nil: everything is allowed.
	Authorize func(user, action, topic string) error
	// NodeIdentity, when set (inter-broker TLS is on), is asked at every
	// successful @node AUTH for the node the connection's verified peer
	// certificate names; an error refuses the login, so the cluster secret
	// alone never makes a peer. nil: the secret suffices (inter-broker
	// TLS off).
	NodeIdentity func(nc net.Conn) (string, error)
	// NodeID is this broker's node id in coordinated mode ("" standalone):
	// a FORWARDED_SESSION naming it as the origin is refused (a peer
	// address that loops back to this broker).
	NodeID string
	// Upstreams opens upstream sessions when the router says Forward (nil:
	// this broker answers such operations with the route's error).
	Upstreams forward.Dialer
	// Replication serves followers' replication ops on @node connections
	// (nil: 400 "not supported by this broker yet").
	Replication Replication
	// NodeAdmin serves NODE_ADMIN from a peer's admin API
	// (docs/protocol.md#node-admin): it runs action with its JSON args
	// for the peer node and returns the JSON result; an error is answered
	// with its core.Code. nil: 400 "not supported".
	NodeAdmin       func(ctx context.Context, peer, action string, args []byte) ([]byte, error)
	OwnerID         wire.UUID                // this broker instance (persisted: S-100)
	SkeletonDir     string                   // durable session skeletons (S-106); "" disables them
	Settings        func() Settings          // nil = 5 s grace, 60 s restart TTL
	Heartbeat       time.Duration            // broker PING interval H; idle timeout is 3H (S-11); default 5 s
	FirstFrame      time.Duration            // a socket must send its HELLO within this (S-14); default 10 s
	MaxFrameBytes   uint32                   // broker.max_frame_bytes: the whole frame, header included
	MaxMessageBytes int                      // broker.max_message_bytes
	ReplySlots      int                      // answers in flight per connection before its reader pauses; default 4096
	Advertise       []wire.AdvertisedAddress // this broker's client-facing endpoints (partitioning-version fence)
	ServerName      string
	Logger          *slog.Logger
	Metrics         *Metrics // nil = unregistered metrics
	Now             func() time.Time
}

// maxBody is the largest body_len ReadFrame accepts: max_frame_bytes
// counts the 20-byte header too.
func (o *Options) maxBody() uint32 { return o.MaxFrameBytes - wire.HeaderSize }

func (o Options) withDefaults() (Options, error) {
	if o.Queues == nil {
		return o, errors.New("session: Options.Queues is required")
	}
	if o.Auth == nil {
		return o, errors.New("session: Options.Auth is required")
	}
	if o.Settings == nil {
		o.Settings = func() Settings { return Settings{ReconnectGrace: 5 * time.Second, RestartTTL: time.Minute} }
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 5 * time.Second
	}
	if o.FirstFrame <= 0 {
		o.FirstFrame = 10 * time.Second
	}
	if o.MaxFrameBytes == 0 {
		o.MaxFrameBytes = 64 << 20
	}
	if o.MaxFrameBytes < wire.HeaderSize+64 {
		return o, errors.New("session: MaxFrameBytes is too small to carry a HELLO")
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 16 << 20
	}
	if o.ReplySlots <= 0 {
		o.ReplySlots = 4096
	}
	if o.ServerName == "" {
		o.ServerName = "fibril-go"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}
