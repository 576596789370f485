package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/peer"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
)

// The peer side of a broker in a cluster: where peers reach it, the
// inter-broker transport that listens there and dials them, and the rule
// that an @node login over it carries a verified peer certificate.

// peerPlan is where the transport listens and what peers are told.
type peerPlan struct {
	// bind is TransportEnv.Bind: "" when the transport shares the client
	// listener (tcp without broker.peer_listener.bind).
	bind string
	// shared: peers connect to the client listener, which then takes the
	// peer TLS handshake too (tlsconf.Peer.SharedConfig).
	shared bool
}

// planPeers derives the peer listener: broker.peer_listener.bind
// when set; otherwise, with tcp, the client listener itself (one port for
// clients and peers); with quic a UDP socket on the client listener's
// address and port number (it does not collide with the TCP one); an
// external transport needs broker.peer_listener.bind (it may run over TCP,
// and only the operator knows a free port for it).
func (b *Broker) planPeers() (peerPlan, error) {
	cfg := b.cfg
	if bind := cfg.Broker.PeerListener.Bind; bind != "" {
		return peerPlan{bind: bind}, nil
	}
	if cfg.Transport.Backend == "tcp" {
		if cfg.TLS.InterBroker != cfg.TLS.Enabled {
			return peerPlan{}, fmt.Errorf("tls.inter_broker (%t) must equal tls.enabled (%t) while clients and peers share the client port: set both alike, or give peers their own port with broker.peer_listener.bind",
				cfg.TLS.InterBroker, cfg.TLS.Enabled)
		}
		return peerPlan{shared: true}, nil
	}
	if cfg.Transport.Backend != "quic" {
		return peerPlan{}, fmt.Errorf("transport.backend = %q (an external transport) needs broker.peer_listener.bind: the address its peer listener binds (port 0 picks a free one, which peers learn from the cluster)", cfg.Transport.Backend)
	}
	return peerPlan{bind: b.brokerLn.Addr().String()}, nil
}

// peerAdvertise is where peers reach this broker: broker.peer_advertise;
// else, when peers share the client port, the first client advertise
// entry, then the client listener's address (core/routing/README.md#gateway-set); else that host
// with the peer listener's port.
func (b *Broker) peerAdvertise() string {
	cfg := b.cfg
	if a := cfg.Broker.PeerAdvertise; a != "" {
		return a
	}
	client := b.brokerLn.Addr().String()
	if len(cfg.Broker.Listener.Advertise) > 0 {
		client = cfg.Broker.Listener.Advertise[0]
	}
	if b.transport == nil || b.transport.Addr() == nil {
		return client
	}
	host, _, err := net.SplitHostPort(client)
	if err != nil {
		return client
	}
	_, port, err := net.SplitHostPort(b.transport.Addr().String())
	if err != nil {
		return client
	}
	return net.JoinHostPort(host, port)
}

// checkPeerAddr refuses a peer address other brokers could not dial: an
// unspecified host, or a loopback host while the coordination peers are
// not on loopback.
func checkPeerAddr(addr string, cfg *config.Config) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("broker.peer_advertise: %q is not host:port: %w", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("broker.peer_advertise: %q has no usable port", addr)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil // a host name: resolved by the peers that dial it
	}
	if ip.IsUnspecified() {
		return fmt.Errorf("broker.peer_advertise: the peer address %s is unspecified (%s), which no peer can dial; set broker.peer_advertise (FIBRIL_BROKER_PEER_ADVERTISE) to an address other brokers reach, or broker.listener.advertise", addr, host)
	}
	if ip.IsLoopback() {
		for _, other := range coordinationPeerHosts(cfg) {
			if oip, err := netip.ParseAddr(other); err != nil || !oip.IsLoopback() {
				return fmt.Errorf("broker.peer_advertise: the peer address %s is loopback but coordination peers are not (%s); set broker.peer_advertise to an address other brokers reach", addr, other)
			}
		}
	}
	return nil
}

