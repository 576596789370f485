package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/admin"
	"github.com/fibrilgo/fibril/core/auth"
	"github.com/fibrilgo/fibril/core/buildinfo"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/peer"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/settings"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/core/wire"
)

// ShutdownTimeout bounds the graceful part of a shutdown: in-flight
// confirms are answered and sockets flushed within it.
const ShutdownTimeout = 10 * time.Second

// Broker is one running broker process.
type Broker struct {
	shutdownOnce sync.Once
	shutdownErr  error
	cfg          *config.Config
	log          *slog.Logger
	ownerID      wire.UUID
	settings     *settings.Store
	tls          *tlsconf.Material
	users        *auth.Store
	queues       *queue.Manager
	wal          *storage.WAL // the partitions' write-ahead log (storage.wal.enabled, fsync always); nil otherwise
	sessions     *session.Server
	admin        *admin.Server
	registry     *metricsRegistry
	secret       []byte       // the cluster secret (S-149); nil when none is configured
	secretOrigin string       // where it came from, for the log
	nodeID       core.NodeID  // coordinated mode only
	cluster      *coordinated // nil in standalone mode

	// The peer side (coordinated mode only; see peers.go).
	peer         *tlsconf.Peer  // inter-broker TLS material; nil when tls.inter_broker is off
	transport    core.Transport // transport.backend
	links        *peer.Links    // one link per peer, over transport
	peerShared   bool           // peers connect to the client listener
	peerAccepted chan struct{}  // closed when the peer accept loop has ended

	// What the admin listener reads while Start may still swap the stores
	// for the cluster's shared ones.
	adminUsers    atomic.Pointer[auth.Store]
	adminSettings atomic.Pointer[settings.Store]
	adminCluster  atomic.Pointer[coordinated]
	adminSessions atomic.Pointer[session.Server]
	// aclDenied counts operations the permissions refused (authorize).
	aclDenied *prometheus.CounterVec
	// levelVar is the process logger's level when it may change
	// (SetLogLevelVar).
	levelVar    atomic.Pointer[slog.LevelVar]
	draining    atomic.Bool
	adminQueues atomic.Pointer[queue.Manager] // set once sessions serve; cleared at shutdown
	rates       rateBook                      // the admin API's publish and deliver rates
	disk        *diskGuard                    // storage.min_free_bytes
	nodeConns   nodeConnPool                  // NODE_ADMIN sessions to peers
	remoteDLQ   chan struct{}                 // bounds the dead-letter copies sent to other brokers at once

	service *consul.Registration // consul.register: this broker's catalog entry

	brokerLn net.Listener
	adminLn  net.Listener
	adminSrv *http.Server
	served   chan struct{}
	env      Env
}

// Env is what a broker takes from the machine it runs on, for a caller
// that runs brokers somewhere else: core/sim runs a whole cluster in one
// process on a simulated network. The zero value is the real machine.
type Env struct {
	// Listen opens the client and admin listeners (default net.Listen).
	// The inter-broker transport is chosen by transport.backend.
	Listen func(network, addr string) (net.Listener, error)
}

// Start opens everything and starts serving: the admin listener first
// (so /healthz answers and /readyz says "recovering" during recovery),
// then recovery, then the broker listener. It returns once clients can
// connect.
func Start(cfg *config.Config, log *slog.Logger) (*Broker, error) {
	return StartIn(Env{}, cfg, log)
}

