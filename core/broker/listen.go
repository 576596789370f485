package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/admin"
	"github.com/fibrilgo/fibril/core/auth"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/core/wire"
)

// sniffTimeout is how long an accepted socket has to show its first frame
// header (docs/protocol.md#transport, S-14).
const sniffTimeout = 10 * time.Second

// acceptLoop accepts client sockets and classifies each by its first
// bytes (docs/protocol.md#transport, S-151) in its own goroutine, so a slow client never
// holds up the next accept.
func (b *Broker) acceptLoop() {
	defer close(b.served)
	for {
		nc, err := b.brokerLn.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			b.log.Error("accept failed; client listener stopped", "err", err)
			return
		}
		go b.prepare(nc)
	}
}

// prepare sniffs one socket and hands it to the session server: TLS
// ClientHello → handshake (TLS listener) or close (plaintext listener);
// plaintext frame → serve (plaintext listener) or one plaintext ERROR 426
// echoing the HELLO's request id, then close (TLS listener); anything
// else → close without a word.
func (b *Broker) prepare(nc net.Conn) {
	kind, prefix, _ := tlsconf.Sniff(nc, sniffTimeout)
	conn := tlsconf.Replay(nc, prefix)
	tlsOn := b.tls != nil
	switch {
	case kind == tlsconf.SniffTLS && tlsOn:
		tc := tls.Server(conn, b.serverTLS())
		ctx, cancel := context.WithTimeout(context.Background(), sniffTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			b.log.Debug("TLS handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
			_ = nc.Close()
			return
		}
		b.sessions.ServeConn(tc)
	case kind == tlsconf.SniffPlaintext && !tlsOn:
		b.sessions.ServeConn(conn)
	case kind == tlsconf.SniffPlaintext && tlsOn:
		id, _ := tlsconf.PlaintextOnTLSRequestID(prefix)
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(wire.AppendFrame(nil, wire.OpError, id, &wire.ErrorBody{Code: wire.CodeTLSRequired,
			Message: "this broker requires TLS"}))
		_ = nc.Close()
	default:
		_ = nc.Close()
	}
}

// authAdapter presents auth.Authenticator to the session layer.
type authAdapter struct{ a *auth.Authenticator }

func (x authAdapter) Authenticate(ctx context.Context, user, pw string, peer netip.Addr) (session.Principal, error) {
	p, err := x.a.Check(ctx, user, pw, peer)
	if err != nil {
		return session.Principal{}, err
	}
	return session.Principal{Name: p.Name, Node: p.Node, Method: p.Method}, nil
}

// certAdapter maps a verified client certificate to a stored user (S-154).
func certAdapter(a *auth.Authenticator) session.CertAuthenticator {
	return func(st tls.ConnectionState) (session.Principal, bool) {
		if len(st.PeerCertificates) > 0 && tlsconf.CertNodeID(st.PeerCertificates[0]) != "" {
			return session.Principal{}, false // a peer certificate never logs in as a user
		}
		id := tlsconf.PeerIdentity(st)
		if id == "" {
			return session.Principal{}, false
		}
		p, ok := a.CheckCertificate(id)
		return session.Principal{Name: p.Name, Node: p.Node, Method: p.Method}, ok
	}
}

// userAdmin presents the user store to the admin API.
// It reads the store through a pointer because coordinated mode swaps the
// local store for the cluster's shared one during Start.
type userAdmin struct {
	s *atomic.Pointer[auth.Store]
	// gate refuses a feature not every member of the cluster supports
	// (Broker.requireFeature).
	gate func(feature string) error
}

func (u userAdmin) Add(name, pw string) error { return u.s.Load().Add(name, pw) }
func (u userAdmin) Remove(name string) error  { return u.s.Load().Remove(name) }
func (u userAdmin) SetPassword(name, pw string) error {
	return u.s.Load().SetPassword(name, pw)
}
func (u userAdmin) List() []admin.UserInfo {
	var out []admin.UserInfo
	for _, x := range u.s.Load().List() {
		ui := admin.UserInfo{Name: x.Name, Created: x.Created}
		if x.Permissions != nil {
			ui.Permissions = []admin.Permission{}
			for _, p := range x.Permissions {
				ap := admin.Permission{Topics: p.Topics}
				for _, a := range p.Actions {
					ap.Actions = append(ap.Actions, string(a))
				}
				ui.Permissions = append(ui.Permissions, ap)
			}
		}
		out = append(out, ui)
	}
	return out
}

// loadOwnerID returns this broker instance's persisted owner id
// (docs/protocol.md#resume), minting it on first boot. Persisting it is what lets a broker
// restarted in place answer `resumed_after_restart`.
func loadOwnerID(path string) (wire.UUID, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		id, perr := wire.ParseUUID(strings.TrimSpace(string(b)))
		if perr != nil {
			return id, fmt.Errorf("%s: %w", path, perr)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return wire.UUID{}, err
	}
	var id wire.UUID
	_, _ = rand.Read(id[:])
	id[6] = 0x40 | id[6]&0x0f
	id[8] = 0x80 | id[8]&0x3f
	return id, writeFileSync(path, []byte(id.String()+"\n"))
}

// writeFileSync writes a small file crash-safely enough for an id that is
// generated once: a temp file, fsynced, renamed into place.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if f, err := os.Open(tmp); err == nil {
		_ = f.Sync()
		f.Close()
	}
	return os.Rename(tmp, path)
}

