package broker

// The admin API's view of the cluster and its drain action.

import (
	"context"
	"slices"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/routing"
)

// topologyView is GET /admin/api/topology: nodes with labels, liveness and
// visibility; partitions with owner, epoch, the written mark and the
// followers (each with its liveness); the follower target and how many
// partitions fall short of it. nil in standalone mode.
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
	type followerView struct {
		Node core.NodeID `json:"node"`
		Live bool        `json:"live"`
		// InSync: the owner recorded it in the partition's in-sync set.
		InSync bool `json:"in_sync"`
		// On the owner's admin API, once the follower reported durable
		// progress: every record below DurableNext is on its disk,
		// LagRecords behind the owner's log (about LagBytes, from the
		// log's mean record size), reported ProgressAgeMS ago.
		DurableNext   *uint64 `json:"durable_next,omitempty"`
		LagRecords    *uint64 `json:"lag_records,omitempty"`
		LagBytes      *uint64 `json:"lag_bytes,omitempty"`
		ProgressAgeMS *int64  `json:"progress_age_ms,omitempty"`
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
		// Followers hold (once replication runs) the partition's other
		// copies, in the controller's order; empty when it has none.
		Followers []followerView `json:"followers"`
		// InSync is the recorded in-sync set (which may name a node that
		// is no longer a follower, until the owner drops it) and Acks the
		// copies of every confirmed record among its members.
		InSync    []core.NodeID `json:"in_sync"`
		Acks      int           `json:"acks"`
		Endpoints []string      `json:"client_endpoints"`
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
		// client endpoints (core/routing/README.md#gateway-set).
		Coordination struct {
			NoLivePublicBroker bool `json:"no_live_public_broker"`
		} `json:"coordination"`
		// Replication is the follower target in force and the placed
		// partitions with fewer live followers than it allows
		// (min(target, live nodes − 1); docs/cluster.md#replication).
		Replication struct {
			TargetFollowers int `json:"target_followers"`
			UnderReplicated int `json:"under_replicated"`
		} `json:"replication"`
		Nodes      []nodeView `json:"nodes"`
		Partitions []partView `json:"partitions"`
		// Repartitions are the partition count changes in progress
		// (docs/repartition.md): the marker as recorded, with whether the
		// cutover happened.
		Repartitions []repartitionView `json:"repartitions"`
	}{Self: c.self.ID, Index: snap.Index, Generation: snap.Generation, Nodes: []nodeView{}, Partitions: []partView{},
		Repartitions: []repartitionView{}}
	if f, ok := snap.AdoptionFloor(); ok {
		out.AdoptionFloor = &f
	}
	out.Coordination.NoLivePublicBroker = len(snap.Gateways) == 0
	if st := b.adminSettings.Load(); st != nil {
		out.Replication.TargetFollowers = int(st.Current().Replication.TargetFollowers)
	}
	out.Replication.UnderReplicated = snap.UnderReplicated(out.Replication.TargetFollowers)
	for _, id := range snap.MemberIDs {
		m := snap.Members[id]
		out.Nodes = append(out.Nodes, nodeView{ID: id, Live: m.Live, Visibility: string(m.Info.Visibility()),
			Draining: m.Info.Draining(), PeerAddr: m.Info.PeerAddr, AdminAddr: m.Info.AdminAddr, Labels: m.Info.Labels,
			Controller: id == c.self.ID && c.cl.IsController()})
	}
	add := func(kind string, p cluster.Partition) {
		v := partView{Topic: p.Ref.Topic, Group: p.Ref.Group, Kind: kind, Partition: p.Ref.Partition,
			Owner: p.Node, Epoch: p.Epoch, Written: p.Written, OwnerLive: p.Placed() && snap.Live(p.Node),
			Followers: []followerView{}, InSync: append([]core.NodeID{}, p.InSync...), Acks: p.Acks, Endpoints: []string{}}
		for _, f := range p.Followers {
			fv := followerView{Node: f, Live: snap.Live(f), InSync: slices.Contains(p.InSync, f)}
			if p.Node == c.self.ID {
				if fp, lag, ok := c.lag(p.Ref, f); ok {
					age := time.Since(fp.at).Milliseconds()
					fv.DurableNext, fv.LagRecords, fv.LagBytes, fv.ProgressAgeMS = &fp.durableNext, &lag.records, &lag.bytes, &age
				}
			}
			v.Followers = append(v.Followers, fv)
		}
		for _, e := range routing.ClientEndpoints(snap, p) {
			v.Endpoints = append(v.Endpoints, e.String())
		}
		out.Partitions = append(out.Partitions, v)
	}
	for _, q := range snap.Queues {
		for _, p := range q.Parts {
			add("queue", p)
		}
		if r := q.Repartition; r != nil {
			out.Repartitions = append(out.Repartitions, repartitionView{Repartition: r, CutOver: r.CutOver(q.Info)})
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
// /readyz turns false; the owner's gates then hand each partition to a
// caught-up in-sync follower (ownedGate.handoffLocked). The answer counts
// the partitions still owned at this moment.
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

// undrain ends a drain as far as it can be undone: the draining mark is
// cleared, so placement may use the node again (S-128), the owner's gates
// stop handing partitions over, a handoff's fence still waiting for a
// follower is lifted, and /readyz follows the node's other conditions
// again (in coordinated mode the cluster loop sets it on its next pass).
// Two things are not undone, by design: the GOING_AWAY already sent
// (S-127; those clients reconnect wherever their bootstrap list leads) and
// partitions already handed over, which stay with their new owners (a
// live owner is kept). In standalone mode a drain only sent GOING_AWAY
// and turned /readyz false, so undrain only turns it true again.
func (b *Broker) undrain(ctx context.Context) (any, error) {
	c := b.adminCluster.Load()
	if c == nil && !b.cfg.Coordination.Standalone() {
		return nil, core.Errorf(core.ErrUnavailable, "the broker is still joining its cluster; retry")
	}
	if c != nil {
		// The mark first: should the write fail, nothing changed and the
		// node still drains.
		if err := c.cl.SetLabel(ctx, core.LabelDraining, ""); err != nil {
			return nil, core.Errorf(core.ErrUnavailable, "could not clear this node's draining mark (it still drains): %v", err)
		}
	}
	was := b.draining.Swap(false)
	out := map[string]any{"was_draining": was}
	if c == nil {
		// Ready again only where the drain took it: not while starting
		// (sessions not served yet) nor shutting down (listener closed).
		select {
		case <-b.served:
		default:
			if was && b.adminSessions.Load() != nil {
				b.admin.SetReady()
			}
		}
		b.log.Info("undrained", "was_draining", was)
		out["note"] = "connections already sent GOING_AWAY are not called back"
		return out, nil
	}
	lifted, handedOver, held := c.liftDrainFences(ctx)
	owned := 0
	c.cl.Snapshot().AllPartitions(func(p cluster.Partition) {
		if p.Node == c.self.ID {
			owned++
		}
	})
	out["owned_partitions"] = owned
	out["fences_lifted"] = lifted
	out["fenced_handed_over"] = handedOver
	out["fences_held"] = held
	out["note"] = "connections already sent GOING_AWAY are not called back, and partitions already handed over stay with their new owners"
	if held > 0 {
		b.log.Warn("undrain: some partitions stay fenced: their handoff's outcome is not known yet (undrain again to retry)",
			"fences_held", held)
	}
	b.log.Info("undrained", "was_draining", was, "owned_partitions", owned, "fences_lifted", lifted,
		"fenced_handed_over", handedOver)
	return out, nil
}

// liftDrainFences lifts the fences that drain handoffs (handoffLocked) put
// on partitions this node still owns, once b.draining is false: no new
// handoff starts then, a handoff whose write is in flight is waited for,
// and this node's view is brought up to the coordination store's index, so
// that a partition whose handoff succeeded is seen as moved and keeps its
// fence until the engine releases it (nothing past the fence may be
// confirmed here: the new owner may not hold it). It returns how many
// fences it lifted, how many partitions were handed over already, and how
// many fences it had to leave undecided (a write still in flight, or this
// node's view could not be brought up to date): undrain again lifts those.
func (c *coordinated) liftDrainFences(ctx context.Context) (lifted, handedOver, held int) {
	gs := &c.gates
	fenced := func() (ogs []*ownedGate, writing bool) {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		for _, og := range gs.m {
			if og.fencedAt != 0 {
				ogs = append(ogs, og)
				writing = writing || og.writing
			}
		}
		return ogs, writing
	}
	ogs, writing := fenced()
	for writing { // a HandOff takes at most recordTimeout
		select {
		case <-ctx.Done():
			writing = false
		case <-time.After(20 * time.Millisecond):
			ogs, writing = fenced()
		}
	}
	if len(ogs) == 0 {
		return 0, 0, 0
	}
	// A linearizable read tells the store's index; a view at or past it
	// shows every handoff written before.
	_, idx, err := c.coord.List(ctx, cluster.KeySettings)
	current := err == nil && c.cl.Await(ctx, 5*time.Second, func(s *cluster.Snapshot) bool { return s.Index >= idx })
	snap := c.cl.Snapshot()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, og := range ogs {
		if og.fencedAt == 0 || gs.m[og.ref] != og {
			continue // lifted (handoff timeout) or released meanwhile
		}
		if !current || og.writing {
			held++
			continue
		}
		p, ok := snap.Partition(og.ref)
		switch {
		case !ok || !p.OwnedBy(c.self.ID):
			handedOver++ // the fence stays until the engine releases it
		case p.Epoch != og.epoch:
			held++ // the gate has not seen this epoch yet
		default:
			og.gate.ClearFence()
			og.fencedAt, og.retryAt = 0, time.Time{}
			lifted++
		}
	}
	return lifted, handedOver, held
}

// repartitionView is one transition in GET /admin/api/topology.
type repartitionView struct {
	*cluster.Repartition
	CutOver bool `json:"cut_over"`
}
