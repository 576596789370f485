package broker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/replica"
	"github.com/fibrilgo/fibril/core/settings"
)

// Replica-gated confirms in a cluster broker
// (docs/ARCHITECTURE.md#replication): every queue partition and durable
// stream partition the engine opens gets an ownedGate. While this broker owns the partition and the
// durability policy needs follower copies, the gate holds its confirms
// until enough members of the recorded in-sync set reported the records
// durable, and its first deliveries stop at the replicated watermark
// (S-141, S-143). The owner also keeps the in-sync set recorded in the
// coordinator true (replica.InSyncPlan): it adds followers that caught up
// and removes dead or lagging ones, only in ways that keep every
// confirmed record on the recorded number of members.

// gates holds the ownedGates of the partitions open in the engine.
type gates struct {
	c  *coordinated
	mu sync.Mutex // guards m and every ownedGate's planning fields
	m  map[core.PartitionRef]*ownedGate
}

// ownedGate is one partition's gate and what its owner knows to plan the
// partition's in-sync set.
type ownedGate struct {
	gs    *gates
	ref   core.PartitionRef
	part  queue.Gated // a queue's partition or a durable stream's
	gate  *replica.Gate
	gated atomic.Bool // confirms and deliveries wait for followers

	// Guarded by gates.mu.
	epoch    uint64
	inSync   []core.NodeID // the recorded set of epoch
	acks     int           // the recorded Acks of epoch
	version  uint64        // the assignment version inSync and acks come from
	marks    []localMark   // the owner's durable next, sampled (Behind)
	writing  bool          // a SetInSync or HandOff is in flight
	lastFail string        // the last SetInSync failure logged

	// A drain's handoff (handoffLocked): the fence's offset plus one (0:
	// none), since when, and when to try again after giving up.
	fencedAt    uint64
	fencedSince time.Time
	retryAt     time.Time
}

// recordTimeout bounds one write of the in-sync set.
const recordTimeout = 5 * time.Second

// localMark is the owner's durable next offset at a moment.
type localMark struct {
	at   time.Time
	next uint64
}

// attach is queue.Options.Gates: it gives the engine's partition p its
// gate, set up from the current view.
func (gs *gates) attach(p queue.Gated) queue.ConfirmGate {
	key, n := p.Ref()
	ref := core.PartitionRef{Topic: key.Topic, Group: key.Group.Value, Partition: n}
	rp := gs.c.b.settings.Current().Replication
	// The engine opens a partition when this node starts to own it (it
	// releases the ones that move away): reports from an earlier period
	// of ownership say nothing about the followers' logs now.
	gs.c.progress.forget(ref)
	og := &ownedGate{gs: gs, ref: ref, part: p,
		gate: replica.NewGate(1, nil, settings.Ms(rp.ConfirmTimeoutMS))}
	og.gate.OnAdvance(og.advanced)
	if lg, err := p.ReplicationLog(); err == nil {
		// What the engine recovered is on this broker's disk already;
		// it is delivered once the followers report it too.
		_, next := lg.Bounds()
		og.gate.Local(next)
	}
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = make(map[core.PartitionRef]*ownedGate)
	}
	gs.m[ref] = og
	og.configureLocked(gs.c.cl.Snapshot(), rp, time.Now())
	if !og.gated.Load() { // the engine starts a gated partition at 0
		p.SetDeliverable(queue.Unlimited)
	}
	gs.mu.Unlock()
	return og
}

// detach forgets ref's gate (the engine released the partition).
func (gs *gates) detach(ref core.PartitionRef) {
	gs.mu.Lock()
	delete(gs.m, ref)
	gs.mu.Unlock()
}

// Confirm implements queue.ConfirmGate.
func (og *ownedGate) Confirm(off uint64, done func(error)) {
	og.gate.Local(off + 1)
	if !og.gated.Load() {
		done(nil)
		return
	}
	began := time.Now()
	og.gate.Wait(off, func(err error) {
		if err == nil {
			og.gs.c.confirmWait.Observe(time.Since(began).Seconds())
		}
		done(err)
	})
}

// advanced hears the gate's watermark rise: deliveries may follow it.
func (og *ownedGate) advanced(mark uint64) {
	if og.gated.Load() {
		og.part.RaiseDeliverable(mark)
	}
}

// reconcile applies a new view, the settings and the passing of time to
// every gate: called from the cluster loop on each snapshot and tick.
func (gs *gates) reconcile(snap *cluster.Snapshot) {
	rp := gs.c.b.settings.Current().Replication
	now := time.Now()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, og := range gs.m {
		og.configureLocked(snap, rp, now)
	}
}

