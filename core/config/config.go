package config

// The typed configuration. Every leaf field carries a `key:"…"` tag naming
// its row in the key table; bind.go fills fields by that tag and a test
// checks that table and struct agree one to one. Integers are int64 (sizes
// and millisecond durations); enums are lower-case strings with the
// constants below.

// Config is the validated startup configuration returned by Load.
type Config struct {
	Server       Server
	Broker       Broker
	Admin        Admin
	Storage      Storage
	Auth         Auth
	TLS          TLS
	Coordination Coordination
	Transport    Transport
	Plugins      Plugins
	Log          Log
	// ConsulService registers the broker in the Consul catalog.
	ConsulService ConsulService
	// RuntimeSeed seeds the runtime settings document when none exists
	// (S-167); once a document exists it wins over these values.
	RuntimeSeed RuntimeSeedSettings
}

// Server holds node-local paths.
type Server struct {
	DataDir string `key:"server.data_dir"`
}

// Broker configures the client-facing listener and peer addressing.
type Broker struct {
	Listener        Listener
	Visibility      string `key:"broker.visibility"`
	PeerAdvertise   string `key:"broker.peer_advertise"`
	PeerListener    PeerListener
	MaxFrameBytes   int64 `key:"broker.max_frame_bytes"`
	MaxMessageBytes int64 `key:"broker.max_message_bytes"`
}

// Broker visibilities (core/routing/README.md#gateway-set): a private
// broker's client addresses never reach a client.
const (
	VisibilityPublic  = "public"
	VisibilityPrivate = "private"
)

// Listener is the client listener of the broker.
type Listener struct {
	Bind      string   `key:"broker.listener.bind"`
	Advertise []string `key:"broker.listener.advertise"`
}

// PeerListener is where the inter-broker transport listens.
type PeerListener struct {
	Bind string `key:"broker.peer_listener.bind"`
}

// Admin configures the admin HTTP listener.
type Admin struct {
	Listener          AdminListener
	Auth              AdminAuth
	MetricsPerChannel bool `key:"admin.metrics_per_channel"`
}

// AdminListener is the admin HTTP listener's addresses.
type AdminListener struct {
	Bind      string   `key:"admin.listener.bind"`
	Advertise []string `key:"admin.listener.advertise"`
}

// AdminAuth is the single static admin login (S-159).
type AdminAuth struct {
	Enabled      bool   `key:"admin.auth.enabled"`
	Username     string `key:"admin.auth.username"`
	Password     Secret `key:"admin.auth.password"`
	PasswordFile string `key:"admin.auth.password_file"`
}

// Storage configures the partition logs.
type Storage struct {
	Fsync           string `key:"storage.fsync"`
	FsyncIntervalMS int64  `key:"storage.fsync_interval_ms"`
	SegmentMaxBytes int64  `key:"storage.segment_max_bytes"`
	MinFreeBytes    int64  `key:"storage.min_free_bytes"`
	WAL             bool   `key:"storage.wal.enabled"`
	WALFileBytes    int64  `key:"storage.wal.file_bytes"`
	WALFiles        int64  `key:"storage.wal.files"`
}

// Fsync policies (core/storage/README.md#fsync-policies).
const (
	FsyncAlways   = "always"
	FsyncInterval = "interval"
	FsyncNone     = "none"
)

// Auth configures broker users.
type Auth struct {
	AllowDefaultLoopback bool       `key:"auth.allow_default_loopback"`
	SeedUsers            []SeedUser `key:"auth.seed_users"`
	EnvUser              EnvUser
}

// SeedUser is one [[auth.seed_users]] entry. The file holds only hashes.
type SeedUser struct {
	Username     string
	PasswordHash string
}

// EnvUser is the seed user of the FIBRIL_AUTH_USERNAME/FIBRIL_AUTH_PASSWORD
// pair; both fields are empty or both are set.
type EnvUser struct {
	Username string `key:"auth.env_user.username"`
	Password Secret `key:"auth.env_user.password"`
}

