package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/auth"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/routing"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/settings"
	"github.com/fibrilgo/fibril/core/wire"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
)

// clusterJoinTimeout bounds joining the cluster at start (the coordinator
// may wait for a quorum).
const clusterJoinTimeout = 2 * time.Minute

// coordinated is the broker's part in a cluster: the coordinator, the
// cluster view, and the session.Router that routes by it.
type coordinated struct {
	b     *Broker
	coord core.Coordinator
	cl    *cluster.Cluster
	self  routing.Self
	stop  chan struct{}
	done  chan struct{}
	ran   bool // run was started (close waits for it)
	// applied are the queues of the last snapshot installed without error
	// (applyCatalog, run goroutine only).
	applied map[*cluster.Queue]bool
	dlqRR   atomic.Uint64
	// noGatewayWarned is when the no-public-broker warning last went out
	// (run goroutine only).
	noGatewayWarned time.Time
}

// startCluster opens the coordination backend and joins the cluster
// (coordinated mode, DESIGN.md §8 "Modes"). The queue engine is open but
// no client is served yet.
func (b *Broker) startCluster() error {
	cfg := b.cfg
	secret, origin := b.secret, b.secretOrigin
	if len(secret) == 0 {
		return fmt.Errorf("coordination.backend = %q needs a cluster secret (S-149): set FIBRIL_CLUSTER_SECRET, or coordination.secret_path, or put it in %s",
			cfg.Coordination.Backend, filepath.Join(cfg.Server.DataDir, auth.ClusterSecretFile))
	}
	id, err := loadNodeID(cfg)
	if err != nil {
		return err
	}
	b.nodeID = id
	b.log = b.log.With("node", string(id))
	if b.peer, err = b.loadPeerTLS(id); err != nil {
		return err
	}
	catalog, err := host.LoadCatalog(cfg.Plugins.Catalog)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterJoinTimeout)
	defer cancel()
	if err := b.openTransport(ctx, id, catalog); err != nil {
		return err
	}
	dir := filepath.Join(cfg.Server.DataDir, "coordination", cfg.Coordination.Backend)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("server.data_dir: %w", err)
	}
	coord, err := host.OpenCoordination(ctx, cfg.Coordination.Backend, plugins.CoordinationEnv{
		NodeID: id, DataDir: dir, Config: coordinationConfig(cfg),
		ClusterSecret: string(secret), PeerTLS: peerFiles(b.peer), Logger: b.log.With("component", "coordination"),
		Registerer: b.registry,
	}, catalog, b.log.With("component", "plugins"), host.WithRegisterer(b.registry))
	if err != nil {
		return fmt.Errorf("coordination.backend %s: %w", cfg.Coordination.Backend, err)
	}
	adv, err := b.advertised()
	if err != nil {
		_ = coord.Close()
		return err
	}
	self := core.NodeInfo{ID: id, PeerAddr: b.peerAdvertise(), AdminAddr: b.adminLn.Addr().String(), Labels: core.Labels{}}
	if cfg.Broker.Visibility == string(core.Private) {
		self.Labels[core.LabelVisibility] = string(core.Private)
	} else {
		self.Labels[core.LabelAdvertise] = core.FormatEndpoints(toEndpoints(adv))
	}
	cl, err := cluster.Start(ctx, cluster.Options{
		Coordinator: coord, Self: self,
		Heartbeat: time.Duration(cfg.Coordination.HeartbeatIntervalMS) * time.Millisecond,
		TTL:       time.Duration(cfg.Coordination.LivenessTTLMS) * time.Millisecond,
		Logger:    b.log.With("component", "cluster"),
	})
	if err != nil {
		_ = coord.Close()
		return err
	}
	b.cluster = &coordinated{b: b, coord: coord, cl: cl, self: routing.Self{ID: id, Advertise: toEndpoints(adv), Private: cfg.Broker.Visibility == string(core.Private)},
		stop: make(chan struct{}), done: make(chan struct{})}
	b.cluster.registerMetrics(b.registry)
	b.log.Info("joined the cluster", "backend", cfg.Coordination.Backend, "secret_from", origin,
		"peer_addr", self.PeerAddr, "ttl", cl.TTL())
	return nil
}