// StartIn is Start in env.
func StartIn(env Env, cfg *config.Config, log *slog.Logger) (*Broker, error) {
	if env.Listen == nil {
		env.Listen = net.Listen
	}
	b := &Broker{cfg: cfg, log: log, registry: newMetricsRegistry(), served: make(chan struct{}),
		remoteDLQ: make(chan struct{}, remoteDeadLetterConcurrency), env: env}
	b.aclDenied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_permission_denied_total",
		Help: "Operations refused because the user's permissions do not allow them, by action (declare, publish, consume)."}, []string{"action"})
	b.registry.MustRegister(b.aclDenied)
	ok := false
	defer func() {
		if !ok {
			b.closeAll()
		}
	}()
	dataDir := cfg.Server.DataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("server.data_dir %s: %w", dataDir, err)
	}
	if err := checkDataFormat(dataDir, log); err != nil {
		return nil, err
	}
	var err error
	if b.ownerID, err = loadOwnerID(filepath.Join(dataDir, "owner_id")); err != nil {
		return nil, err
	}
	b.log = log.With("owner_id", b.ownerID.String())
	seed := settings.Seed(cfg.RuntimeSeed, config.DefaultRuntime())
	if b.settings, err = settings.Open(filepath.Join(dataDir, "runtime-settings.json"), seed); err != nil {
		return nil, err
	}
	if err := b.openSecurity(); err != nil {
		return nil, err
	}
	if err := b.startAdmin(); err != nil {
		return nil, err
	}
	// The client listener is bound before joining the cluster, so that
	// the advertised address carries the real port (bind port 0 in tests).
	if b.brokerLn, err = b.env.Listen("tcp", cfg.Broker.Listener.Bind); err != nil {
		return nil, fmt.Errorf("broker.listener.bind %s: %w", cfg.Broker.Listener.Bind, err)
	}
	if !cfg.Coordination.Standalone() {
		if err := b.startCluster(); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(context.Background(), clusterJoinTimeout)
		err := b.restoreClusterMetadata(rctx)
		cancel()
		if err != nil {
			return nil, err
		}
		if err := b.shareStores(); err != nil {
			return nil, err
		}
	}
	if err := b.openQueues(); err != nil {
		return nil, err
	}
	if err := b.startSessions(); err != nil {
		return nil, err
	}
	if b.cluster != nil {
		b.cluster.cl.SetLabelSource(b.heartbeatLabels) // published with the heartbeat
		b.sessions.OnCohortChange(b.cluster.cohortsChanged)
		b.cluster.start() // readiness follows the cluster lease
	} else {
		b.admin.SetReady()
	}
	if err := b.registerService(); err != nil {
		return nil, err
	}
	ok = true
	bi := buildinfo.Get()
	b.log.Info("broker ready", "broker", b.brokerLn.Addr().String(), "admin", b.adminLn.Addr().String(),
		"data_dir", dataDir, "fsync", cfg.Storage.Fsync, "tls", b.tls != nil,
		"version", bi.Version, "revision", bi.ShortRevision(), "go_version", bi.GoVersion)
	return b, nil
}

// BrokerAddr is the address the client listener is bound to.
func (b *Broker) BrokerAddr() net.Addr { return b.brokerLn.Addr() }

// AdminAddr is the address the admin listener is bound to.
func (b *Broker) AdminAddr() net.Addr { return b.adminLn.Addr() }

// Run serves until ctx ends, then shuts down gracefully.
func (b *Broker) Run(ctx context.Context) error {
	<-ctx.Done()
	return b.Shutdown()
}

// Shutdown stops the broker: /readyz turns false, the client listener
// closes, every live client gets GOING_AWAY, in-flight confirms are
// answered, logs are flushed and fsynced, and the admin listener closes
// last. Calls after the first return the first one's result.
func (b *Broker) Shutdown() error {
	b.shutdownOnce.Do(func() { b.shutdownErr = b.shutdown() })
	return b.shutdownErr
}

func (b *Broker) shutdown() error {
	b.admin.SetNotReady("shutting down")
	b.log.Info("shutting down")
	b.deregisterService()
	_ = b.brokerLn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	grace := time.Duration(0)
	b.sessions.Shutdown(ctx, grace, "broker shutting down")
	b.closeTransport()
	if b.cluster != nil {
		b.cluster.close()
		b.cluster = nil
	}
	b.adminQueues.Store(nil)
	err := b.queues.Close()
	b.queues = nil
	var werr error
	if b.wal != nil { // after every partition: it frees the WAL for a clean start
		werr = b.wal.Close()
		b.wal = nil
	}
	b.closeAll()
	if err != nil {
		return fmt.Errorf("closing queues: %w", err)
	}
	if werr != nil {
		return fmt.Errorf("closing the write-ahead log: %w", werr)
	}
	b.log.Info("shutdown complete")
	return nil
}