// coordinationPeerHosts are the hosts of the other coordination members
// this node was configured with (raft peers and advertise).
func coordinationPeerHosts(cfg *config.Config) []string {
	var hosts []string
	add := func(a string) {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			hosts = append(hosts, h)
		}
	}
	if cfg.Coordination.Backend == "raft" {
		add(cfg.Coordination.Raft.Advertise)
		if peers, err := cfg.Coordination.Raft.ParsedPeers(); err == nil {
			for _, p := range peers {
				add(p.Addr)
			}
		}
	}
	return hosts
}

// loadPeerTLS loads the inter-broker TLS material when tls.inter_broker is
// on (nil otherwise): the operator's files (tls.peer_ca_path as the CA
// bundle, tls.cert_path/key_path as this node's pair), or with
// tls.auto_self_signed the shared cluster CA at tls.peer_ca_path, from
// which this node mints its own certificate (SAN urn:fibril:node:<id>) into
// <data_dir>/tls/peer.
func (b *Broker) loadPeerTLS(id core.NodeID) (*tlsconf.Peer, error) {
	t := b.cfg.TLS
	if !t.InterBroker {
		if b.cfg.Transport.Backend == "quic" {
			return nil, errors.New("transport.backend = quic needs inter-broker TLS (QUIC always encrypts and peers authenticate by certificate): set tls.inter_broker = true with tls.peer_ca_path, and tls.cert_path/tls.key_path or tls.auto_self_signed")
		}
		return nil, nil
	}
	if t.PeerCAPath == "" {
		return nil, errors.New("tls.inter_broker needs tls.peer_ca_path: the CA peers are verified against (with tls.auto_self_signed: the cluster CA file every node shares)")
	}
	opts := tlsconf.PeerOptions{NodeID: string(id), Logger: b.log}
	if t.AutoSelfSigned {
		opts.ClusterCAPath, opts.Dir = t.PeerCAPath, filepath.Join(b.cfg.Server.DataDir, "tls", "peer")
	} else {
		opts.CAFile, opts.CertFile, opts.KeyFile = t.PeerCAPath, t.CertPath, t.KeyPath
	}
	return tlsconf.LoadPeer(opts)
}

// peerFiles hands peer material to plugins (nil when there is none).
func peerFiles(p *tlsconf.Peer) *plugins.PeerTLS {
	if p == nil {
		return nil
	}
	f := p.Files()
	return &plugins.PeerTLS{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}
}

// openTransport opens transport.backend on the planned listener. It runs
// before the node registers, so that peers never see an address nobody
// listens on.
func (b *Broker) openTransport(ctx context.Context, id core.NodeID, catalog *host.Catalog) error {
	cfg := b.cfg
	plan, err := b.planPeers()
	if err != nil {
		return err
	}
	b.peerShared = plan.shared
	dir := filepath.Join(cfg.Server.DataDir, "transport", cfg.Transport.Backend)
	tr, err := host.OpenTransport(ctx, cfg.Transport.Backend, plugins.TransportEnv{
		NodeID: id, Bind: plan.bind, PeerTLS: peerFiles(b.peer), Config: transportConfig(cfg), DataDir: dir,
		Logger: b.log.With("component", "transport"), Registerer: b.registry,
	}, catalog, b.log.With("component", "plugins"), host.WithRegisterer(b.registry))
	if err != nil {
		where := "broker.peer_listener.bind"
		if plan.bind == "" {
			where = "the client listener"
		}
		return fmt.Errorf("transport.backend %s (listening on %s %s): %w", cfg.Transport.Backend, where, plan.bind, err)
	}
	b.transport = tr
	b.links = peer.NewLinks(tr)
	if err := checkPeerAddr(b.peerAdvertise(), cfg); err != nil {
		return err
	}
	return nil
}

// transportConfig hands a transport its keys as strings.
func transportConfig(cfg *config.Config) map[string]string {
	q := cfg.Transport.QUIC
	return map[string]string{
		"transport.quic.max_incoming_streams":        strconv.FormatInt(q.MaxIncomingStreams, 10),
		"transport.quic.stream_receive_window_bytes": strconv.FormatInt(q.StreamReceiveWindowBytes, 10),
		"transport.quic.max_idle_timeout_ms":         strconv.FormatInt(q.MaxIdleTimeoutMS, 10),
	}
}