// run follows the cluster: every declared queue and stream is installed in
// the local engine (so an owner can serve it at once), and /readyz says
// whether this node may serve (its lease is surely valid).
func (c *coordinated) start() {
	c.ran = true
	go c.run()
}

func (c *coordinated) run() {
	defer close(c.done)
	t := time.NewTicker(c.cl.Margin() / 4)
	defer t.Stop()
	var applied uint64
	for {
		changed := c.cl.Changed()
		snap := c.cl.Snapshot()
		if snap.Index != applied {
			c.applyCatalog(snap)
			c.retainLinks(snap)
			c.warnNoGateway(snap)
			applied = snap.Index
		}
		health, isPlugin := c.coord.(host.PluginHealth)
		up := true
		if isPlugin {
			up, _, _ = health.Health()
		}
		if c.b.draining.Load() {
			c.b.admin.SetNotReady("draining")
		} else if !up {
			c.b.admin.SetNotReady("coordination plugin down; restarting it")
		} else if c.cl.LeaseValid() {
			c.b.admin.SetReady()
		} else {
			c.b.admin.SetNotReady("cluster lease not surely valid (coordination unreachable?)")
		}
		select {
		case <-c.stop:
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// applyCatalog installs the snapshot's queues and streams in the local
// engine. Snapshots share the *cluster.Queue of every channel a change did
// not touch, so a queue applied without error before is skipped: a
// first-write mark elsewhere does not make every node walk every
// partition again. Run goroutine only.
func (c *coordinated) applyCatalog(snap *cluster.Snapshot) {
	qs := c.b.queues
	applied := make(map[*cluster.Queue]bool, len(snap.Queues))
	for _, q := range snap.Queues {
		if c.applied[q] {
			applied[q] = true
			continue
		}
		if _, err := qs.ApplyQueue(q.Info); err != nil {
			c.b.log.Warn("cannot install declared queue", "queue", q.Info.Key.String(), "err", err)
			continue
		}
		// Load (and recover) the partitions this node owns, so their
		// leases, delays and TTLs run before anyone asks for them; the
		// others stay closed on disk (S-138).
		ok := true
		for _, p := range q.Parts {
			if p.Placed() && p.Node == c.self.ID {
				if _, err := qs.Partition(q.Info.Key, p.Ref.Partition); err != nil {
					c.b.log.Warn("cannot open an owned partition", "partition", p.Ref.String(), "err", err)
					ok = false
				}
			}
		}
		applied[q] = ok
	}
	c.applied = applied
	for _, st := range snap.Streams {
		if _, err := qs.ApplyStream(st.Info); err != nil {
			c.b.log.Warn("cannot install declared stream", "stream", st.Info.Topic, "err", err)
		}
	}
}

// close leaves the cluster cleanly: the lease is revoked so peers see this
// node gone at once (its written partitions answer 503 until it returns).
func (c *coordinated) close() {
	close(c.stop)
	if c.ran {
		<-c.done
	}
	c.b.users.Close() // stop following the shared documents
	c.b.settings.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.cl.Close(ctx, true); err != nil {
		c.b.log.Warn("leaving the cluster", "err", err)
	}
	if err := c.coord.Close(); err != nil {
		c.b.log.Warn("closing coordination", "err", err)
	}
}

// Route implements session.Router (issue #4 §5; WIRE §7.3).
func (c *coordinated) Route(ref core.PartitionRef, publish bool, version uint64, forwarded bool) session.Route {
	snap := c.cl.Snapshot()
	if publish {
		if d, fenced := routing.Fence(snap, ref, version); fenced {
			return session.Route{Redirect: routing.RedirectBody(d)}
		}
	}
	d := routing.Decide(snap, c.self, ref, forwarded)
	if d.Action == routing.Refuse && (errors.Is(d.Err, core.ErrNotFound) || !d.Partition.Placed()) && c.catchUp(ref) {
		snap = c.cl.Snapshot()
		d = routing.Decide(snap, c.self, ref, forwarded)
	}
	switch d.Action {
	case routing.Redirect:
		return session.Route{Redirect: routing.RedirectBody(d)}
	case routing.Refuse:
		return session.Route{Err: d.Err}
	case routing.Forward:
		return session.Route{Forward: d.Partition.Node, Err: d.Err}
	}
	if !c.cl.LeaseValid() {
		return session.Route{Err: core.Errorf(core.ErrUnavailable,
			"this broker owns partition %s but cannot be sure of its cluster lease right now; retry", ref)}
	}
	if err := c.ensureLocal(snap, ref); err != nil {
		return session.Route{Err: err}
	}
	if publish {
		if err := c.markWritten(d.Partition); err != nil {
			return session.Route{Err: err}
		}
	}
	return session.Route{Serve: true}
}

// catchUp gives a view that may trail a fresh declaration or placement
// the chance to hold it before an operation on the partition is refused
// as undeclared or unplaced (Cluster.CatchUp).
func (c *coordinated) catchUp(ref core.PartitionRef) bool {
	ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
	defer cancel()
	return c.cl.CatchUp(ctx, ref)
}

// catchUpTimeout bounds that: one linearizable catalog read and the wait
// for this node's view.
const catchUpTimeout = 2 * time.Second

// markWritten records the first-write mark of an owned partition before
// its first append (DESIGN.md §8). Once marked it costs a map lookup: no
// context, no I/O.
func (c *coordinated) markWritten(p cluster.Partition) error {
	if c.cl.IsWritten(p) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	return c.cl.MarkWritten(ctx, p.Ref)
}

// markTimeout bounds the first-write mark of a partition (one
// coordination write, once per partition and epoch).
const markTimeout = 5 * time.Second

// ensureLocal installs ref's channel in the local engine when the catalog
// follower has not yet (a lock-free check first: this runs per operation).
func (c *coordinated) ensureLocal(snap *cluster.Snapshot, ref core.PartitionRef) error {
	if q := snap.Queue(ref.Topic, ref.Group); q != nil {
		if c.b.queues.HasQueue(q.Info.Key) {
			return nil
		}
		if _, err := c.b.queues.ApplyQueue(q.Info); err != nil {
			return err
		}
		return nil
	}
	if st := snap.Stream(ref.Topic); st != nil {
		if k, ok := c.b.queues.Kind(ref.Topic); ok && k == queue.KindStream {
			return nil
		}
		_, err := c.b.queues.ApplyStream(st.Info)
		return err
	}
	return nil
}

// DeclareQueue implements session.Router: the cluster decides, and the
// local engine installs the decision at once.
func (c *coordinated) DeclareQueue(ctx context.Context, spec queue.QueueSpec) (queue.QueueInfo, error) {
	info, err := c.cl.DeclareQueue(ctx, spec, c.defaultPartitions())
	if err != nil {
		return info, err
	}
	if _, err := c.b.queues.ApplyQueue(info); err != nil {
		return info, err
	}
	return info, nil
}

// DeclareStream implements session.Router.
func (c *coordinated) DeclareStream(ctx context.Context, spec queue.StreamSpec) (queue.StreamInfo, error) {
	info, err := c.cl.DeclareStream(ctx, spec, c.defaultPartitions())
	if err != nil {
		return info, err
	}
	_, err = c.b.queues.ApplyStream(info)
	return info, err
}

func (c *coordinated) defaultPartitions() uint32 {
	return uint32(max(c.b.settings.Current().Partitioning.DefaultPartitionCount, 1))
}

// Topology implements session.Router.
func (c *coordinated) Topology(req wire.TopologyRequest) wire.Topology {
	return routing.Topology(c.cl.Snapshot(), req)
}

// Generation implements session.Router.
func (c *coordinated) Generation() uint64 { return c.cl.Snapshot().Generation }

// Changed implements session.Router.
func (c *coordinated) Changed() <-chan struct{} { return c.cl.Changed() }

// coordinationConfig hands a backend its keys as strings (plugins.CoordinationEnv).
func coordinationConfig(cfg *config.Config) map[string]string {
	c := cfg.Coordination
	return map[string]string{
		"coordination.heartbeat_interval_ms": strconv.FormatInt(c.HeartbeatIntervalMS, 10),
		"coordination.liveness_ttl_ms":       strconv.FormatInt(c.LivenessTTLMS, 10),
		"coordination.raft.listen":           c.Raft.Listen,
		"coordination.raft.advertise":        c.Raft.Advertise,
		"coordination.raft.peers":            strings.Join(c.Raft.Peers, ","),
		"coordination.raft.bootstrap_expect": strconv.FormatInt(c.Raft.BootstrapExpect, 10),
		"coordination.raft.voter":            strconv.FormatBool(c.Raft.Voter),
	}
}

func toEndpoints(adv []wire.AdvertisedAddress) []core.Endpoint {
	out := make([]core.Endpoint, len(adv))
	for i, a := range adv {
		out[i] = core.Endpoint{Host: a.Host, Port: a.Port, Tags: a.Tags}
	}
	return out
}

// nodeIDFile keeps the generated node id in the data directory.
const nodeIDFile = "node_id"

// loadNodeID returns coordination.node_id, else the id kept in the data
// directory, generating it on first start (DESIGN.md §8 "Identity").
func loadNodeID(cfg *config.Config) (core.NodeID, error) {
	if id := cfg.Coordination.NodeID; id != "" {
		return core.NodeID(id), nil
	}
	path := filepath.Join(cfg.Server.DataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("%s is empty; delete it to generate a new node id", path)
		}
		return core.NodeID(id), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	id := "node-" + hex.EncodeToString(r[:])
	if err := writeFileSync(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("server.data_dir: keep node id: %w", err)
	}
	return core.NodeID(id), nil
}

// registerClusterMetrics exports the cluster view (docs/metrics.md,
// "Cluster"). Values are read at scrape time.
func (c *coordinated) registerMetrics(reg prometheus.Registerer) {
	snap := func() *cluster.Snapshot { return c.cl.Snapshot() }
	boolf := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauges := []struct {
		name, help string
		f          func() float64
	}{
		{"fibril_cluster_live_nodes", "Members with a live lease.", func() float64 { return float64(len(snap().LiveNodes())) }},
		{"fibril_cluster_members", "Members that ever joined.", func() float64 { return float64(len(snap().MemberIDs)) }},
		{"fibril_cluster_is_controller", "1 while this node runs placement.", func() float64 { return boolf(c.cl.IsController()) }},
		{"fibril_cluster_lease_valid", "1 while this node's lease is surely valid.", func() float64 { return boolf(c.cl.LeaseValid()) }},
		{"fibril_cluster_owned_partitions", "Partitions assigned to this node.", func() float64 {
			n := 0
			snap().AllPartitions(func(p cluster.Partition) {
				if p.Node == c.self.ID {
					n++
				}
			})
			return float64(n)
		}},
		{"fibril_cluster_snapshot_index", "Coordination index of the snapshot in force.", func() float64 { return float64(snap().Index) }},
		{"fibril_topology_generation", "Topology generation in force.", func() float64 { return float64(snap().Generation) }},
		{"fibril_cluster_adoption_floor", "Lowest adoption level published by live nodes (S-120).", func() float64 {
			f, _ := snap().AdoptionFloor()
			return float64(f)
		}},
		{"fibril_topology_adoption_generation", "Lowest generation acknowledged by connections that acknowledged (S-120).", func() float64 {
			if c.b.sessions == nil {
				return 0
			}
			g, _ := c.b.sessions.AdoptionLevel()
			return float64(g)
		}},
	}
	for _, g := range gauges {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, g.f))
	}
	st := c.cl.Stats()
	counters := []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"fibril_cluster_snapshot_rebuilds_total", "Snapshots published.", &st.SnapshotRebuilds},
		{"fibril_cluster_heartbeat_errors_total", "Lease renewals that failed.", &st.HeartbeatErrors},
		{"fibril_cluster_lease_losses_total", "Times this node's lease ended.", &st.LeaseLosses},
		{"fibril_cluster_placements_total", "Assignments written by this node's controller.", &st.Placements},
	}
	for _, ct := range counters {
		v := ct.v
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: ct.name, Help: ct.help}, func() float64 { return float64(v.Load()) }))
	}
}

