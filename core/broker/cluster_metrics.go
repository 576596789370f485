package broker

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/cluster"
)

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
		{"fibril_cluster_live_public_brokers", "Live, non-draining public members with client endpoints (the gateways); 0 is the topology's no_live_public_broker.", func() float64 { return float64(len(snap().Gateways)) }},
		{"fibril_cluster_ownerless_partitions", "Placed partitions whose owner holds no live lease: unavailable until failover, re-placement or the owner's return.", func() float64 {
			s, n := snap(), 0
			s.AllPartitions(func(p cluster.Partition) {
				if p.Placed() && !s.Live(p.Node) {
					n++
				}
			})
			return float64(n)
		}},
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
		{"fibril_replication_max_lag_records", "On an owner: the largest number of records a follower's durable copy of one of its partitions trails its log by, over the followers that reported progress.", func() float64 {
			return float64(c.maxLag().records)
		}},
		{"fibril_replication_max_lag_bytes", "On an owner: the same largest lag in bytes, estimated from the partition's mean record size.", func() float64 {
			return float64(c.maxLag().bytes)
		}},
		{"fibril_replication_replicas", "Replicas this node keeps for partitions it follows (running replication streams).", func() float64 {
			return float64(c.followers.count())
		}},
		{"fibril_replication_min_in_sync_followers", "On an owner: the smallest in-sync set, in followers, of the partitions it owns that have followers (-1 when it owns none).", func() float64 {
			return float64(c.minInSync())
		}},
		{"fibril_cluster_followed_partitions", "Partitions this node is a follower of.", func() float64 {
			n := 0
			snap().AllPartitions(func(p cluster.Partition) {
				if p.HasFollower(c.self.ID) {
					n++
				}
			})
			return float64(n)
		}},
		{"fibril_cluster_under_replicated_partitions", "On the placement controller, partitions with fewer live followers than the follower target allows at its last pass; 0 on other nodes.", func() float64 {
			return float64(c.cl.Stats().UnderReplicated.Load())
		}},
		{"fibril_cluster_snapshot_index", "Coordination index of the snapshot in force.", func() float64 { return float64(snap().Index) }},
		{"fibril_topology_generation", "Topology generation in force.", func() float64 { return float64(snap().Generation) }},
		{"fibril_cluster_adoption_floor", "Lowest adoption level published by live nodes: the oldest topology generation their clients have acknowledged.", func() float64 {
			f, _ := snap().AdoptionFloor()
			return float64(f)
		}},
		{"fibril_topology_adoption_generation", "This node's adoption level: the lowest topology generation acknowledged by its connections that acknowledged one.", func() float64 {
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
		{"fibril_cluster_promotions_total", "Failovers this node's controller wrote: an in-sync follower made owner of a written partition whose owner died.", &st.Promotions},
		{"fibril_replication_in_sync_changes_total", "In-sync sets this node recorded as the owner of their partitions.", &c.isrChanges},
		{"fibril_replication_demotions_total", "Partitions this node owned that moved to another broker while it lived (a drain's handoff, a failover while it was cut off).", &c.demotions},
		{"fibril_replication_checkpoint_installs_total", "Owner checkpoints this node's replicas installed (a new or wiped follower, or one that fell behind the owner's event feed).", &c.followers.stats.CheckpointInstalls},
		{"fibril_replication_catchup_bytes_total", "Record bytes this node's replicas pulled to catch up with a checkpoint.", &c.followers.stats.CatchUpBytes},
		{"fibril_replication_streamed_bytes_total", "Record bytes this node's replicas applied from replication streams.", &c.followers.stats.StreamedBytes},
	}
	for _, ct := range counters {
		v := ct.v
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: ct.name, Help: ct.help}, func() float64 { return float64(v.Load()) }))
	}
	c.confirmWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fibril_replication_confirm_wait_seconds",
		Help:    "On an owner: how long replica-gated confirms waited for their follower copies after the owner's own fsync.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)})
	reg.MustRegister(c.confirmWait)
}

// minInSync is the smallest recorded in-sync set among the partitions
// this node owns that have followers, or -1.
func (c *coordinated) minInSync() int {
	least := -1
	c.cl.Snapshot().AllPartitions(func(p cluster.Partition) {
		if p.Node == c.self.ID && len(p.Followers) > 0 && (least < 0 || len(p.InSync) < least) {
			least = len(p.InSync)
		}
	})
	return least
}