// progress hears a follower's durable progress report.
func (gs *gates) progress(ref core.PartitionRef, node core.NodeID, next uint64) {
	gs.mu.Lock()
	og := gs.m[ref]
	join := og != nil && !slices.Contains(og.inSync, node)
	gs.mu.Unlock()
	if og == nil {
		return
	}
	og.gate.Progress(string(node), next)
	if join { // it may be able to join the in-sync set now
		rp := gs.c.b.settings.Current().Replication
		gs.mu.Lock()
		og.configureLocked(gs.c.cl.Snapshot(), rp, time.Now())
		gs.mu.Unlock()
	}
}

// configureLocked sets the gate from the assignment and the policy, and
// records a new in-sync set when the plan differs from the recorded one.
func (og *ownedGate) configureLocked(snap *cluster.Snapshot, rp settings.Replication, now time.Time) {
	p, ok := snap.Partition(og.ref)
	if !ok || !p.OwnedBy(og.gs.c.self.ID) {
		// Not ours (any more): routing serves nothing here, and the gate
		// stays as it is until the engine releases the partition — what
		// is past its watermark may not be on the new owner and must not
		// be delivered.
		return
	}
	if p.Epoch != og.epoch {
		og.epoch, og.marks = p.Epoch, nil
	}
	if !og.writing && p.Version >= og.version { // not a view older than this node's own write
		og.inSync, og.acks, og.version = p.InSync, p.Acks, p.Version
	}
	policyAcks := max(rp.Policy().Required(1+len(p.Followers))-1, 0)
	// Confirms need the policy's copies, and never fewer than the
	// record says every confirmed record has, until the record is
	// lowered (the invariant the controller relies on).
	gateAcks := max(policyAcks, og.acks)
	members := make([]string, len(og.inSync))
	for i, id := range og.inSync {
		members[i] = string(id)
	}
	og.gate.SetTimeout(settings.Ms(rp.ConfirmTimeoutMS))
	og.gate.SetMinInSync(int(rp.MinInSyncReplicas))
	og.gate.SetMembers(1+gateAcks, members)
	book := og.gs.c.progress.forPartition(og.ref)
	for _, id := range og.inSync {
		if fp, ok := book[id]; ok {
			og.gate.Progress(string(id), fp.durableNext)
		}
	}
	og.setGated(gateAcks > 0)
	og.planLocked(p, snap, book, policyAcks, rp, now)
	if og.gs.c.b.draining.Load() {
		og.handoffLocked(p, snap, book, policyAcks, now)
	}
}

// handoffLocked hands a partition of a draining owner to an in-sync
// follower (S-128): it fences the gate at the log's end, so that nothing
// past it is confirmed or delivered here, waits until a live,
// non-draining member reports everything below the fence durable, and
// writes the assignment over to it (cluster.HandOff). A partition whose
// confirms never needed a follower (acks 0) stays; so does one where no
// member catches up within connection.drain_handoff_timeout_ms — the
// fence is then lifted and the handoff tried again after as long.
func (og *ownedGate) handoffLocked(p cluster.Partition, snap *cluster.Snapshot, book map[core.NodeID]followerProgress, policyAcks int, now time.Time) {
	if og.writing || now.Before(og.retryAt) || og.acks < 1 {
		return
	}
	usable := func(id core.NodeID) bool {
		m := snap.Members[id]
		return m != nil && m.Live && !m.Info.Draining()
	}
	if og.fencedAt == 0 {
		if !slices.ContainsFunc(og.inSync, usable) {
			return
		}
		local, _ := og.gate.State()
		og.gate.SetFence(local)
		og.fencedAt, og.fencedSince = local+1, now
	}
	at := og.fencedAt - 1
	var to core.NodeID
	for _, id := range og.inSync {
		if fp, ok := book[id]; ok && fp.durableNext >= at && usable(id) && (to == "" || fp.durableNext > book[to].durableNext) {
			to = id
		}
	}
	log := og.gs.c.b.log.With("component", "replication", "partition", og.ref.String(), "epoch", p.Epoch)
	if to == "" {
		timeout := settings.Ms(og.gs.c.b.settings.Current().Connection.DrainHandoffTimeoutMS)
		if now.Sub(og.fencedSince) > timeout {
			log.Warn("drain: no in-sync follower caught up with the fence in time; serving again and trying later",
				"fence", at, "timeout", timeout)
			og.gate.ClearFence()
			og.fencedAt, og.retryAt = 0, now.Add(timeout)
		}
		return
	}
	var inSync []core.NodeID
	for _, id := range og.inSync {
		if fp, ok := book[id]; ok && id != to && fp.durableNext >= at {
			inSync = append(inSync, id)
		}
	}
	acks := min(policyAcks, len(inSync))
	og.writing = true
	epoch := og.epoch
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		err := og.gs.c.cl.HandOff(ctx, og.ref, epoch, to, inSync, acks)
		cancel()
		og.gs.mu.Lock()
		defer og.gs.mu.Unlock()
		og.writing = false
		if err != nil {
			log.Warn("drain: handing the partition over failed; retrying", "to", string(to), "err", err)
			return
		}
		log.Info("drain: partition handed over", "to", string(to), "fence", at, "in_sync", inSync)
	}()
}