// peerAcceptLoop serves every stream a peer opens over the transport's own
// listener like a client connection; the session layer then requires AUTH
// as @node for anything node-only.
func (b *Broker) peerAcceptLoop(tr core.Transport, done chan<- struct{}) {
	defer close(done)
	for {
		s, err := tr.Accept(context.Background())
		if err != nil {
			if !errors.Is(err, core.ErrClosed) {
				b.log.Error("peer transport stopped accepting", "err", err)
			}
			return
		}
		go b.sessions.ServeConn(s)
	}
}

// nodeIdentity is session.Options.NodeIdentity while inter-broker TLS is
// on: the node an @node connection's verified peer certificate names. A
// transport stream carries the identity its handshake verified; a client
// listener connection (peers sharing the port) is verified here against
// the peer CA.
func (b *Broker) nodeIdentity(nc net.Conn) (string, error) {
	if s, ok := nc.(core.Stream); ok && s.PeerNode() != "" {
		return string(s.PeerNode()), nil
	}
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return "", errors.New("@node must connect over TLS with a peer certificate (tls.peer_ca_path)")
	}
	id, err := b.peer.VerifyNode(tc.ConnectionState())
	if err != nil {
		return "", fmt.Errorf("@node needs a peer certificate: %w", err)
	}
	if b.cluster != nil && !b.cluster.isMember(core.NodeID(id)) {
		return "", fmt.Errorf("the peer certificate names node %q, which is not a member of this cluster", id)
	}
	return id, nil
}

// peerProbeConcurrency bounds the probes one GET /admin/api/peers runs at once.
const peerProbeConcurrency = 8

// probePeers is GET /admin/api/peers: every live peer, probed over the
// transport (stream, @node handshake, one round trip) within the
// connect timeout.
func (b *Broker) probePeers(ctx context.Context) any {
	c := b.adminCluster.Load()
	if c == nil || b.links == nil {
		return nil
	}
	snap := c.cl.Snapshot()
	var peers []core.Peer
	for _, m := range snap.Members {
		if m.Live && m.Info.ID != c.self.ID {
			peers = append(peers, core.Peer{ID: m.Info.ID, Addr: m.Info.PeerAddr})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	up := peer.Login{Self: c.self.ID, Secret: string(b.secret)}
	timeout := time.Duration(b.settings.Current().Routing.UpstreamConnectTimeoutMS) * time.Millisecond
	out := make([]peer.ProbeResult, len(peers))
	sem := make(chan struct{}, peerProbeConcurrency)
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i] = up.Probe(pctx, b.links, p)
		}()
	}
	wg.Wait()
	return map[string]any{"node": c.self.ID, "transport": b.cfg.Transport.Backend, "peer_addr": b.peerAdvertise(), "peers": out}
}

// serverTLS is the client listener's TLS config: with peers sharing the
// port, a ClientHello offering the peer ALPN gets peer mutual TLS
// (tlsconf.Peer.SharedConfig).
func (b *Broker) serverTLS() *tls.Config {
	if b.peerShared && b.peer != nil {
		return b.peer.SharedConfig(b.tls.ServerConfig())
	}
	return b.tls.ServerConfig()
}

// closeTransport stops the peer side: links, the transport (which aborts
// streams peers opened; their sessions end as on a broken socket) and the
// accept loop.
func (b *Broker) closeTransport() {
	b.nodeConns.closeAll()
	if b.links != nil {
		b.links.Close()
	}
	if b.transport != nil {
		_ = b.transport.Close()
		if b.peerAccepted != nil {
			<-b.peerAccepted
		}
		b.transport = nil
	}
}

// isMember reports whether id has ever registered in the cluster.
func (c *coordinated) isMember(id core.NodeID) bool {
	_, ok := c.cl.Snapshot().Members[id]
	return ok
}

// retainLinks drops the peer links of nodes no longer live (run goroutine).
func (c *coordinated) retainLinks(snap *cluster.Snapshot) {
	if c.b.links == nil {
		return
	}
	live := make(map[core.NodeID]bool, len(snap.Members))
	for id, m := range snap.Members {
		live[id] = m.Live
	}
	c.b.links.Retain(live)
}

// noGatewayWarnEvery rate-limits the "no live public broker" warning.
const noGatewayWarnEvery = time.Minute

