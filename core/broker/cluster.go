package broker

// Joining, following and leaving the cluster (coordinated mode): the
// coordination backend is opened, this node registers, and a run goroutine
// follows the cluster view — installing the catalog (cluster_catalog.go),
// dropping links to departed peers, and saying on /readyz whether this
// node may serve. Where each operation goes is core/routing's
// SessionRouter; the rest of the broker's cluster code is split by idea:
// cluster_metrics.go, cluster_stores.go (shared users and settings),
// cluster_admin.go (topology view, drain), node_id.go.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/auth"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/lograte"
	"github.com/fibrilgo/fibril/core/routing"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/settings"
	"github.com/fibrilgo/fibril/core/wire"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
)

// gateTick is how often the partitions' gates are looked at without a new
// view: often enough for replication.isr_timeout_ms (seconds), seldom
// enough that thousands of partitions cost little.
const gateTick = time.Second

// clusterJoinTimeout bounds joining the cluster at start (the coordinator
// may wait for a quorum).
const clusterJoinTimeout = 2 * time.Minute

// coordinated is the broker's part in a cluster: the coordinator, the
// cluster view, and the session.Router that routes by it (core/routing).
type coordinated struct {
	b     *Broker
	coord core.Coordinator
	cl    *cluster.Cluster
	self  routing.Self
	stop  chan struct{}
	done  chan struct{}
	// cohortPending: a write of the cohort members label is due
	// (cohortsChanged).
	cohortPending atomic.Bool
	ran           bool // run was started (close waits for it)
	// promoting: a promoteFenced attempt runs.
	promoting atomic.Bool
	// lagging, for tests only: while set, run applies no new view, as on
	// a node that lags behind the cluster (its sessions and its cluster
	// view go on; its engine and roles do not follow).
	lagging atomic.Bool
	// applied are the queues of the last snapshot installed without error
	// (applyCatalog, run goroutine only).
	applied map[*cluster.Queue]bool
	dlqRR   atomic.Uint64
	// router is the session.Router that routes by the cluster view.
	router *routing.SessionRouter
	// privateAdvertise is, on a private broker, its client endpoint list
	// in the LabelAdvertise format: what it publishes as
	// core.LabelPrivateAdvertise while routing.expose_private_endpoints is
	// on (privateAdvertiseLabel). Empty on a public broker.
	privateAdvertise string
	// noGatewayWarned rate-limits the no-public-broker warnings
	// (warnNoGateway).
	noGatewayWarned lograte.Limiter[struct{}]
	// followers runs the replicas of the partitions this node follows
	// (replication.go); progress is what this node's own followers last
	// reported.
	followers followers
	progress  progressBook
	// gates holds the confirm gates of the partitions the engine opened
	// (gates.go); isrChanges counts the in-sync set changes recorded.
	gates      gates
	isrChanges atomic.Uint64
	demotions  atomic.Uint64 // partitions this node owned that moved away while it lived
	// owned is the set of partitions this node owned in the last
	// snapshot applied (closeMoved; run goroutine only).
	owned       map[core.PartitionRef]bool
	confirmWait prometheus.Histogram
	// deletions tracks the tombstones in view (deletion.go).
	deletions deletions
	// repart tracks the repartition writes and drain watches in flight
	// (repartition.go).
	repart repartitioning
}