// registerEngineMetrics exports the queue engine's and the storage's
// process-lifetime counters (S-163 names).
func registerEngineMetrics(reg prometheus.Registerer, qm *queue.Manager) {
	counter := func(name, help string, get func(queue.Stats) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(get(qm.Stats())) }))
	}
	counter("fibril_broker_published_total", "Messages stored (confirmed or not).", func(s queue.Stats) uint64 { return s.Published })
	counter("fibril_broker_delivered_total", "Deliveries handed to subscriptions, redeliveries included.", func(s queue.Stats) uint64 { return s.Delivered })
	counter("fibril_broker_acked_total", "Deliveries settled by ACK (or auto-ack).", func(s queue.Stats) uint64 { return s.Acked })
	counter("fibril_broker_redelivered_total", "Deliveries of a message that had been delivered before.", func(s queue.Stats) uint64 { return s.Redelivered })
	counter("fibril_broker_expired_total", "Messages removed because their TTL passed.", func(s queue.Stats) uint64 { return s.Expired })
	counter("fibril_broker_dead_lettered_total", "Messages moved to a dead-letter queue.", func(s queue.Stats) uint64 { return s.DeadLettered })
	counter("fibril_broker_discarded_total", "Messages dropped by a discard DLQ policy.", func(s queue.Stats) uint64 { return s.Discarded })
	counter("fibril_stream_published_total", "Records appended to streams (confirmed or not).", func(s queue.Stats) uint64 { return s.StreamPublished })
	counter("fibril_stream_delivered_total", "Stream records handed to subscriptions (each subscription counts its own).", func(s queue.Stats) uint64 { return s.StreamDelivered })
	counter("fibril_stream_cursor_commits_total", "Durable stream cursor commits (manual acks and auto-ack advances).", func(s queue.Stats) uint64 { return s.CursorCommits })
	storageCounter := func(name, help string, get func(storage.Counters) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(get(storage.Stats())) }))
	}
	storageCounter("fibril_storage_fsyncs_total", "fsyncs of segment, journal and write-ahead log files (directories not counted).", func(c storage.Counters) uint64 { return c.Fsyncs })
	storageCounter("fibril_storage_bytes_written_total", "Bytes written to segment, journal and write-ahead log files.", func(c storage.Counters) uint64 { return c.BytesWritten })
	storageCounter("fibril_storage_appends_total", "Records appended to partition logs.", func(c storage.Counters) uint64 { return c.Appends })
	storageCounter("fibril_storage_wal_commits_total", "Partition commits made durable through the write-ahead log (the others fsynced their own segment).", func(c storage.Counters) uint64 { return c.WALCommits })
	storageCounter("fibril_storage_wal_rounds_total", "Write-ahead log rounds (one write and one fsync each); commits per round is how many partitions shared an fsync.", func(c storage.Counters) uint64 { return c.WALRounds })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_recovery_quarantined",
		Help: "Partitions quarantined by recovery (they answer errors until repaired)."},
		func() float64 { return float64(len(qm.Quarantined())) }))
}