// TLS configures certificates. AdminEnabled and InterBroker are already
// resolved: when unset they hold tls.enabled's value.
type TLS struct {
	Enabled        bool   `key:"tls.enabled"`
	CertPath       string `key:"tls.cert_path"`
	KeyPath        string `key:"tls.key_path"`
	AutoSelfSigned bool   `key:"tls.auto_self_signed"`
	AdminEnabled   bool   `key:"tls.admin_enabled"`
	InterBroker    bool   `key:"tls.inter_broker"`
	PeerCAPath     string `key:"tls.peer_ca_path"`
	ClientAuth     string `key:"tls.client_auth"`
	ClientCAPath   string `key:"tls.client_ca_path"`
}

// Client certificate modes (S-154).
const (
	ClientAuthOff     = "off"
	ClientAuthRequest = "request"
	ClientAuthRequire = "require"
)

// Coordination selects and tunes the coordination backend.
type Coordination struct {
	Backend             string `key:"coordination.backend"`
	NodeID              string `key:"coordination.node_id"`
	Secret              Secret `key:"coordination.secret"`
	SecretPath          string `key:"coordination.secret_path"`
	HeartbeatIntervalMS int64  `key:"coordination.heartbeat_interval_ms"`
	LivenessTTLMS       int64  `key:"coordination.liveness_ttl_ms"`
	Raft                Raft
	Consul              Consul
}

// BackendNone is the standalone mode: one node, no coordination, queues
// created on first use (S-21, S-113).
const BackendNone = "none"

// Standalone reports whether the node runs without coordination.
func (c Coordination) Standalone() bool { return c.Backend == BackendNone }

// Consul is how the broker reaches Consul: the consul backend's keys
// (also used by service registration).
type Consul struct {
	Addresses     []string `key:"coordination.consul.addresses"`
	Datacenter    string   `key:"coordination.consul.datacenter"`
	Token         Secret   `key:"coordination.consul.token"`
	TokenPath     string   `key:"coordination.consul.token_path"`
	CAPath        string   `key:"coordination.consul.ca_path"`
	CertPath      string   `key:"coordination.consul.cert_path"`
	KeyPath       string   `key:"coordination.consul.key_path"`
	TLSServerName string   `key:"coordination.consul.tls_server_name"`
	Prefix        string   `key:"coordination.consul.prefix"`
	SessionTTLMS  int64    `key:"coordination.consul.session_ttl_ms"`
}

// ConsulService configures the broker's registration in Consul's catalog.
type ConsulService struct {
	Register                  bool   `key:"consul.register"`
	ServiceName               string `key:"consul.service_name"`
	CheckIntervalMS           int64  `key:"consul.check_interval_ms"`
	DeregisterCriticalAfterMS int64  `key:"consul.deregister_critical_after_ms"`
}

// Raft configures the embedded raft backend.
type Raft struct {
	Listen          string   `key:"coordination.raft.listen"`
	Advertise       string   `key:"coordination.raft.advertise"`
	Peers           []string `key:"coordination.raft.peers"`
	BootstrapExpect int64    `key:"coordination.raft.bootstrap_expect"`
	Voter           bool     `key:"coordination.raft.voter"`
}