// closeAll releases whatever was opened (also on a failed Start).
func (b *Broker) closeAll() {
	b.deregisterService()
	if b.brokerLn != nil {
		_ = b.brokerLn.Close()
	}
	b.closeTransport()
	if b.cluster != nil {
		b.cluster.close()
		b.cluster = nil
	}
	if b.queues != nil {
		_ = b.queues.Close()
	}
	if b.wal != nil {
		_ = b.wal.Close()
	}
	if b.adminSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = b.adminSrv.Shutdown(ctx)
		cancel()
	}
}

// openSecurity loads TLS material, the user store (seeding it while empty,
// S-147) and the authenticator, and logs the startup warnings of S-148 and
// the default-login-behind-a-proxy case.
func (b *Broker) openSecurity() error {
	cfg := b.cfg
	var err error
	b.tls, err = tlsconf.Load(tlsconf.Options{TLS: cfg.TLS, DataDir: cfg.Server.DataDir,
		Hosts: advertiseHosts(cfg), Logger: b.log})
	if err != nil {
		return err
	}
	if b.tls != nil {
		b.registry.MustRegister(b.tls.Collector()) // fibril_tls_cert_not_after_timestamp_seconds{cert="server"}
	}
	// Resolved once: the authenticator (@node logins) and the coordination
	// backend both use it.
	if b.secret, b.secretOrigin, err = auth.ResolveClusterSecret(*cfg); err != nil {
		return err
	}
	if b.users, err = auth.OpenStore(filepath.Join(cfg.Server.DataDir, auth.StoreFile)); err != nil {
		return err
	}
	if n, err := b.users.Seed(cfg.Auth.Seeds()); err != nil {
		return fmt.Errorf("auth.seed_users: %w", err)
	} else if n > 0 {
		b.log.Info("seeded users", "count", n)
	}
	for _, w := range auth.StartupWarnings(*cfg, b.users) {
		b.log.Warn(w)
	}
	return nil
}

func (b *Broker) openQueues() error {
	cfg := b.cfg
	policy, err := storage.ParseFsyncPolicy(cfg.Storage.Fsync)
	if err != nil {
		return err
	}
	if policy == storage.FsyncAlways && cfg.Storage.WAL {
		// Before any partition opens: recovery writes back what the
		// partitions' logs lost (core/storage/README.md#write-ahead-log).
		b.wal, err = storage.OpenWAL(cfg.Server.DataDir, storage.WALOptions{
			FileBytes: cfg.Storage.WALFileBytes,
			Files:     int(cfg.Storage.WALFiles),
			Logger:    b.log,
		})
		if err != nil {
			return fmt.Errorf("storage.wal: %w", err)
		}
	}
	b.queues, err = queue.Open(queue.Options{
		Dir: filepath.Join(cfg.Server.DataDir, "queues"),
		Storage: storage.Options{
			Fsync:           policy,
			FsyncInterval:   time.Duration(cfg.Storage.FsyncIntervalMS) * time.Millisecond,
			SegmentMaxBytes: cfg.Storage.SegmentMaxBytes,
			Logger:          b.log,
			WAL:             b.wal,
		},
		Settings:   b.queueSettings,
		AutoCreate: cfg.Coordination.Standalone(), // standalone: created on first use (S-21); a cluster serves only what was declared
		// In a cluster only owned partitions are loaded (S-138): the
		// catalog follower opens them, the rest stay closed on disk.
		LazyPartitions: !cfg.Coordination.Standalone(),
		Holds: func() func(queue.Key, uint32) (uint64, bool) {
			if b.cluster == nil {
				return nil
			}
			return b.cluster.holdOf
		}(),
		DeadLetterPartition: func() func(queue.Key) (uint32, error) {
			if b.cluster == nil {
				return nil
			}
			return b.cluster.deadLetterPartition
		}(),
		RemoteDeadLetter: func() func(queue.Key, *queue.Message, func(bool)) {
			if b.cluster == nil {
				return nil
			}
			return b.remoteDeadLetter
		}(),
		MaxMessageBytes: int(cfg.Broker.MaxMessageBytes),
		Logger:          b.log,
		Gates: func() func(queue.Gated) queue.ConfirmGate {
			if b.cluster == nil {
				return nil
			}
			return b.cluster.gates.attach
		}(),
	})
	if err != nil {
		return err
	}
	if b.cluster != nil {
		b.cluster.router.Queues = b.queues // the engine opens after the cluster is joined
	}
	for _, q := range b.queues.Quarantined() {
		b.log.Error("partition quarantined; it answers errors until repaired", "queue", q.Key.String(), "partition", q.Partition, "err", q.Err)
	}
	registerEngineMetrics(b.registry, b.queues)
	b.disk = newDiskGuard(b.cfg.Server.DataDir, b.cfg.Storage.MinFreeBytes)
	registerDiskMetrics(b.registry, b.disk, b.queues)
	registerLatencies(b.registry, b.queues)
	if b.cfg.Admin.MetricsPerChannel {
		b.registry.MustRegister(newChannelCollector(b.queues))
	}
	return nil
}