// shareStores swaps the node-local user store and runtime settings for the
// cluster's shared documents (S-144, S-173). The local ones seed them when
// the cluster has none yet.
func (b *Broker) shareStores() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterJoinTimeout)
	defer cancel()
	users, err := auth.OpenShared(ctx, b.cluster.cl.Users(), b.users, b.log.With("component", "users"))
	if err != nil {
		return err
	}
	if n, err := users.Seed(b.cfg.Auth.Seeds()); err != nil {
		users.Close()
		return fmt.Errorf("auth.seed_users: %w", err)
	} else if n > 0 {
		b.log.Info("seeded the cluster's users", "count", n)
	}
	st, err := settings.OpenShared(ctx, b.cluster.cl.Settings(), b.settings.Current(), b.log.With("component", "settings"))
	if err != nil {
		users.Close()
		return err
	}
	b.users, b.settings = users, st
	b.adminUsers.Store(users)
	b.adminSettings.Store(st)
	b.adminCluster.Store(b.cluster)
	return nil
}

// topologyView is GET /admin/api/topology: nodes with labels, liveness and
// visibility; partitions with owner, epoch and the written mark. nil in
// standalone mode.
func (b *Broker) topologyView() any {
	c := b.adminCluster.Load()
	if c == nil {
		return nil
	}
	snap := c.cl.Snapshot()
	type nodeView struct {
		ID         core.NodeID `json:"id"`
		Live       bool        `json:"live"`
		Visibility string      `json:"visibility"`
		Draining   bool        `json:"draining"`
		PeerAddr   string      `json:"peer_addr"`
		AdminAddr  string      `json:"admin_addr"`
		Labels     core.Labels `json:"labels"`
		Controller bool        `json:"controller,omitempty"`
	}
	type partView struct {
		Topic     string      `json:"topic"`
		Group     string      `json:"group,omitempty"`
		Kind      string      `json:"kind"`
		Partition uint32      `json:"partition"`
		Owner     core.NodeID `json:"owner,omitempty"`
		Epoch     uint64      `json:"epoch"`
		Written   bool        `json:"written"`
		OwnerLive bool        `json:"owner_live"`
		Endpoints []string    `json:"client_endpoints"`
	}
	out := struct {
		Self       core.NodeID `json:"self"`
		Index      uint64      `json:"index"`
		Generation uint64      `json:"generation"`
		// AdoptionFloor is the lowest adoption level live nodes published
		// (S-120); absent when none has.
		AdoptionFloor *uint64 `json:"adoption_floor,omitempty"`
		// Coordination flags what an operator must fix: with no live,
		// non-draining public broker, privately owned partitions have no
		// client endpoints (seed §1).
		Coordination struct {
			NoLivePublicBroker bool `json:"no_live_public_broker"`
		} `json:"coordination"`
		Nodes      []nodeView `json:"nodes"`
		Partitions []partView `json:"partitions"`
	}{Self: c.self.ID, Index: snap.Index, Generation: snap.Generation, Nodes: []nodeView{}, Partitions: []partView{}}
	if f, ok := snap.AdoptionFloor(); ok {
		out.AdoptionFloor = &f
	}
	out.Coordination.NoLivePublicBroker = len(snap.Gateways) == 0
	for _, id := range snap.MemberIDs {
		m := snap.Members[id]
		out.Nodes = append(out.Nodes, nodeView{ID: id, Live: m.Live, Visibility: string(m.Info.Visibility()),
			Draining: m.Info.Draining(), PeerAddr: m.Info.PeerAddr, AdminAddr: m.Info.AdminAddr, Labels: m.Info.Labels,
			Controller: id == c.self.ID && c.cl.IsController()})
	}
	add := func(kind string, p cluster.Partition) {
		v := partView{Topic: p.Ref.Topic, Group: p.Ref.Group, Kind: kind, Partition: p.Ref.Partition,
			Owner: p.Node, Epoch: p.Epoch, Written: p.Written, OwnerLive: p.Placed() && snap.Live(p.Node), Endpoints: []string{}}
		for _, e := range routing.ClientEndpoints(snap, p) {
			v.Endpoints = append(v.Endpoints, e.String())
		}
		out.Partitions = append(out.Partitions, v)
	}
	for _, q := range snap.Queues {
		for _, p := range q.Parts {
			add("queue", p)
		}
	}
	for _, st := range snap.Streams {
		for _, p := range st.Parts {
			add("stream", p)
		}
	}
	return out
}