// startCluster opens the coordination backend and joins the cluster
// (coordinated mode). The queue engine is open but
// no client is served yet.
func (b *Broker) startCluster() error {
	cfg := b.cfg
	secret, origin := b.secret, b.secretOrigin
	if len(secret) == 0 {
		return fmt.Errorf("coordination.backend = %q needs a cluster secret (brokers authenticate each other with it): set FIBRIL_CLUSTER_SECRET, or coordination.secret_path, or put it in %s",
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
	if b.peer != nil {
		b.registry.MustRegister(b.peer.Collector()) // fibril_tls_cert_not_after_timestamp_seconds{cert="peer"}
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
	self.Labels[core.LabelFeatures] = strings.Join(sharedFeatures, ",")
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
	c := &coordinated{b: b, coord: coord, cl: cl, self: routing.Self{ID: id, Advertise: toEndpoints(adv), Private: cfg.Broker.Visibility == string(core.Private)},
		stop: make(chan struct{}), done: make(chan struct{}), noGatewayWarned: lograte.Limiter[struct{}]{Every: noGatewayWarnEvery}}
	c.router = &routing.SessionRouter{Cluster: cl, Self: c.self, DefaultPartitions: c.defaultPartitions, // Queues: openQueues
		PlacementTimeout: c.placementTimeout, ExposePrivate: c.exposePrivate}
	if c.self.Private {
		c.privateAdvertise = core.FormatEndpoints(toEndpoints(adv))
	}
	c.followers.c = c
	c.followers.tailsWrite = make(chan struct{}, 1)
	c.gates.c = c
	b.cluster = c
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
	var gated time.Time
	for {
		changed := c.cl.Changed()
		snap := c.cl.Snapshot()
		fresh := snap.Index != applied && !c.lagging.Load()
		if fresh {
			c.applyCatalog(snap)
			c.applyRepartitions(snap)
			c.closeMoved(snap) // first: a replica of a moved partition needs the engine to let go of it
			c.followers.reconcile(snap)
			c.promoteFenced(snap)
			c.retainLinks(snap)
			c.warnNoGateway(snap)
			c.applyCohortPlans(snap)
			applied = snap.Index
		}
		if fresh || time.Since(gated) >= gateTick {
			// On a new view, and once per gateTick: lagging followers
			// leave the in-sync set in time.
			c.gates.reconcile(snap)
			c.dropDeleted(snap) // after followers.reconcile: the replicas of a deleted name have stopped
			gated = time.Now()
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
			c.b.admin.SetNotReady(c.leaseReason())
		}
		select {
		case <-c.stop:
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// leaseReason says why the lease is not surely valid, naming the
// backend's last error when it can tell one (core.Reachability).
func (c *coordinated) leaseReason() string {
	if r, ok := c.coord.(core.Reachability); ok {
		if err := r.Unreachable(); err != nil {
			return "cluster lease not surely valid: coordination unreachable: " + err.Error()
		}
	}
	return "cluster lease not surely valid (coordination unreachable?)"
}

// promoteFenced fails over, in the background, the partitions this node
// follows in sync whose in-sync members all fenced on crash evidence
// (cluster.PromoteFenced): the controller does the same, but it may be
// the node that crashed. One attempt runs at a time; the next view tries
// again.
func (c *coordinated) promoteFenced(snap *cluster.Snapshot) {
	if !c.promoting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.promoting.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), c.cl.TTL())
		defer cancel()
		go func() { // leaving the cluster ends the attempt
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		c.cl.PromoteFenced(ctx, snap)
	}()
}

// close leaves the cluster cleanly: the lease is revoked so peers see this
// node gone at once (its written partitions answer 503 until it returns).
func (c *coordinated) close() {
	close(c.stop)
	if c.ran {
		<-c.done
	}
	c.followers.stopAll()
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

// defaultPartitions is partitioning.default_partition_count, at least 1
// (the router's declarations read it).
func (c *coordinated) defaultPartitions() uint32 {
	return uint32(max(c.b.settings.Current().Partitioning.DefaultPartitionCount, 1))
}

// placementTimeout is routing.declare_placement_timeout_ms (the router's
// declarations read it).
func (c *coordinated) placementTimeout() time.Duration {
	return settings.Ms(c.b.settings.Current().Routing.DeclarePlacementTimeoutMS)
}

// exposePrivate is routing.expose_private_endpoints (the router's
// topology answers read it; core/routing/README.md#private-endpoints).
func (c *coordinated) exposePrivate() bool {
	return c.b.settings.Current().Routing.ExposePrivateEndpoints
}

// privateAdvertiseLabel is the value of core.LabelPrivateAdvertise this
// node publishes with its heartbeat: a private broker's client endpoints
// while routing.expose_private_endpoints is on, else "" (withdrawn). Public
// brokers never publish it.
func (c *coordinated) privateAdvertiseLabel() string {
	if c.privateAdvertise == "" || !c.exposePrivate() {
		return ""
	}
	return c.privateAdvertise
}

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
		consul.KeyAddresses:                  strings.Join(c.Consul.Addresses, ","),
		consul.KeyDatacenter:                 c.Consul.Datacenter,
		consul.KeyToken:                      c.Consul.Token.Reveal(),
		consul.KeyTokenPath:                  c.Consul.TokenPath,
		consul.KeyCAPath:                     c.Consul.CAPath,
		consul.KeyCertPath:                   c.Consul.CertPath,
		consul.KeyKeyPath:                    c.Consul.KeyPath,
		consul.KeyServerName:                 c.Consul.TLSServerName,
		consul.KeyPrefix:                     c.Consul.Prefix,
		consul.KeySessionTTL:                 strconv.FormatInt(c.Consul.SessionTTLMS, 10),
	}
}

func toEndpoints(adv []wire.AdvertisedAddress) []core.Endpoint {
	out := make([]core.Endpoint, len(adv))
	for i, a := range adv {
		out[i] = core.Endpoint{Host: a.Host, Port: a.Port, Tags: a.Tags}
	}
	return out
}

// applyCohortPlans hands the controller's exclusive consumer group plans
// to the session server, which gates this broker's partitions by them
// (docs/semantics.md#s-98).
func (c *coordinated) applyCohortPlans(snap *cluster.Snapshot) {
	if c.b.sessions == nil {
		return
	}
	var plans []session.CohortPlan
	snap.Cohorts(func(ref cluster.CohortRef, p *cluster.CohortPlan) {
		sp := session.CohortPlan{Topic: ref.Topic, Group: ref.Group, ID: ref.ID, Generation: p.Generation,
			Assign: make(map[uint32]wire.UUID, len(p.Assign))}
		for n, id := range p.Assign {
			sp.Assign[n] = id
		}
		plans = append(plans, sp)
	})
	c.b.sessions.ApplyCohortPlans(plans)
}

// cohortsChanged publishes the exclusive consumer group members now
// (core.LabelCohorts) instead of with the next heartbeat, so a member's
// join or leave reaches the controller's plan at once. A burst of changes
// (a member subscribes to every partition in turn) is merged into one
// write after cohortPublishPause. The heartbeat publishes the label too,
// as every label it reads from the source: should its write of an older
// value land after this one, its next beat writes the current value.
func (c *coordinated) cohortsChanged() {
	if !c.cohortPending.CompareAndSwap(false, true) {
		return // a write is coming and will read the members then
	}
	time.Sleep(cohortPublishPause)
	c.cohortPending.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if err := c.cl.SetLabel(ctx, core.LabelCohorts, cohortLabel(c.b.sessions.CohortMembers())); err != nil {
		c.b.log.Debug("publishing the cohort members failed; the heartbeat publishes them", "err", err)
	}
}

// cohortPublishPause merges a burst of membership changes into one label
// write.
const cohortPublishPause = 5 * time.Millisecond
