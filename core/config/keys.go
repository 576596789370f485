package config

// keys is the key table: the single source of truth for every configuration
// key. Order matters only for documentation: keys are listed section by
// section as they appear in docs/configuration.md and fibril.example.toml.
//
// Environment names are written out, never derived from the key, because
// Fibril's names do not follow the key mechanically (FIBRIL_BROKER_BIND is
// broker.listener.bind) and keys contain underscores. The canonical flag of
// every key is --<key>; Flags only adds compatibility twins.
//
// Adding a key: add it here, add the matching `key:"…"` field to Config (or
// Runtime for runtime-only keys), then regenerate the example and the docs
// (go generate ./cmd/fibril). Tests fail until all three agree.
var keys = []Key{
	// server
	{
		Name: "server.data_dir", Kind: KindString, Default: "server_data",
		Env:   []string{"FIBRIL_DATA_DIR"},
		Doc:   "Directory for partition logs, the node id, generated TLS material and the default cluster secret file; must not be empty.",
		Check: nonEmpty,
	},

	// broker
	{
		Name: "broker.listener.bind", Kind: KindString, Default: "127.0.0.1:9876",
		Env:   []string{"FIBRIL_BROKER_BIND"},
		Doc:   "host:port the Fibril client listener binds; use 0.0.0.0 to accept connections from the network.",
		Check: bindAddr,
	},
	{
		Name: "broker.listener.advertise", Kind: KindList, Default: []string{},
		DefaultNote: "empty: derived at start",
		Env:         []string{"FIBRIL_BROKER_ADVERTISE"},
		Doc:         "host:port addresses clients are told to dial for this broker, in order. When broker.visibility is private they are given to clients only while routing.expose_private_endpoints is on, tagged private after the gateway's.",
		Check:       dialAddrList,
	},
	{
		Name: "broker.visibility", Kind: KindEnum, Default: "public", Enum: []string{"public", "private"},
		Env: []string{"FIBRIL_BROKER_VISIBILITY"},
		Doc: "public brokers appear in topology answers and redirects; private ones never do and are reached by clients only through a public broker, which forwards to them. A private broker needs a coordination backend.",
	},
	{
		Name: "broker.peer_advertise", Kind: KindString, Default: "",
		DefaultNote: "empty: the first broker.listener.advertise entry, else broker.listener.bind",
		Env:         []string{"FIBRIL_BROKER_PEER_ADVERTISE"},
		Doc:         "The single host:port other brokers dial to reach this one (upstream sessions, replication).",
		Check:       optionalDialAddr,
	},
	{
		Name: "broker.peer_listener.bind", Kind: KindString, Default: "",
		DefaultNote: "empty: chosen by the transport",
		Env:         []string{"FIBRIL_BROKER_PEER_BIND"},
		Doc:         "host:port the inter-broker transport listens on.",
		Check:       optionalBindAddr,
	},
	{
		Name: "broker.max_frame_bytes", Kind: KindInt, Default: int64(64 * MiB), Min: bound(1024), Max: bound(1 << 32),
		Env: []string{"FIBRIL_BROKER_MAX_FRAME_BYTES"},
		Doc: "Largest wire frame accepted, header included; a larger one gets ERROR 400 and the connection closes.",
	},
	{
		Name: "broker.max_message_bytes", Kind: KindInt, Default: int64(16 * MiB), Min: bound(1),
		Env: []string{"FIBRIL_BROKER_MAX_MESSAGE_BYTES"},
		Doc: "Largest message payload accepted (ERROR 413 beyond it); must be below broker.max_frame_bytes.",
	},

	// admin
	{
		Name: "admin.listener.bind", Kind: KindString, Default: "127.0.0.1:8081",
		Env:   []string{"FIBRIL_ADMIN_BIND"},
		Doc:   "host:port the admin HTTP listener (health, metrics, API, dashboard) binds.",
		Check: bindAddr,
	},
	{
		Name: "admin.listener.advertise", Kind: KindList, Default: []string{},
		DefaultNote: "empty: derived at start",
		Env:         []string{"FIBRIL_ADMIN_ADVERTISE"},
		Doc:         "host:port addresses other nodes and tools use to reach this admin listener.",
		Check:       dialAddrList,
	},
	{
		Name: "admin.auth.enabled", Kind: KindBool, Default: false,
		Env: []string{"FIBRIL_ADMIN_AUTH_ENABLED"},
		Doc: "Require the admin username and password for the admin API, pages and /metrics (/healthz and /readyz stay open).",
	},
	{
		Name: "admin.auth.username", Kind: KindString, Default: "fibril",
		Env: []string{"FIBRIL_ADMIN_AUTH_USERNAME"},
		Doc: "Admin username; separate from broker users.",
	},
	{
		Name: "admin.auth.password", Kind: KindString, Default: "", Secret: true,
		DefaultNote: "unset",
		Env:         []string{"FIBRIL_ADMIN_AUTH_PASSWORD"},
		Refusal:     "set env FIBRIL_ADMIN_AUTH_PASSWORD, or put the password in a file and set admin.auth.password_file",
		Doc:         "Admin password (environment only).",
	},
	{
		Name: "admin.auth.password_file", Kind: KindString, Default: "",
		DefaultNote: "unset",
		Env:         []string{"FIBRIL_ADMIN_AUTH_PASSWORD_FILE"},
		Doc:         "File holding the admin password, for deployments that mount secrets as files.",
	},
	{
		Name: "admin.metrics_per_channel", Kind: KindBool, Default: true,
		Env: []string{"FIBRIL_ADMIN_METRICS_PER_CHANNEL"},
		Doc: "Export per-queue and per-stream metric series for loaded channels.",
	},

	// storage
	{
		Name: "storage.fsync", Kind: KindEnum, Default: "always", Enum: []string{"always", "interval", "none"},
		Env: []string{"FIBRIL_STORAGE_FSYNC"},
		Doc: "always: a publish is confirmed only after an fsync covers it (group commit); interval: fsync on a timer, every storage.fsync_interval_ms; none: leave flushing to the OS. The storage docs state what each promises.",
	},
	{
		Name: "storage.fsync_interval_ms", Kind: KindInt, Default: int64(100), Min: bound(1),
		Env: []string{"FIBRIL_STORAGE_FSYNC_INTERVAL_MS"},
		Doc: "Milliseconds between fsyncs under storage.fsync = interval.",
	},
	{
		Name: "storage.segment_max_bytes", Kind: KindInt, Default: int64(64 * MiB), Min: bound(4096),
		Env: []string{"FIBRIL_STORAGE_SEGMENT_MAX_BYTES"},
		Doc: "Size at which a partition log rolls over to a new segment file.",
	},
	{
		Name: "storage.min_free_bytes", Kind: KindInt, Default: int64(256 * MiB), Min: bound(0),
		Env: []string{"FIBRIL_STORAGE_MIN_FREE_BYTES"},
		Doc: "Free space on the data directory's file system below which publishes are refused (503, retryable), /readyz turns false and fibril_storage_writes_refused is 1, before a full disk can fail a write; the broker accepts publishes again by itself once there is this much free plus 10%. Acknowledgements and replication go on. 0 turns the check off.",
	},
	{
		Name: "storage.wal.enabled", Kind: KindBool, Default: true,
		Env: []string{"FIBRIL_STORAGE_WAL_ENABLED"},
		Doc: "Under storage.fsync = always, confirm records with one fsync of a write-ahead log shared by every partition (in data_dir/wal) instead of an fsync per partition, so that spreading load over many partitions costs no throughput. The guarantee is the same: a confirmed record is on disk. Off: each partition fsyncs its own log.",
	},
	{
		Name: "storage.wal.file_bytes", Kind: KindInt, Default: int64(64 * MiB), Min: bound(64 * 1024), Max: bound(1 << 30),
		Env: []string{"FIBRIL_STORAGE_WAL_FILE_BYTES"},
		Doc: "Size of each write-ahead log file. When one is full the partitions that wrote into it are fsynced in the background and it is reused; recovery after a crash reads at most storage.wal.files of them.",
	},
	{
		Name: "storage.wal.files", Kind: KindInt, Default: int64(4), Min: bound(2), Max: bound(64),
		Env: []string{"FIBRIL_STORAGE_WAL_FILES"},
		Doc: "Write-ahead log files in the ring. Confirms wait only when every file is full and not yet checkpointed.",
	},

	// auth
	{
		Name: "auth.allow_default_loopback", Kind: KindBool, Default: true,
		Env: []string{"FIBRIL_AUTH_ALLOW_DEFAULT_LOOPBACK"},
		Doc: "Accept the built-in fibril/fibril login from loopback clients (never over the inter-broker transport) while no real user named fibril exists.",
	},
	{
		Name: "auth.seed_users", Kind: KindUsers, Default: nil,
		DefaultNote: "none",
		From:        FromFile,
		Refusal:     "users are listed only in the config file as [[auth.seed_users]] tables; the environment pair FIBRIL_AUTH_USERNAME + FIBRIL_AUTH_PASSWORD adds one more",
		Doc:         "Users created while the user store is empty: [[auth.seed_users]] tables of username and password_hash (an argon2id PHC string, which `fibril auth hash-password` prints; plain passwords never come from the file). Usernames starting with @ are reserved.",
	},
	{
		Name: "auth.env_user.username", Kind: KindString, Default: "",
		DefaultNote: "unset",
		Env:         []string{"FIBRIL_AUTH_USERNAME"},
		From:        FromEnv,
		Check:       optionalUsername,
		Refusal:     "this user comes only from env FIBRIL_AUTH_USERNAME + FIBRIL_AUTH_PASSWORD; in the file, list users as [[auth.seed_users]] with a password_hash",
		Doc:         "Username of one more seed user, from the environment pair (both halves required).",
	},
	{
		Name: "auth.env_user.password", Kind: KindString, Default: "", Secret: true,
		DefaultNote: "unset",
		Env:         []string{"FIBRIL_AUTH_PASSWORD"},
		Refusal:     "set env FIBRIL_AUTH_PASSWORD; in the file, list the user under [[auth.seed_users]] with an argon2id password_hash",
		Doc:         "Plain password of that seed user (environment only; hashed before it is stored).",
	},

	// tls
	{
		Name: "tls.enabled", Kind: KindBool, Default: false,
		Env: []string{"FIBRIL_TLS_ENABLED"},
		Doc: "Serve TLS on the broker listener; needs exactly one certificate source: tls.cert_path + tls.key_path, or tls.auto_self_signed.",
	},
	{
		Name: "tls.cert_path", Kind: KindString, Default: "",
		Env: []string{"FIBRIL_TLS_CERT_PATH"},
		Doc: "PEM certificate chain of the broker, presented as the file holds it: the leaf first, then its issuers (include the CA whose fingerprint clients pin: SDKs accept a pinned CA only from the presented chain); set together with tls.key_path.",
	},
	{
		Name: "tls.key_path", Kind: KindString, Default: "",
		Env: []string{"FIBRIL_TLS_KEY_PATH"},
		Doc: "PEM private key matching tls.cert_path.",
	},
	{
		Name: "tls.auto_self_signed", Kind: KindBool, Default: false,
		Env: []string{"FIBRIL_TLS_AUTO_SELF_SIGNED"},
		Doc: "Create a CA and a server certificate under <data_dir>/tls on first boot and print the CA fingerprint; the broker presents its certificate followed by that CA, so clients may pin either.",
	},
	{
		Name: "tls.admin_enabled", Kind: KindOptBool, Default: nil, Follows: "tls.enabled",
		DefaultNote: "unset: follows tls.enabled",
		Env:         []string{"FIBRIL_TLS_ADMIN_ENABLED"},
		Doc:         "Serve HTTPS on the admin listener from the same material; true needs tls.enabled.",
	},
	{
		Name: "tls.inter_broker", Kind: KindOptBool, Default: nil, Follows: "tls.enabled",
		DefaultNote: "unset: follows tls.enabled",
		Env:         []string{"FIBRIL_TLS_INTER_BROKER"},
		Doc:         "Use TLS for broker-to-broker connections and the consensus channel; true needs tls.enabled.",
	},
	{
		Name: "tls.peer_ca_path", Kind: KindString, Default: "",
		DefaultNote: "empty: none (required for inter-broker TLS in a cluster)",
		Env:         []string{"FIBRIL_TLS_PEER_CA_PATH"},
		Doc:         "Inter-broker TLS trust. With tls.cert_path/key_path: the PEM CA bundle peers' certificates are verified against (each node's certificate carries the URI SAN urn:fibril:node:<node id>). With tls.auto_self_signed: the cluster CA file (certificate and key) every node shares, created by the first node when absent; each node mints its own peer certificate from it.",
	},
	{
		Name: "tls.client_auth", Kind: KindEnum, Default: "off", Enum: []string{"off", "request", "require"},
		Env: []string{"FIBRIL_TLS_CLIENT_AUTH"},
		Doc: "Client certificates: off, request (verify when presented) or require (reject clients without one); needs tls.enabled unless off.",
	},
	{
		Name: "tls.client_ca_path", Kind: KindString, Default: "",
		DefaultNote: "empty: the generated CA",
		Env:         []string{"FIBRIL_TLS_CLIENT_CA_PATH"},
		Doc:         "PEM CA bundle client certificates are verified against.",
	},

	// coordination
	{
		Name: "coordination.backend", Kind: KindString, Default: "none",
		Env:   []string{"FIBRIL_COORDINATION_BACKEND"},
		Doc:   "Coordination backend: none (standalone: a single node, no cluster), raft (embedded), consul, or the name of an external plugin from plugins.catalog.",
		Check: pluginName,
	},
	{
		Name: "coordination.node_id", Kind: KindString, Default: "",
		DefaultNote: "empty: generated once and kept in the data directory",
		Env:         []string{"FIBRIL_COORDINATION_NODE_ID"},
		Doc:         "This node's id; replicas of one service must not share it.",
		Check:       optionalNodeID,
	},
	{
		Name: "coordination.secret", Kind: KindString, Default: "", Secret: true,
		DefaultNote: "unset: coordination.secret_path, else <data_dir>/cluster.secret",
		Env:         []string{"FIBRIL_CLUSTER_SECRET"},
		Refusal:     "set env FIBRIL_CLUSTER_SECRET, or put the secret in a file and set coordination.secret_path (FIBRIL_CLUSTER_SECRET_PATH)",
		Doc:         "Cluster secret every node shares; brokers authenticate to each other as @node with it (environment only).",
	},
	{
		Name: "coordination.secret_path", Kind: KindString, Default: "",
		DefaultNote: "empty: <data_dir>/cluster.secret",
		Env:         []string{"FIBRIL_CLUSTER_SECRET_PATH"},
		Doc:         "File holding the cluster secret, used when FIBRIL_CLUSTER_SECRET is not set.",
	},
	{
		Name: "coordination.heartbeat_interval_ms", Kind: KindInt, Default: int64(1000), Min: bound(1),
		Env: []string{"FIBRIL_COORDINATION_HEARTBEAT_INTERVAL_MS"},
		Doc: "Milliseconds between liveness heartbeats.",
	},
	{
		Name: "coordination.liveness_ttl_ms", Kind: KindInt, Default: int64(4000), Min: bound(1),
		Env: []string{"FIBRIL_COORDINATION_LIVENESS_TTL_MS"},
		Doc: "Milliseconds without a heartbeat before a node counts as dead; at least twice the heartbeat interval (backends may raise it: Consul's floor is 10000 ms).",
	},
	{
		Name: "coordination.raft.listen", Kind: KindString, Default: "",
		DefaultNote: "empty: chosen by the raft backend",
		Env:         []string{"FIBRIL_COORDINATION_RAFT_LISTEN"},
		Doc:         "host:port the embedded raft consensus channel listens on.",
		Check:       optionalBindAddr,
	},
	{
		Name: "coordination.raft.advertise", Kind: KindString, Default: "",
		DefaultNote: "empty: derived from coordination.raft.listen",
		Env:         []string{"FIBRIL_COORDINATION_RAFT_ADVERTISE"},
		Doc:         "host:port other raft members dial to reach this node.",
		Check:       optionalDialAddr,
	},
	{
		Name: "coordination.raft.peers", Kind: KindList, Default: []string{},
		Env:   []string{"FIBRIL_COORDINATION_RAFT_PEERS"},
		Doc:   "Initial raft members as id=host:port entries, this node included.",
		Check: raftPeers,
	},
	{
		Name: "coordination.raft.bootstrap_expect", Kind: KindInt, Default: int64(0), Min: bound(0),
		Env: []string{"FIBRIL_COORDINATION_RAFT_BOOTSTRAP_EXPECT"},
		Doc: "Number of voters to wait for before a new cluster bootstraps itself; 0 = never bootstrap, only join.",
	},
	{
		Name: "coordination.raft.voter", Kind: KindBool, Default: true,
		Env: []string{"FIBRIL_COORDINATION_RAFT_VOTER"},
		Doc: "Whether this node votes in raft; false joins it as a non-voter that replicates and serves reads without counting toward the quorum.",
	},

	{
		Name: "coordination.consul.addresses", Kind: KindList, Default: []string{"127.0.0.1:8500"},
		Env: []string{"FIBRIL_CONSUL_ADDRESSES"},
		Doc: "Consul agents (host:port, http://host:port or https://host:port) the consul backend and service registration talk to; the first that answers is used, the next on a connection error.",
	},
	{
		Name: "coordination.consul.datacenter", Kind: KindString, Default: "",
		DefaultNote: "empty: the agent's own",
		Env:         []string{"FIBRIL_CONSUL_DATACENTER"},
		Doc:         "Consul datacenter.",
	},
	{
		Name: "coordination.consul.token", Kind: KindString, Default: "", Secret: true,
		DefaultNote: "unset: coordination.consul.token_path, else the agent's default token",
		Env:         []string{"FIBRIL_CONSUL_TOKEN"},
		Refusal:     "set env FIBRIL_CONSUL_TOKEN, or put the token in a file and set coordination.consul.token_path",
		Doc:         "Consul ACL token (environment only; never logged). coordination/consul/README.md lists the rights it needs.",
	},
	{
		Name: "coordination.consul.token_path", Kind: KindString, Default: "",
		Env: []string{"FIBRIL_CONSUL_TOKEN_PATH"},
		Doc: "File holding the Consul ACL token, used when FIBRIL_CONSUL_TOKEN is not set.",
	},
	{
		Name: "coordination.consul.ca_path", Kind: KindString, Default: "",
		Env: []string{"FIBRIL_CONSUL_CA_PATH"},
		Doc: "PEM CA bundle the Consul agent's HTTPS certificate is verified against; setting it (or cert_path) makes host:port addresses use HTTPS.",
	},
	{
		Name: "coordination.consul.cert_path", Kind: KindString, Default: "",
		Env: []string{"FIBRIL_CONSUL_CERT_PATH"},
		Doc: "Client certificate (PEM) presented to the Consul agent; needs coordination.consul.key_path.",
	},
	{
		Name: "coordination.consul.key_path", Kind: KindString, Default: "",
		Env: []string{"FIBRIL_CONSUL_KEY_PATH"},
		Doc: "Private key (PEM) of coordination.consul.cert_path.",
	},
	{
		Name: "coordination.consul.tls_server_name", Kind: KindString, Default: "",
		DefaultNote: "empty: the address's host",
		Env:         []string{"FIBRIL_CONSUL_TLS_SERVER_NAME"},
		Doc:         "Name the Consul agent's certificate must carry.",
	},
	{
		Name: "coordination.consul.prefix", Kind: KindString, Default: "fibril",
		Env: []string{"FIBRIL_CONSUL_PREFIX"},
		Doc: "KV prefix every key of this cluster lives under; clusters sharing one Consul need different prefixes.",
	},
	{
		Name: "coordination.consul.session_ttl_ms", Kind: KindInt, Default: int64(10000), Min: bound(10000), Max: bound(86400000),
		Env: []string{"FIBRIL_CONSUL_SESSION_TTL_MS"},
		Doc: "TTL of the Consul sessions that carry this node's leases (Consul's floor is 10000); the liveness lease is the larger of this and coordination.liveness_ttl_ms.",
	},

	// Consul service registration (works with any coordination backend)
	{
		Name: "consul.register", Kind: KindBool, Default: false,
		Env: []string{"FIBRIL_CONSUL_REGISTER"},
		Doc: "Register this broker in the Consul catalog (agent at coordination.consul.addresses) with a health check on /readyz; deregistered on orderly shutdown.",
	},
	{
		Name: "consul.service_name", Kind: KindString, Default: "fibril",
		Env: []string{"FIBRIL_CONSUL_SERVICE_NAME"},
		Doc: "Consul service name brokers register under. Public brokers carry the tag public, private ones the tag private.",
	},
	{
		Name: "consul.check_interval_ms", Kind: KindInt, Default: int64(5000), Min: bound(1000),
		Env: []string{"FIBRIL_CONSUL_CHECK_INTERVAL_MS"},
		Doc: "How often the Consul agent polls this broker's /readyz.",
	},
	{
		Name: "consul.deregister_critical_after_ms", Kind: KindInt, Default: int64(60000), Min: bound(60000),
		Env: []string{"FIBRIL_CONSUL_DEREGISTER_CRITICAL_AFTER_MS"},
		Doc: "A broker whose check stays critical this long is removed from the catalog (a dead broker disappears); Consul's reaper runs every 30 s and accepts no less than a minute.",
	},

	// transport
	{
		Name: "transport.backend", Kind: KindString, Default: "tcp",
		Env:   []string{"FIBRIL_TRANSPORT_BACKEND"},
		Doc:   "Inter-broker transport: tcp, quic, or the name of an external plugin from plugins.catalog.",
		Check: pluginName,
	},
	{
		Name: "transport.quic.max_incoming_streams", Kind: KindInt, Default: int64(1024), Min: bound(1), Max: bound(1 << 20),
		Env: []string{"FIBRIL_TRANSPORT_QUIC_MAX_INCOMING_STREAMS"},
		Doc: "Streams (upstream sessions) one peer may have open towards this broker at once over QUIC; more wait for a free one until their open times out.",
	},
	{
		Name: "transport.quic.stream_receive_window_bytes", Kind: KindInt, Default: int64(1 * MiB), Min: bound(16 * 1024), Max: bound(64 * MiB),
		Env: []string{"FIBRIL_TRANSPORT_QUIC_STREAM_RECEIVE_WINDOW_BYTES"},
		Doc: "Most bytes one QUIC stream may have received and not yet read; size it to what one session keeps in flight (prefetch × message size). The connection window is this times transport.quic.max_incoming_streams, so a stalled stream never blocks the others.",
	},
	{
		Name: "transport.quic.max_idle_timeout_ms", Kind: KindInt, Default: int64(15000), Min: bound(1000),
		Env: []string{"FIBRIL_TRANSPORT_QUIC_MAX_IDLE_TIMEOUT_MS"},
		Doc: "A QUIC connection that hears nothing for this long is dead and its streams abort; keepalives go out at a third of it.",
	},

	// plugins
	{
		Name: "plugins.catalog", Kind: KindString, Default: "",
		DefaultNote: "empty: no external plugins",
		Env:         []string{"FIBRIL_PLUGINS_CATALOG"},
		Doc:         "Path of the external plugin catalog (format described in plugins.toml).",
	},

	// log
	{
		Name: "log.level", Kind: KindEnum, Default: "info", Enum: []string{"debug", "info", "warn", "error"},
		Env: []string{"FIBRIL_LOG_LEVEL"},
		Doc: "Lowest log level written.",
	},
	{
		Name: "log.format", Kind: KindEnum, Default: "text", Enum: []string{"text", "json"},
		Env: []string{"FIBRIL_LOG_FORMAT"},
		Doc: "Log line format (log/slog text or JSON handler).",
	},

	// runtime seeds (S-167, S-170, S-171)
	{
		Name: "runtime_seed.delivery.inflight_ttl_ms", Kind: KindInt, Default: int64(30000), Min: bound(1), Class: RuntimeSeed,
		Env: []string{"FIBRIL_RUNTIME_SEED_DELIVERY_INFLIGHT_TTL_MS"},
		Doc: "Milliseconds an unsettled delivery stays leased before it is redelivered.",
	},
	{
		Name: "runtime_seed.delivery.expiry_poll_min_ms", Kind: KindInt, Default: int64(15000), Min: bound(1), Class: RuntimeSeed,
		Env: []string{"FIBRIL_RUNTIME_SEED_DELIVERY_EXPIRY_POLL_MIN_MS"},
		Doc: "Shortest pause between scans for expired messages and leases.",
	},
	{
		Name: "runtime_seed.delivery.expiry_batch_max", Kind: KindInt, Default: int64(8192), Min: bound(1), Class: RuntimeSeed,
		Env: []string{"FIBRIL_RUNTIME_SEED_DELIVERY_EXPIRY_BATCH_MAX"},
		Doc: "Most expired entries handled in one scan.",
	},
	{
		Name: "runtime_seed.delivery.delivery_poll_max_ms", Kind: KindInt, Default: int64(5000), Min: bound(1), Class: RuntimeSeed,
		Env: []string{"FIBRIL_RUNTIME_SEED_DELIVERY_DELIVERY_POLL_MAX_MS"},
		Doc: "Longest pause before a subscription re-checks for deliverable messages.",
	},
	{
		Name: "runtime_seed.connection.reconnect_grace_ms", Kind: KindInt, Default: int64(5000), Min: bound(0), Class: RuntimeSeed,
		Env:   []string{"FIBRIL_RUNTIME_SEED_CONNECTION_RECONNECT_GRACE_MS", "FIBRIL_RECONNECT_GRACE_MS"},
		Flags: []string{"reconnect-grace-ms"},
		Doc:   "Milliseconds a dropped session is kept for its client to resume (0 turns resume off).",
	},
	{
		Name: "runtime_seed.connection.resume_session_restart_ttl_ms", Kind: KindInt, Default: int64(60000), Min: bound(0), Class: RuntimeSeed,
		Env:   []string{"FIBRIL_RUNTIME_SEED_CONNECTION_RESUME_SESSION_RESTART_TTL_MS", "FIBRIL_RESUME_SESSION_RESTART_TTL_MS"},
		Flags: []string{"resume-session-restart-ttl-ms"},
		Doc:   "Milliseconds after a broker restart during which sessions from before it may still resume.",
	},
	{
		Name: "runtime_seed.connection.drain_handoff_timeout_ms", Kind: KindInt, Default: int64(30000), Min: bound(0), Class: RuntimeSeed,
		Env: []string{"FIBRIL_RUNTIME_SEED_CONNECTION_DRAIN_HANDOFF_TIMEOUT_MS"},
		Doc: "Milliseconds a draining broker waits for its sessions to move before closing them.",
	},
	{
		Name: "runtime_seed.partitioning.default_partition_count", Kind: KindInt, Default: int64(1), Min: bound(1), Class: RuntimeSeed,
		Env: []string{"FIBRIL_RUNTIME_SEED_PARTITIONING_DEFAULT_PARTITION_COUNT"},
		Doc: "Partitions of a queue declared without a count.",
	},

	// routing: runtime settings with no boot seed (forwarding limits are
	// tuned on a running cluster, where one document serves all brokers). The
	// env names and flags are listed so that setting one at boot gets an
	// explanation instead of "unknown".
	{
		Name: "routing.max_upstream_sessions", Kind: KindInt, Default: int64(4096), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_MAX_UPSTREAM_SESSIONS"},
		Doc: "Upstream (forwarding) sessions this broker may hold; new forwarded operations get 503 beyond it.",
	},
	{
		Name: "routing.max_upstream_sessions_per_owner", Kind: KindInt, Default: int64(1024), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_MAX_UPSTREAM_SESSIONS_PER_OWNER"},
		Doc: "Upstream sessions to one owner; that owner's partitions get 503 beyond it.",
	},
	{
		Name: "routing.max_inflight_forward_bytes", Kind: KindInt, Default: int64(256 * MiB), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_MAX_INFLIGHT_FORWARD_BYTES"},
		Doc: "Publish payload bytes forwarded and not yet answered; publishes wait, then get 503.",
	},
	{
		Name: "routing.forward_timeout_ms", Kind: KindInt, Default: int64(30000), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_FORWARD_TIMEOUT_MS"},
		Doc: "Milliseconds a forwarded request may wait for the owner before it fails with an unknown outcome.",
	},
	{
		Name: "routing.upstream_connect_timeout_ms", Kind: KindInt, Default: int64(5000), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_UPSTREAM_CONNECT_TIMEOUT_MS"},
		Doc: "Milliseconds to open an upstream session before the operation gets 503 (nothing was sent).",
	},
	{
		Name: "routing.upstream_idle_close_ms", Kind: KindInt, Default: int64(30000), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_UPSTREAM_IDLE_CLOSE_MS"},
		Doc: "Milliseconds after which an idle upstream session closes.",
	},
	{
		Name: "routing.declare_placement_timeout_ms", Kind: KindInt, Default: int64(5000), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_DECLARE_PLACEMENT_TIMEOUT_MS"},
		Doc: "Milliseconds a declaration's answer waits for every partition to have an owner, so clients can use them at once; it answers anyway after this.",
	},
	{
		Name: "routing.repartition_adoption_timeout_ms", Kind: KindInt, Default: int64(30000), Min: bound(0), Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_REPARTITION_ADOPTION_TIMEOUT_MS"},
		Doc: "Milliseconds a repartition waits, once every old partition drained, for the cluster's clients to acknowledge the new topology before it finalizes anyway (docs/repartition.md, S-125).",
	},
	{
		Name: "routing.expose_private_endpoints", Kind: KindBool, Default: false, Class: RuntimeOnly,
		Env: []string{"FIBRIL_ROUTING_EXPOSE_PRIVATE_ENDPOINTS"},
		Doc: "Topology entries of privately owned partitions also list the private owner's own client addresses, after the gateway's and tagged private, for internal clients that can reach private brokers (core/client PreferPrivateEndpoints). Off: a private broker's address appears in no answer to a client.",
	},
	// replication.* are runtime-only too: one document decides for the
	// whole cluster how many copies each partition has. A standalone
	// broker ignores them.
	{
		Name: "replication.target_followers", Kind: KindInt, Default: int64(2), Min: bound(0), Class: RuntimeOnly,
		Env: []string{"FIBRIL_REPLICATION_TARGET_FOLLOWERS"},
		Doc: "Followers each partition gets besides its owner, at most the live brokers minus one; 0 keeps one copy.",
	},
	{
		Name: "replication.durability", Kind: KindString, Default: "majority_durable", Class: RuntimeOnly,
		Check: durabilityCheck,
		Env:   []string{"FIBRIL_REPLICATION_DURABILITY"},
		Doc:   "When a replicated publish is confirmed: local_durable (owner fsync), replica_accepted:N or replica_durable:N (N copies counting the owner accepted or fsynced), majority_durable (a majority of owner and followers fsynced). Takes effect once followers receive data.",
	},
	{
		Name: "replication.confirm_timeout_ms", Kind: KindInt, Default: int64(5000), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_REPLICATION_CONFIRM_TIMEOUT_MS"},
		Doc: "Milliseconds a replica-gated confirm waits for the followers before the publish gets an error (it may still be stored).",
	},
	{
		Name: "replication.isr_timeout_ms", Kind: KindInt, Default: int64(10000), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_REPLICATION_ISR_TIMEOUT_MS"},
		Doc: "Milliseconds without durable progress after which a follower leaves the in-sync set.",
	},
	{
		Name: "replication.min_in_sync_replicas", Kind: KindInt, Default: int64(1), Min: bound(1), Class: RuntimeOnly,
		Env: []string{"FIBRIL_REPLICATION_MIN_IN_SYNC_REPLICAS"},
		Doc: "Replicas, the owner included, that must be in sync for a replica-gated publish to be accepted; 1 disables the floor.",
	},
}