// ParsedPeers returns the peers as id/address pairs. Load has validated
// them, so an error here means the Config was built by hand.
func (r Raft) ParsedPeers() ([]RaftPeer, error) {
	out := make([]RaftPeer, 0, len(r.Peers))
	for _, s := range r.Peers {
		p, err := ParseRaftPeer(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Transport selects the inter-broker transport.
type Transport struct {
	Backend string `key:"transport.backend"`
	QUIC    QUIC
}

// QUIC tunes transport/quic.
type QUIC struct {
	MaxIncomingStreams       int64 `key:"transport.quic.max_incoming_streams"`
	StreamReceiveWindowBytes int64 `key:"transport.quic.stream_receive_window_bytes"`
	MaxIdleTimeoutMS         int64 `key:"transport.quic.max_idle_timeout_ms"`
}

// Plugins locates external plugins.
type Plugins struct {
	Catalog string `key:"plugins.catalog"`
}

// Log configures log/slog output.
type Log struct {
	Level  string `key:"log.level"`
	Format string `key:"log.format"`
}

// RuntimeSeedSettings are the runtime_seed.* groups of S-170 that boot
// config may seed.
type RuntimeSeedSettings struct {
	Delivery     DeliverySeed
	Connection   ConnectionSeed
	Partitioning PartitioningSeed
}

// DeliverySeed seeds the runtime "delivery" group.
type DeliverySeed struct {
	InflightTTLMS     int64 `key:"runtime_seed.delivery.inflight_ttl_ms"`
	ExpiryPollMinMS   int64 `key:"runtime_seed.delivery.expiry_poll_min_ms"`
	ExpiryBatchMax    int64 `key:"runtime_seed.delivery.expiry_batch_max"`
	DeliveryPollMaxMS int64 `key:"runtime_seed.delivery.delivery_poll_max_ms"`
}

// ConnectionSeed seeds the runtime "connection" group.
type ConnectionSeed struct {
	ReconnectGraceMS          int64 `key:"runtime_seed.connection.reconnect_grace_ms"`
	ResumeSessionRestartTTLMS int64 `key:"runtime_seed.connection.resume_session_restart_ttl_ms"`
	DrainHandoffTimeoutMS     int64 `key:"runtime_seed.connection.drain_handoff_timeout_ms"`
}

// PartitioningSeed seeds the runtime "partitioning" group.
type PartitioningSeed struct {
	DefaultPartitionCount int64 `key:"runtime_seed.partitioning.default_partition_count"`
}

// Runtime holds runtime settings that have built-in defaults and no boot
// seed. DefaultRuntime fills it from the key table; the runtime settings
// document (a later issue) overrides it and validates with ValidateRuntime.
type Runtime struct {
	Routing     Routing
	Replication Replication
}

// Routing holds the forwarding limits (core/forward/README.md#bounds),
// how long a declaration waits for its partitions to be placed, and
// whether topology answers list private owners' own addresses, tagged
// private (core/routing/README.md#private-endpoints).
type Routing struct {
	MaxUpstreamSessions          int64 `key:"routing.max_upstream_sessions"`
	MaxUpstreamSessionsPerOwner  int64 `key:"routing.max_upstream_sessions_per_owner"`
	MaxInflightForwardBytes      int64 `key:"routing.max_inflight_forward_bytes"`
	ForwardTimeoutMS             int64 `key:"routing.forward_timeout_ms"`
	UpstreamConnectTimeoutMS     int64 `key:"routing.upstream_connect_timeout_ms"`
	UpstreamIdleCloseMS          int64 `key:"routing.upstream_idle_close_ms"`
	DeclarePlacementTimeoutMS    int64 `key:"routing.declare_placement_timeout_ms"`
	ExposePrivateEndpoints       bool  `key:"routing.expose_private_endpoints"`
	RepartitionAdoptionTimeoutMS int64 `key:"routing.repartition_adoption_timeout_ms"`
}

// Replication holds how many followers each partition gets and what a
// replicated confirm waits for. A standalone broker ignores it.
type Replication struct {
	TargetFollowers   int64  `key:"replication.target_followers"`
	Durability        string `key:"replication.durability"`
	ConfirmTimeoutMS  int64  `key:"replication.confirm_timeout_ms"`
	ISRTimeoutMS      int64  `key:"replication.isr_timeout_ms"`
	MinInSyncReplicas int64  `key:"replication.min_in_sync_replicas"`
}

// Secret holds a secret string. It prints as "<redacted>" through fmt and
// log/slog so that logging a Config never leaks it; Reveal returns it.
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// IsSet reports whether the secret has a value.
func (s Secret) IsSet() bool { return s != "" }

// String implements fmt.Stringer with a redaction.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return `config.Secret("` + s.String() + `")` }

// MarshalText keeps encoders (JSON, TOML, slog's JSON handler) from
// printing the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

const redacted = "<redacted>"

// Seed is one user to create while the user store is empty (S-147): either
// a file entry with its argon2id hash or the environment user with its
// plain password, which the user store hashes.
type Seed struct {
	Username     string
	PasswordHash string
	Password     Secret
}

// Seeds returns every seed user: the file's entries, then the environment
// user if set. Load has already rejected duplicates and reserved names.
func (a Auth) Seeds() []Seed {
	out := make([]Seed, 0, len(a.SeedUsers)+1)
	for _, u := range a.SeedUsers {
		out = append(out, Seed{Username: u.Username, PasswordHash: u.PasswordHash})
	}
	if a.EnvUser.Username != "" {
		out = append(out, Seed{Username: a.EnvUser.Username, Password: a.EnvUser.Password})
	}
	return out
}
