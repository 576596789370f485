package quic

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
)

func init() { plugins.RegisterTransport("quic", Open) }

// Config keys read from plugins.TransportEnv.Config (core/config/keys.go
// holds their documentation and bounds; the bounds are repeated here
// because an external caller may hand us unchecked strings).
const (
	KeyMaxIncomingStreams  = "transport.quic.max_incoming_streams"
	KeyStreamReceiveWindow = "transport.quic.stream_receive_window_bytes"
	KeyMaxIdleTimeoutMS    = "transport.quic.max_idle_timeout_ms"
)

// Defaults of the keys above.
const (
	DefaultMaxIncomingStreams  = 1024
	DefaultStreamReceiveWindow = 1 << 20
	DefaultMaxIdleTimeout      = 15 * time.Second
)

// ALPN is the application protocol both ends negotiate. A bump means an
// incompatible change of what travels on a stream (today: the one-byte
// stream preamble, then the caller's bytes).
const ALPN = "fibril-peer/1"

// settings are the parsed config keys.
type settings struct {
	maxIncomingStreams int64
	streamWindow       uint64
	idleTimeout        time.Duration
}

func parseSettings(cfg map[string]string) (settings, error) {
	streams, err := intKey(cfg, KeyMaxIncomingStreams, DefaultMaxIncomingStreams, 1, 1<<20)
	if err != nil {
		return settings{}, err
	}
	window, err := intKey(cfg, KeyStreamReceiveWindow, DefaultStreamReceiveWindow, 16*1024, 64<<20)
	if err != nil {
		return settings{}, err
	}
	idle, err := intKey(cfg, KeyMaxIdleTimeoutMS, DefaultMaxIdleTimeout.Milliseconds(), 1000, 24*3600*1000)
	if err != nil {
		return settings{}, err
	}
	return settings{
		maxIncomingStreams: streams,
		streamWindow:       uint64(window),
		idleTimeout:        time.Duration(idle) * time.Millisecond,
	}, nil
}

func intKey(cfg map[string]string, key string, def, lo, hi int64) (int64, error) {
	s := strings.TrimSpace(cfg[key])
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("quic transport: %s %q: expected an integer from %d to %d", key, s, lo, hi)
	}
	return v, nil
}

// errNoTLS is the startup error of a quic transport without peer TLS:
// QUIC has no plaintext mode, and the peer certificate is how a stream
// learns which node opened it.
const errNoTLS = "transport.backend = quic needs inter-broker TLS: set tls.inter_broker with tls.peer_ca_path (and tls.cert_path/tls.key_path, or tls.auto_self_signed)"

// Open is the "quic" transport factory: it loads the peer TLS material,
// binds env.Bind (UDP) and starts listening before it returns.
func Open(ctx context.Context, env plugins.TransportEnv) (core.Transport, error) {
	return open(ctx, env)
}