// setGated switches deliveries between gated (at the replicated
// watermark) and free.
func (og *ownedGate) setGated(on bool) {
	if og.gated.Swap(on) == on {
		return
	}
	if on {
		og.part.SetDeliverable(og.gate.Watermark())
	} else {
		og.part.SetDeliverable(queue.Unlimited)
	}
}

// planLocked records the in-sync set replica.InSyncPlan chooses, when it
// differs from the recorded one (one write in flight per partition).
func (og *ownedGate) planLocked(p cluster.Partition, snap *cluster.Snapshot, book map[core.NodeID]followerProgress, policyAcks int, rp settings.Replication, now time.Time) {
	local, _ := og.gate.State()
	if n := len(og.marks); n == 0 || now.Sub(og.marks[n-1].at) >= 100*time.Millisecond {
		og.marks = append(og.marks, localMark{at: now, next: local})
	}
	isrTimeout := settings.Ms(rp.ISRTimeoutMS)
	var behind uint64
	cut := 0
	for i, m := range og.marks {
		if now.Sub(m.at) < isrTimeout {
			break
		}
		behind, cut = m.next, i
	}
	og.marks = og.marks[cut:] // keep the newest mark older than the timeout
	if og.writing {
		return
	}
	plan := replica.InSyncPlan{Acks: policyAcks, Confirmed: og.gate.Confirmed(), Behind: behind}
	for _, id := range og.inSync {
		plan.InSync = append(plan.InSync, string(id))
	}
	seen := make(map[core.NodeID]bool)
	for _, id := range append(slices.Clone(p.Followers), og.inSync...) {
		if seen[id] {
			continue
		}
		seen[id] = true
		fp, reported := book[id]
		plan.Nodes = append(plan.Nodes, replica.Candidate{ID: string(id), Follower: p.HasFollower(id),
			Live: snap.Live(id), Reported: reported, Next: fp.durableNext})
	}
	next := plan.Next()
	// The record claims what the new set surely holds: the policy's
	// copies, or fewer while too few members hold every confirmed record.
	holders := 0
	for _, c := range plan.Nodes {
		if c.Reported && c.Next >= plan.Confirmed && slices.Contains(next, c.ID) {
			holders++
		}
	}
	acks := min(policyAcks, holders)
	nextIDs := make([]core.NodeID, len(next))
	for i, id := range next {
		nextIDs[i] = core.NodeID(id)
	}
	if slices.Equal(nextIDs, og.inSync) && acks == og.acks {
		return
	}
	if slices.Equal(nextIDs, og.inSync) && acks < og.acks && slices.ContainsFunc(plan.Nodes, func(c replica.Candidate) bool {
		return !c.Reported && slices.Contains(next, c.ID)
	}) {
		return // a member has not reported to this owner yet (it just took over): wait for it before lowering the claim
	}
	og.writing = true
	epoch, from := og.epoch, og.inSync
	go og.record(epoch, from, nextIDs, acks)
}

// record writes a planned in-sync set; the gate follows the record once
// it is written (counting a member the record does not name yet would
// break the invariant).
func (og *ownedGate) record(epoch uint64, from, to []core.NodeID, acks int) {
	c := og.gs.c
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	version, err := c.cl.SetInSync(ctx, og.ref, epoch, to, acks)
	cancel()
	gs := og.gs
	gs.mu.Lock()
	defer gs.mu.Unlock()
	og.writing = false
	log := c.b.log.With("component", "replication", "partition", og.ref.String(), "epoch", epoch)
	if err != nil {
		if msg := err.Error(); msg != og.lastFail {
			log.Warn("recording the in-sync set failed; retrying", "err", err)
			og.lastFail = msg
		}
		return
	}
	og.lastFail = ""
	log.Info("in-sync set changed", "from", from, "to", to, "acks", acks)
	c.isrChanges.Add(1)
	if og.epoch == epoch {
		og.inSync, og.acks, og.version = to, acks, version
		og.configureLocked(c.cl.Snapshot(), c.b.settings.Current().Replication, time.Now())
	}
}
