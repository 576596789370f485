package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Defaults applied by Dial to zero Options fields.
const (
	DefaultHeartbeat        = 5 * time.Second
	DefaultMaxRedirects     = 3
	DefaultBackoffInitial   = 50 * time.Millisecond
	DefaultBackoffMax       = 2 * time.Second
	DefaultDialTimeout      = 10 * time.Second
	DefaultOperationTimeout = 30 * time.Second
	DefaultPrefetch         = 32
	DefaultWriteBufferSize  = 1 << 20
	DefaultPrivateRetry     = 30 * time.Second
	DefaultTopologyRefresh  = 30 * time.Second
	DefaultClientName       = "fibril-go"
	DefaultClientVersion    = "0.1.0"
)

// ReconcilePolicy selects what the broker does with a subscription the
// client lists on reconnect but the broker no longer has (docs/protocol.md#reconcile). It is a
// client type rather than wire.ReconcilePolicy so that the zero value can
// mean "default" (restore) instead of conservative.
type ReconcilePolicy uint8

const (
	ReconcileDefault      ReconcilePolicy = iota // restore
	ReconcileRestore                             // the broker recreates missing subscriptions
	ReconcileConservative                        // the broker does not recreate them
)

func (p ReconcilePolicy) wire() wire.ReconcilePolicy {
	if p == ReconcileConservative {
		return wire.ReconcileConservative
	}
	return wire.ReconcileRestore
}

// Options configure a Client. Only Addrs is required.
type Options struct {
	// Addrs is the bootstrap host:port list, tried in order. The first that
	// completes the handshake becomes the bootstrap connection, which
	// carries every request whose owner is unknown (docs/protocol.md#topology).
	Addrs []string
	// Username and Password: an AUTH frame is sent when Username is set.
	Username, Password string
	// TLS, when set, wraps every connection in TLS; nil means plaintext.
	TLS *tls.Config
	// ClientName and ClientVersion go into HELLO (free text for logs).
	ClientName, ClientVersion string
	// Heartbeat is the PING interval; a connection on which nothing arrived
	// for 3× Heartbeat is declared dead (docs/protocol.md#heartbeats). Default 5s.
	Heartbeat time.Duration
	// ReconcilePolicy is sent in RECONCILE_CLIENT after a reconnect
	// (docs/protocol.md#reconcile). The zero value means restore, the Go SDK default.
	ReconcilePolicy ReconcilePolicy
	// Dial opens the TCP connection; nil uses a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// MaxRedirects bounds the REDIRECTs followed per operation. Default 3.
	MaxRedirects int
	// BackoffInitial and BackoffMax bound the jittered exponential backoff
	// used between reconnects and retries. Defaults 50ms and 2s.
	BackoffInitial, BackoffMax time.Duration
	// DialTimeout bounds one connect plus handshake. Default 10s.
	DialTimeout time.Duration
	// OperationTimeout bounds an operation (with its re-sends) whose context
	// has no deadline. Default 30s. It is enforced without a timer per call:
	// each connection sweeps its expired requests at least once a second.
	OperationTimeout time.Duration
	// WriteBufferSize bounds the bytes queued on one connection and not yet
	// handed to the socket; callers that queue more wait for the writer
	// (backpressure). Default 1 MiB.
	WriteBufferSize int
	// PreferPrivateEndpoints is for internal clients that can reach
	// private brokers. When a partition's topology entry lists endpoints
	// tagged private (a cluster with routing.expose_private_endpoints on,
	// docs/protocol.md#endpoints), the client goes to the first of them,
	// directly to the private owner, instead of through the gateway. A
	// private endpoint that does not answer (its dial fails or times out)
	// or whose connection dies is avoided for PrivateRetryAfter: its
	// operations and subscriptions go through the gateway (the entry's
	// first untagged endpoint) meanwhile. Without it the client never
	// dials an endpoint tagged private.
	PreferPrivateEndpoints bool
	// PrivateRetryAfter is how long a private endpoint that did not answer
	// is avoided (PreferPrivateEndpoints). Default 30s.
	PrivateRetryAfter time.Duration
	// TopologyRefresh is how often a subscription to every partition of
	// a queue (SubscribeOptions.Partitions nil) reads the queue's
	// topology again, to find a repartition's new partitions when no
	// TOPOLOGY_UPDATE brought them (S-126). Default 30s; negative turns
	// the periodic read off (pushes and other refreshes still count).
	TopologyRefresh time.Duration
}

func (o Options) withDefaults() Options {
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.ReconcilePolicy == ReconcileDefault {
		o.ReconcilePolicy = ReconcileRestore
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = DefaultMaxRedirects
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = DefaultBackoffInitial
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.BackoffMax < o.BackoffInitial {
		o.BackoffMax = o.BackoffInitial
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.WriteBufferSize <= 0 {
		o.WriteBufferSize = DefaultWriteBufferSize
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = DefaultOperationTimeout
	}
	if o.PrivateRetryAfter <= 0 {
		o.PrivateRetryAfter = DefaultPrivateRetry
	}
	if o.TopologyRefresh == 0 {
		o.TopologyRefresh = DefaultTopologyRefresh
	}
	if o.ClientName == "" {
		o.ClientName = DefaultClientName
	}
	if o.ClientVersion == "" {
		o.ClientVersion = DefaultClientVersion
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = d.DialContext
	}
	return o
}

// backoff returns the jittered delay before retry number attempt (0-based):
// initial·2^attempt capped at max, then scaled by a random factor in
// [0.5, 1.0] so that many clients do not retry in lockstep.
func (o *Options) backoff(attempt int) time.Duration {
	d := o.BackoffInitial
	for i := 0; i < attempt && d < o.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, o.BackoffMax)
	return d/2 + rand.N(d/2+1)
}

// sleepCtx waits d or until ctx ends; it reports whether the full delay
// elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
