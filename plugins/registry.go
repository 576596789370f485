package plugins

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
)

// Kinds of plugin.
const (
	KindCoordination = "coordination"
	KindTransport    = "transport"
)

// PeerTLS locates the inter-broker TLS material (PEM files). A backend that
// talks to peers uses it to serve and dial with mutual TLS; a peer's
// certificate must verify against CAFile and name the peer's node id in a
// SAN (urn:fibril:node:<id>): ids, not addresses, identify brokers.
type PeerTLS struct {
	CAFile   string `json:"ca_file"`
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// CoordinationEnv is everything a coordination backend is started with.
// It is plain data, so the host can hand the same value to an external
// plugin process.
type CoordinationEnv struct {
	// NodeID is this broker's stable id.
	NodeID core.NodeID `json:"node_id"`
	// DataDir is a directory the backend owns (created by the host).
	DataDir string `json:"data_dir"`
	// Config holds the backend's own keys (coordination.<name>.*) and the
	// shared coordination.heartbeat_interval_ms / liveness_ttl_ms, as
	// strings; list values are comma-joined.
	Config map[string]string `json:"config"`
	// ClusterSecret must be presented by every member that joins.
	ClusterSecret string `json:"cluster_secret"`
	// PeerTLS is nil when tls.inter_broker is off.
	PeerTLS *PeerTLS `json:"peer_tls,omitempty"`
	// Logger is not serialised; an external plugin logs through go-plugin.
	Logger *slog.Logger `json:"-"`
	// Registerer receives a built-in backend's metrics (nil: none). Not
	// serialised: an external plugin's metrics stay in its process.
	Registerer prometheus.Registerer `json:"-"`
}

// CoordinationFactory opens a coordination backend. The returned
// Coordinator belongs to the caller, who closes it.
type CoordinationFactory func(ctx context.Context, env CoordinationEnv) (core.Coordinator, error)

var registry = struct {
	sync.Mutex
	coordination map[string]CoordinationFactory
}{coordination: make(map[string]CoordinationFactory)}

// RegisterCoordination registers a built-in coordination backend under
// name (the value of coordination.backend). Built-ins call it from an
// init function in their setup.go; cmd/fibril imports them (generated from
// plugins.toml). Registering a name twice panics: it is a build mistake.
func RegisterCoordination(name string, f CoordinationFactory) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.coordination[name]; dup {
		panic(fmt.Sprintf("plugins: coordination backend %q registered twice", name))
	}
	registry.coordination[name] = f
}

// BuiltinCoordination returns the factory registered under name.
func BuiltinCoordination(name string) (CoordinationFactory, bool) {
	registry.Lock()
	defer registry.Unlock()
	f, ok := registry.coordination[name]
	return f, ok
}

// BuiltinCoordinationNames lists the registered built-in backends, sorted.
func BuiltinCoordinationNames() []string {
	registry.Lock()
	defer registry.Unlock()
	out := make([]string, 0, len(registry.coordination))
	for n := range registry.coordination {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
