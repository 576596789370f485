package plugins

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
)

// TransportEnv is everything an inter-broker transport is started with.
// Like CoordinationEnv it is plain data, so the host can hand the same
// value to an external plugin process.
type TransportEnv struct {
	// NodeID is this broker's id: its certificate names it, and peers
	// dialing in must present certificates naming theirs.
	NodeID core.NodeID `json:"node_id"`
	// Bind is the host:port of the peer listener the transport binds
	// (broker.peer_listener.bind, or what the broker derived: for quic a
	// UDP socket on the client port number). Empty: the transport listens
	// nowhere and Accept only waits for Close (tcp on the shared client
	// port, where the broker's own listener takes peer connections).
	Bind string `json:"bind"`
	// PeerTLS is the inter-broker TLS material; nil when tls.inter_broker
	// is off (plain TCP; a transport that needs TLS refuses to start).
	PeerTLS *PeerTLS `json:"peer_tls,omitempty"`
	// Config holds the transport's own keys (transport.<name>.*) as
	// strings.
	Config map[string]string `json:"config"`
	// DataDir is a directory the transport may use (created by the host).
	DataDir string `json:"data_dir"`
	// Logger is not serialised; an external plugin logs through go-plugin.
	Logger *slog.Logger `json:"-"`
	// Registerer receives a built-in transport's metrics (nil: none).
	Registerer prometheus.Registerer `json:"-"`
}

// TransportFactory opens a transport: it binds env.Bind (when set) before
// it returns, so a broker that cannot listen fails at start. The returned
// Transport belongs to the caller, who closes it.
type TransportFactory func(ctx context.Context, env TransportEnv) (core.Transport, error)

var transports = struct {
	m map[string]TransportFactory
}{m: make(map[string]TransportFactory)}

// RegisterTransport registers a built-in transport under name (the value
// of transport.backend), from an init function in the transport's
// setup.go. Registering a name twice panics: it is a build mistake.
func RegisterTransport(name string, f TransportFactory) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := transports.m[name]; dup {
		panic(fmt.Sprintf("plugins: transport %q registered twice", name))
	}
	transports.m[name] = f
}

// BuiltinTransport returns the factory registered under name.
func BuiltinTransport(name string) (TransportFactory, bool) {
	registry.Lock()
	defer registry.Unlock()
	f, ok := transports.m[name]
	return f, ok
}

// BuiltinTransportNames lists the registered built-in transports, sorted.
func BuiltinTransportNames() []string {
	registry.Lock()
	defer registry.Unlock()
	out := make([]string, 0, len(transports.m))
	for n := range transports.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
