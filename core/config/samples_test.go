package config

// sample is a valid non-default value for one key, as text for env and
// flags, with the typed value it must produce and any other variables the
// cross-key rules need for it to be accepted.
type sample struct {
	text string
	want any
	env  []string
}

var tlsOn = []string{"FIBRIL_TLS_ENABLED=true", "FIBRIL_TLS_AUTO_SELF_SIGNED=true"}

// samples covers every key settable from the environment or flags; the
// tests fail when a new key has no entry here.
var samples = map[string]sample{
	"server.data_dir":                                       {text: "/var/lib/fibril", want: "/var/lib/fibril"},
	"broker.listener.bind":                                  {text: "0.0.0.0:19876", want: "0.0.0.0:19876"},
	"broker.listener.advertise":                             {text: "gw.example.com:9876,127.0.0.1:9876", want: []string{"gw.example.com:9876", "127.0.0.1:9876"}},
	"broker.visibility":                                     {text: "private", want: "private", env: []string{"FIBRIL_COORDINATION_BACKEND=raft"}},
	"broker.peer_advertise":                                 {text: "node-1.internal:7000", want: "node-1.internal:7000"},
	"broker.peer_listener.bind":                             {text: ":7000", want: ":7000"},
	"broker.max_frame_bytes":                                {text: "33554432", want: int64(33554432)},
	"broker.max_message_bytes":                              {text: "1048576", want: int64(1048576)},
	"admin.listener.bind":                                   {text: "0.0.0.0:18081", want: "0.0.0.0:18081"},
	"admin.listener.advertise":                              {text: "admin.example.com:8081", want: []string{"admin.example.com:8081"}},
	"admin.auth.enabled":                                    {text: "true", want: true, env: []string{"FIBRIL_ADMIN_AUTH_PASSWORD=pw"}},
	"admin.auth.username":                                   {text: "root", want: "root"},
	"admin.auth.password":                                   {text: "pw", want: "pw"},
	"admin.auth.password_file":                              {text: "/run/secrets/admin", want: "/run/secrets/admin"},
	"admin.metrics_per_channel":                             {text: "false", want: false},
	"storage.fsync":                                         {text: "interval", want: "interval"},
	"storage.fsync_interval_ms":                             {text: "5", want: int64(5)},
	"storage.segment_max_bytes":                             {text: "4096", want: int64(4096)},
	"storage.wal.enabled":                                   {text: "false", want: false},
	"storage.wal.file_bytes":                                {text: "1048576", want: int64(1 << 20)},
	"storage.wal.files":                                     {text: "8", want: int64(8)},
	"auth.allow_default_loopback":                           {text: "false", want: false},
	"auth.env_user.username":                                {text: "app", want: "app", env: []string{"FIBRIL_AUTH_PASSWORD=pw"}},
	"auth.env_user.password":                                {text: "pw", want: "pw", env: []string{"FIBRIL_AUTH_USERNAME=app"}},
	"tls.enabled":                                           {text: "true", want: true, env: []string{"FIBRIL_TLS_AUTO_SELF_SIGNED=true"}},
	"tls.cert_path":                                         {text: "/etc/fibril/cert.pem", want: "/etc/fibril/cert.pem", env: []string{"FIBRIL_TLS_KEY_PATH=/k"}},
	"tls.key_path":                                          {text: "/etc/fibril/key.pem", want: "/etc/fibril/key.pem", env: []string{"FIBRIL_TLS_CERT_PATH=/c"}},
	"tls.auto_self_signed":                                  {text: "true", want: true},
	"tls.admin_enabled":                                     {text: "false", want: false, env: tlsOn},
	"tls.inter_broker":                                      {text: "false", want: false, env: tlsOn},
	"tls.peer_ca_path":                                      {text: "/etc/fibril/peers.pem", want: "/etc/fibril/peers.pem"},
	"tls.client_auth":                                       {text: "require", want: "require", env: tlsOn},
	"tls.client_ca_path":                                    {text: "/etc/fibril/clients.pem", want: "/etc/fibril/clients.pem"},
	"coordination.backend":                                  {text: "raft", want: "raft"},
	"coordination.node_id":                                  {text: "node-1", want: "node-1"},
	"coordination.secret":                                   {text: "s3cret", want: "s3cret"},
	"coordination.secret_path":                              {text: "/run/secrets/cluster", want: "/run/secrets/cluster"},
	"coordination.heartbeat_interval_ms":                    {text: "1500", want: int64(1500)},
	"coordination.liveness_ttl_ms":                          {text: "9000", want: int64(9000)},
	"coordination.raft.listen":                              {text: "127.0.0.1:7100", want: "127.0.0.1:7100", env: []string{"FIBRIL_COORDINATION_BACKEND=raft"}},
	"coordination.raft.advertise":                           {text: "node-1.internal:7100", want: "node-1.internal:7100", env: []string{"FIBRIL_COORDINATION_BACKEND=raft"}},
	"coordination.raft.peers":                               {text: "n1=127.0.0.1:7100,n2=127.0.0.2:7100", want: []string{"n1=127.0.0.1:7100", "n2=127.0.0.2:7100"}, env: []string{"FIBRIL_COORDINATION_BACKEND=raft"}},
	"coordination.raft.bootstrap_expect":                    {text: "3", want: int64(3), env: []string{"FIBRIL_COORDINATION_BACKEND=raft"}},
	"coordination.raft.voter":                               {text: "false", want: false, env: []string{"FIBRIL_COORDINATION_BACKEND=raft"}},
	"transport.backend":                                     {text: "quic", want: "quic"},
	"transport.quic.max_incoming_streams":                   {text: "2048", want: int64(2048)},
	"transport.quic.stream_receive_window_bytes":            {text: "262144", want: int64(262144)},
	"transport.quic.max_idle_timeout_ms":                    {text: "30000", want: int64(30000)},
	"plugins.catalog":                                       {text: "/etc/fibril/plugins.toml", want: "/etc/fibril/plugins.toml"},
	"log.level":                                             {text: "debug", want: "debug"},
	"log.format":                                            {text: "json", want: "json"},
	"runtime_seed.delivery.inflight_ttl_ms":                 {text: "1", want: int64(1)},
	"runtime_seed.delivery.expiry_poll_min_ms":              {text: "2", want: int64(2)},
	"runtime_seed.delivery.expiry_batch_max":                {text: "3", want: int64(3)},
	"runtime_seed.delivery.delivery_poll_max_ms":            {text: "4", want: int64(4)},
	"runtime_seed.connection.reconnect_grace_ms":            {text: "0", want: int64(0)},
	"runtime_seed.connection.resume_session_restart_ttl_ms": {text: "6", want: int64(6)},
	"runtime_seed.connection.drain_handoff_timeout_ms":      {text: "7", want: int64(7)},
	"runtime_seed.partitioning.default_partition_count":     {text: "8", want: int64(8)},
}