func (b *Broker) queueSettings() queue.Settings {
	d := b.settings.Current()
	return queue.Settings{
		InflightTTL:           settings.Ms(d.Delivery.InflightTTLMS),
		ExpiryPollMin:         settings.Ms(d.Delivery.ExpiryPollMinMS),
		ExpiryBatchMax:        int(d.Delivery.ExpiryBatchMax),
		DefaultPartitionCount: uint32(d.Partitioning.DefaultPartitionCount),
	}
}

func (b *Broker) sessionSettings() session.Settings {
	d := b.settings.Current()
	r := d.Routing
	return session.Settings{
		ReconnectGrace: settings.Ms(d.Connection.ReconnectGraceMS),
		RestartTTL:     settings.Ms(d.Connection.ResumeSessionRestartTTLMS),
		Forwarding: forward.Limits{
			MaxUpstreams:            int(r.MaxUpstreamSessions),
			MaxUpstreamsPerOwner:    int(r.MaxUpstreamSessionsPerOwner),
			ForwardTimeout:          settings.Ms(r.ForwardTimeoutMS),
			UpstreamConnectTimeout:  settings.Ms(r.UpstreamConnectTimeoutMS),
			UpstreamIdleClose:       settings.Ms(r.UpstreamIdleCloseMS),
			MaxInflightForwardBytes: r.MaxInflightForwardBytes,
			ResumeWithin:            settings.Ms(d.Connection.ReconnectGraceMS),
		},
	}
}

func (b *Broker) startAdmin() error {
	cfg := b.cfg
	b.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	pw, err := adminPassword(cfg.Admin.Auth)
	if err != nil {
		return err
	}
	b.adminUsers.Store(b.users)
	b.adminSettings.Store(b.settings)
	opts := admin.Options{Gatherer: b.registry, Users: userAdmin{&b.adminUsers, b.requireFeature}, Logger: b.log,
		Settings: b.adminSettings.Load, Topology: b.topologyView, Drain: b.drain, Undrain: b.undrain, Peers: b.probePeers, Queues: queueAdmin{b}, ReloadTLS: b.ReloadTLS,
		LogLevel: b.logLevel, RaftMembers: b.raftMembers, RaftChange: b.raftChange, Backup: b.Backup,
		Overview: b.overview,
		Connections: func() any {
			if s := b.adminSessions.Load(); s != nil {
				return s.Connections()
			}
			return []session.ConnInfo{}
		}}
	if cfg.Admin.Auth.Enabled {
		opts.Username, opts.Password = cfg.Admin.Auth.Username, pw
	}
	b.admin = admin.New(opts)
	if b.adminLn, err = b.env.Listen("tcp", cfg.Admin.Listener.Bind); err != nil {
		return fmt.Errorf("admin.listener.bind %s: %w", cfg.Admin.Listener.Bind, err)
	}
	b.adminSrv = &http.Server{Handler: b.admin, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(b.log.Handler(), slog.LevelDebug)}
	ln := b.adminLn
	if tc := b.tls.AdminConfig(); tc != nil {
		b.adminSrv.TLSConfig = tc
		go func() { _ = b.adminSrv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = b.adminSrv.Serve(ln) }()
	}
	return nil
}