// channelCollector exports the per-queue series of S-164 (with
// admin.metrics_per_channel): each partition's ready and in-flight counts,
// read from the engine at scrape time, so an idle broker keeps no
// per-series state and a deleted queue leaves no stale series.
type channelCollector struct {
	qm              *queue.Manager
	ready, inflight *prometheus.Desc
}

func newChannelCollector(qm *queue.Manager) *channelCollector {
	labels := []string{"topic", "group", "partition"}
	return &channelCollector{
		qm: qm,
		ready: prometheus.NewDesc("fibril_queue_ready",
			"Messages ready for delivery in a queue partition (not in flight, not delayed).", labels, nil),
		inflight: prometheus.NewDesc("fibril_queue_inflight",
			"Messages delivered and not yet settled in a queue partition.", labels, nil),
	}
}

func (c *channelCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.inflight
}

func (c *channelCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.qm.Depths() {
		group, _ := d.Key.Group.Get()
		part := strconv.FormatUint(uint64(d.Partition), 10)
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(d.Ready), d.Key.Topic, group, part)
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(d.Inflight), d.Key.Topic, group, part)
	}
}

// metricsRegistry is the broker's Prometheus registry. It remembers every
// collector registered, so a test can list every series the broker can
// export — vectors included, which Gather omits until they have a child.
type metricsRegistry struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func newMetricsRegistry() *metricsRegistry {
	return &metricsRegistry{Registry: prometheus.NewRegistry()}
}

// Register records c too: plugins and transports register with Register
// so that a second instance on one registry is not fatal.
func (r *metricsRegistry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *metricsRegistry) MustRegister(cs ...prometheus.Collector) {
	r.Registry.MustRegister(cs...)
	r.collectors = append(r.collectors, cs...)
}

// authorize is session.Options.Authorize: the user store's permission
// list of user (docs/admin.md#permissions). A user the store does not
// know (the built-in loopback login, a certificate's user not stored) has
// no list, so nothing is limited for it.
func (b *Broker) authorize(user, action, topic string) error {
	s := b.adminUsers.Load()
	if s == nil {
		return nil
	}
	ps, _ := s.Permissions(user)
	if ps.Allows(auth.Action(action), topic) {
		return nil
	}
	b.aclDenied.WithLabelValues(action).Inc()
	return auth.Denied(user, auth.Action(action), topic)
}

// SetPermissions is the permissions API (PUT
// /admin/api/users/{name}/permissions); nil clears the list.
func (u userAdmin) SetPermissions(name string, ps []admin.Permission) error {
	var list auth.Permissions
	if ps != nil {
		list = make(auth.Permissions, 0, len(ps))
		for _, p := range ps {
			ap := auth.Permission{Topics: p.Topics}
			for _, a := range p.Actions {
				ap.Actions = append(ap.Actions, auth.Action(a))
			}
			list = append(list, ap)
		}
	}
	if list != nil {
		if err := u.gate(featurePermissions); err != nil {
			return err
		}
	}
	return u.s.Load().SetPermissions(name, list)
}

// The features of shared state this build supports, announced in
// core.LabelFeatures.
const featurePermissions = "permissions"

var sharedFeatures = []string{featurePermissions}

// requireFeature refuses (409) a feature that a member of the cluster
// does not announce: a broker of an older build is still running, or was
// last seen running, and could not read the shared state the feature
// writes. Standalone there is nothing to wait for.
func (b *Broker) requireFeature(feature string) error {
	c := b.adminCluster.Load()
	if c == nil {
		return nil
	}
	snap := c.cl.Snapshot()
	var missing []string
	for _, id := range snap.MemberIDs {
		if !slices.Contains(strings.Split(snap.Members[id].Info.Labels[core.LabelFeatures], ","), feature) {
			missing = append(missing, string(id))
		}
	}
	if len(missing) > 0 {
		return core.Errorf(core.ErrConflict, "%s cannot be used yet: broker(s) %s run a build without it (upgrade them first, or remove those that are gone for good)",
			feature, strings.Join(missing, ", "))
	}
	return nil
}