// warnNoGateway logs, at most once a minute, that no live public broker is
// left: clients then get no endpoints for privately owned partitions
// (core/routing/README.md#gateway-set); and, in the same budget, that another live node shares this
// node's peer address. Run goroutine only.
func (c *coordinated) warnNoGateway(snap *cluster.Snapshot) {
	noGateway := len(snap.Gateways) == 0
	// Peers reach nodes by peer address: two live nodes sharing one (the
	// default behind a load balancer is the balancer's address) would send
	// one node's upstream sessions to the other.
	self := snap.Members[c.self.ID]
	var sharing []*cluster.Member
	for _, m := range snap.LiveNodes() {
		if self != nil && m.Info.ID != c.self.ID && m.Info.PeerAddr == self.Info.PeerAddr {
			sharing = append(sharing, m)
		}
	}
	if !noGateway && len(sharing) == 0 {
		return
	}
	if ok, _ := c.noGatewayWarned.Allow(struct{}{}, time.Now()); !ok {
		return
	}
	if noGateway {
		c.b.log.Warn("no live public broker: clients get no endpoints for privately owned partitions until a public broker is up (and not draining)",
			"live_nodes", len(snap.LiveNodes()))
	}
	for _, m := range sharing {
		c.b.log.Warn("another live node has this node's peer address; set broker.peer_advertise to an address of this node's own (behind a load balancer the default, the first broker.listener.advertise entry, is the balancer's)",
			"peer_addr", self.Info.PeerAddr, "other_node", string(m.Info.ID))
	}
}

// dialer is session.Options.Upstreams: upstream sessions to owners over
// the transport, found in this broker's cluster view.
func (b *Broker) dialer() forward.Dialer {
	c := b.cluster
	return forward.PeerDialer{
		Login: peer.Login{Self: c.self.ID, Secret: string(b.secret)},
		Links: b.links,
		Lookup: func(owner core.NodeID) (core.Peer, bool) {
			m := c.cl.Snapshot().Members[owner]
			if m == nil || !m.Live || m.Info.PeerAddr == "" {
				return core.Peer{}, false
			}
			return core.Peer{ID: owner, Addr: m.Info.PeerAddr}, true
		},
		Logger: b.log,
	}.Dial
}

// heartbeatLabels are the labels this node publishes as they change: its
// topology adoption level (S-120) while a client connection has
// acknowledged one, while non-zero its forwarding
// session counts (core/forward/README.md#observability), and on a private
// broker while routing.expose_private_endpoints is on its client
// addresses (core/routing/README.md#private-endpoints).
func (b *Broker) heartbeatLabels() core.Labels {
	// Every key is listed, "" for none: a key left out keeps the value
	// published last, and a level left behind by clients that went away
	// would hold the cluster's floor (and each finalize) back.
	l := core.Labels{core.LabelAdoption: "", core.LabelUpstreamSessions: "", core.LabelForwardedSessions: "",
		core.LabelPrivateAdvertise: b.cluster.privateAdvertiseLabel()}
	if gen, ok := b.sessions.AdoptionLevel(); ok {
		l[core.LabelAdoption] = strconv.FormatUint(gen, 10)
	}
	up, fwd := b.sessions.ForwardingCounts()
	if up > 0 {
		l[core.LabelUpstreamSessions] = strconv.Itoa(up)
	}
	if fwd > 0 {
		l[core.LabelForwardedSessions] = strconv.Itoa(fwd)
	}
	l[core.LabelCohorts] = cohortLabel(b.sessions.CohortMembers())
	return l
}

// cohortLabel renders the exclusive consumer groups subscribed here for
// core.LabelCohorts ("" for none).
func cohortLabel(cms []session.CohortMembers) string {
	m := make(map[cluster.CohortRef]map[[16]byte]cluster.CohortMember, len(cms))
	for _, cm := range cms {
		ref := cluster.CohortRef{Topic: cm.Topic, Group: cm.Group, ID: cm.ID}
		m[ref] = make(map[[16]byte]cluster.CohortMember, len(cm.Members))
		for id, mr := range cm.Members {
			m[ref][id] = cluster.CohortMember{Target: mr.Target, Parts: mr.Parts}
		}
	}
	return cluster.FormatCohortMembers(m)
}