func (b *Broker) startSessions() error {
	cfg := b.cfg
	var err error
	authn := auth.NewAuthenticator(auth.Options{Store: b.users, ClusterSecret: b.secret,
		AllowDefaultLoopback: cfg.Auth.AllowDefaultLoopback})
	adv, err := b.advertised()
	if err != nil {
		return err
	}
	var router session.Router
	if b.cluster != nil {
		router = b.cluster.router
	}
	var nodeIdentity func(net.Conn) (string, error)
	if b.peer != nil {
		nodeIdentity = b.nodeIdentity
	}
	var upstreams forward.Dialer
	var repl session.Replication
	if b.cluster != nil && b.links != nil {
		upstreams = b.dialer()
		repl = b.cluster.replicationSource()
	}
	b.sessions, err = session.New(session.Options{
		Queues:          b.queues,
		Router:          router,
		Auth:            authAdapter{authn},
		CertAuth:        certAdapter(authn),
		Authorize:       b.authorize,
		NodeIdentity:    nodeIdentity,
		NodeID:          string(b.nodeID),
		Upstreams:       upstreams,
		Replication:     repl,
		NodeAdmin:       b.nodeAdmin,
		OwnerID:         b.ownerID,
		SkeletonDir:     filepath.Join(cfg.Server.DataDir, "sessions"),
		Settings:        b.sessionSettings,
		MaxFrameBytes:   uint32(min(cfg.Broker.MaxFrameBytes, int64(^uint32(0)))),
		MaxMessageBytes: int(cfg.Broker.MaxMessageBytes),
		Advertise:       adv,
		Logger:          b.log,
		Metrics:         session.NewMetrics(b.registry),
	})
	if err != nil {
		return err
	}
	forward.RegisterUpstreamSessions(b.registry, b.sessions.Gateway(), cfg.Admin.MetricsPerChannel)
	b.adminSessions.Store(b.sessions)
	b.adminQueues.Store(b.queues)
	go b.acceptLoop()
	// Both end with the client listener (b.served), at shutdown.
	go applyLimits(b.settings, b.queues, b.served)
	go b.watchDisk(b.disk, b.queues, b.served)
	if b.transport != nil {
		b.peerAccepted = make(chan struct{})
		go b.peerAcceptLoop(b.transport, b.peerAccepted)
	}
	return nil
}

// advertised returns the client-facing endpoints of this broker: the
// configured advertise list, else the address the client listener is
// bound to (S-121).
func (b *Broker) advertised() ([]wire.AdvertisedAddress, error) {
	cfg := b.cfg
	list := cfg.Broker.Listener.Advertise
	if len(list) == 0 {
		list = []string{b.brokerLn.Addr().String()}
	}
	out := make([]wire.AdvertisedAddress, 0, len(list))
	for _, a := range list {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("broker.listener.advertise %q: %w", a, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("broker.listener.advertise %q: bad port", a)
		}
		if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
			host = "[" + host + "]" // docs/protocol.md#endpoints: bracketed IPv6 literal
		}
		out = append(out, wire.AdvertisedAddress{Host: host, Port: uint16(p)})
	}
	return out, nil
}

func advertiseHosts(cfg *config.Config) []string {
	var hosts []string
	for _, a := range cfg.Broker.Listener.Advertise {
		if h, _, err := net.SplitHostPort(a); err == nil {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func adminPassword(a config.AdminAuth) (string, error) {
	if !a.Enabled {
		return "", nil
	}
	if a.Password.IsSet() {
		return a.Password.Reveal(), nil
	}
	b, err := os.ReadFile(a.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("admin.auth.password_file: %w", err)
	}
	pw := string(trimNewline(b))
	if pw == "" {
		return "", errors.New("admin.auth.password_file is empty")
	}
	return pw, nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