// drain is S-127 and, in coordinated mode, S-128: every connected session
// gets GOING_AWAY, the node is marked draining (no new placements) and
// /readyz turns false. Partitions with data stay: without replication they
// can only move to a caught-up follower, which does not exist yet.
func (b *Broker) drain(ctx context.Context, grace time.Duration, message string) (any, error) {
	b.draining.Store(true)
	b.admin.SetNotReady("draining")
	notified := b.sessions.GoingAway(grace, message)
	remaining := 0
	if c := b.adminCluster.Load(); c != nil {
		if err := c.cl.SetLabel(ctx, core.LabelDraining, "true"); err != nil {
			return nil, core.Errorf(core.ErrUnavailable, "could not mark this node draining: %v", err)
		}
		c.cl.Snapshot().AllPartitions(func(p cluster.Partition) {
			if p.Node == c.self.ID {
				remaining++
			}
		})
	}
	return map[string]any{"connections_notified": notified, "owned_partitions_remaining": remaining,
		"handoff_complete": remaining == 0}, nil
}

// deadLetterPartition is queue.Options.DeadLetterPartition in coordinated
// mode: a dead letter is appended on this node, so it goes to a partition
// of the target queue that this node owns (and marks it written first, as
// any first append). A target that is not declared in the cluster, or of
// which this node owns nothing, is an error: the message stays in its
// queue and is dead-lettered again later.
func (c *coordinated) deadLetterPartition(target queue.Key) (uint32, error) {
	snap := c.cl.Snapshot()
	q := snap.Queue(target.Topic, target.Group.Value)
	if q == nil {
		return 0, core.Errorf(core.ErrNotFound, "dead-letter target %s is not declared in this cluster", target)
	}
	var owned []cluster.Partition
	for _, p := range q.Parts {
		if p.Placed() && p.Node == c.self.ID {
			owned = append(owned, p)
		}
	}
	if len(owned) == 0 {
		return 0, core.Errorf(core.ErrUnavailable, "this broker owns no partition of dead-letter target %s", target)
	}
	if !c.cl.LeaseValid() {
		return 0, core.Errorf(core.ErrUnavailable, "cluster lease not surely valid")
	}
	p := owned[c.dlqRR.Add(1)%uint64(len(owned))]
	if err := c.ensureLocal(snap, p.Ref); err != nil {
		return 0, err
	}
	if err := c.markWritten(p); err != nil {
		return 0, err
	}
	return p.Ref.Partition, nil
}
