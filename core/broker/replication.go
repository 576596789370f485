package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/peer"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/replica"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// Replication in a cluster broker (docs/ARCHITECTURE.md#replication): as
// an owner, this broker serves its followers' replication connections
// (the session layer hands their ops to replicationSource); as a
// follower, it keeps one replica per queue partition the cluster view
// says it follows, fed over its own @node connection to the owner.

// replicationSource serves followers of the partitions this broker owns.
func (c *coordinated) replicationSource() *replica.Source {
	progress := func(k wire.QueueKey, follower string, msgNext, eventNext uint64) {
		c.progress.note(k, follower, msgNext, eventNext)
		c.gates.progress(refOf(k), core.NodeID(follower), msgNext)
	}
	return &replica.Source{Lookup: c.ownedForReplication, Progress: progress, Logger: c.b.log.With("component", "replication")}
}

// progressBook is what the followers of this broker's partitions last
// reported (replica.Source.Progress), for the admin view and the metrics.
type progressBook struct {
	mu sync.Mutex
	m  map[core.PartitionRef]map[core.NodeID]followerProgress
}

// followerProgress is one follower's last durable progress report.
type followerProgress struct {
	durableNext uint64 // every record below it is on the follower's disk
	at          time.Time
}

func (pb *progressBook) note(k wire.QueueKey, follower string, msgNext, _ uint64) {
	ref := refOf(k)
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if pb.m == nil {
		pb.m = make(map[core.PartitionRef]map[core.NodeID]followerProgress)
	}
	byNode := pb.m[ref]
	if byNode == nil {
		byNode = make(map[core.NodeID]followerProgress)
		pb.m[ref] = byNode
	}
	byNode[core.NodeID(follower)] = followerProgress{durableNext: msgNext, at: time.Now()}
}

// forget drops the reports for ref: they were made to an earlier owner
// period of this process, and a follower's log may have been cut since.
func (pb *progressBook) forget(ref core.PartitionRef) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	delete(pb.m, ref)
}

// forPartition returns the followers' last reports for ref.
func (pb *progressBook) forPartition(ref core.PartitionRef) map[core.NodeID]followerProgress {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return maps.Clone(pb.m[ref])
}

// refOf names the partition of a wire queue key.
func refOf(k wire.QueueKey) core.PartitionRef {
	return core.PartitionRef{Topic: k.Topic, Group: k.Group.Value, Partition: k.Partition}
}

// keysOf is the engine's and the wire's key of a partition.
func keysOf(ref core.PartitionRef) (queue.Key, wire.QueueKey) {
	key := queueKey(ref.Topic, ref.Group)
	return key, wire.QueueKey{Topic: ref.Topic, Group: key.Group, Partition: ref.Partition}
}

// queueKey is the engine's key of a queue named by topic and group, ""
// being the default group.
func queueKey(topic, group string) queue.Key {
	key := queue.Key{Topic: topic}
	if group != "" {
		key.Group = wire.Some(group)
	}
	return key
}

func (pb *progressBook) get(ref core.PartitionRef, node core.NodeID) (followerProgress, bool) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	fp, ok := pb.m[ref][node]
	return fp, ok
}

// followerLag is how far a follower's durable copy of a partition trails
// its owner's log.
type followerLag struct {
	records uint64
	// bytes estimates the records' size from the log's mean record size
	// (storage.Partition.Size over Bounds).
	bytes uint64
}

// lag returns how far follower node's durable copy of ref trails this
// owner's log, when the node has reported progress and the partition is
// open here.
func (c *coordinated) lag(ref core.PartitionRef, node core.NodeID) (fp followerProgress, lag followerLag, ok bool) {
	fp, ok = c.progress.get(ref, node)
	if !ok {
		return fp, lag, false
	}
	rp, err := replicatedOf(c.b.queues, ref)
	if err != nil {
		return fp, lag, false
	}
	lg, err := rp.ReplicationLog()
	if err != nil {
		return fp, lag, false
	}
	first, next := lg.Bounds()
	lag.records = next - min(next, fp.durableNext)
	if lag.records > 0 && next > first {
		lag.bytes = uint64(float64(lag.records) * float64(lg.Size()) / float64(next-first))
	}
	return fp, lag, true
}

// maxLag is the largest lag of a live follower of a partition this node
// owns, over the followers that reported progress, in records and in
// bytes (each the largest over partitions).
func (c *coordinated) maxLag() (worst followerLag) {
	c.cl.Snapshot().AllPartitions(func(p cluster.Partition) {
		if p.Node != c.self.ID {
			return
		}
		for _, f := range p.Followers {
			if _, lag, ok := c.lag(p.Ref, f); ok {
				worst.records = max(worst.records, lag.records)
				worst.bytes = max(worst.bytes, lag.bytes)
			}
		}
	})
	return worst
}

// ownedForReplication finds a partition this broker owns for a follower:
// follower must be one of its followers in this broker's view ("" for a
// checkpoint export, which names no follower; the connection is @node).
func (c *coordinated) ownedForReplication(k wire.QueueKey, follower string) (replica.Owned, error) {
	ref := refOf(k)
	p, ok := c.cl.Snapshot().Partition(ref)
	switch {
	case !ok:
		return replica.Owned{}, fmt.Errorf("partition %s is not declared", ref)
	case !p.OwnedBy(c.self.ID):
		return replica.Owned{}, fmt.Errorf("this broker (%s) does not own partition %s", c.self.ID, ref)
	case follower != "" && !p.HasFollower(core.NodeID(follower)):
		return replica.Owned{}, fmt.Errorf("node %s does not follow partition %s (epoch %d)", follower, ref, p.Epoch)
	}
	rp, err := replicatedOf(c.b.queues, ref)
	if err != nil {
		return replica.Owned{}, err
	}
	lg, err := rp.ReplicationLog()
	if err != nil {
		return replica.Owned{}, err
	}
	return replica.Owned{Log: lg, Epoch: p.Epoch, Checkpoint: rp.ReplicationCheckpoint}, nil
}

// replicatedPartition is an engine partition as replication uses it: a
// queue's (*queue.Partition) or a durable stream's
// (*queue.StreamPartition).
type replicatedPartition interface {
	ReplicationLog() (*storage.Partition, error)
	ReplicationCheckpoint() (eventNext uint64, settled, engine []byte)
}

// replicatedOf returns qm's partition ref (a queue's, or a stream's when
// the topic is one), opening it when it is not open yet: what replication
// and backups read.
func replicatedOf(qm *queue.Manager, ref core.PartitionRef) (replicatedPartition, error) {
	if ref.Group == "" {
		if k, ok := qm.Kind(ref.Topic); ok && k == queue.KindStream {
			sp, err := qm.StreamPartition(ref.Topic, ref.Partition)
			if err != nil {
				return nil, err
			}
			return sp, nil
		}
	}
	key, _ := keysOf(ref)
	qp, err := qm.Partition(key, ref.Partition)
	if err != nil {
		return nil, err
	}
	return qp, nil
}

// followers runs this broker's replicas: one goroutine per queue or
// durable stream partition it follows.
type followers struct {
	c       *coordinated
	mu      sync.Mutex
	running map[core.PartitionRef]*following
	// This node's LabelTails: tailsWant is the value to publish,
	// tailsSent the value last written (both under tailsMu, held only
	// briefly: the cluster loop sets tailsWant); tailsWrite, a one-slot
	// semaphore, serialises the writes. It is a channel, not a mutex,
	// because its holder waits between retries: a writer that may wait
	// long is then itself waiting on a channel (and core/sim's simulated
	// clock, which moves only while every goroutine waits on a channel or
	// a timer, keeps moving).
	tailsMu              sync.Mutex
	tailsWant, tailsSent string
	tailsWrite           chan struct{}
	// stats counts the replicas' work (metrics).
	stats replica.FollowerStats
}

// following is one running replica.
type following struct {
	owner  core.NodeID
	cancel context.CancelFunc
	done   chan struct{}
	fw     *replica.Follower
	log    atomic.Pointer[storage.Partition] // the open replica, for tests
	// fenced is the assignment epoch this replica fenced on evidence that
	// its owner crashed (0: none): it acknowledges nothing more until the
	// assignment moves on or this node leaves the in-sync set (fenceHolds).
	fenced atomic.Uint64
}

// reconcile starts a replica for every queue partition and durable
// stream partition snap says this node follows (and another node owns) and stops the others — a
// partition this node now owns is closed as a replica before the engine
// serves it. Called from the cluster loop after the catalog is applied.
func (f *followers) reconcile(snap *cluster.Snapshot) {
	if f.c.b.links == nil {
		return // no transport to reach owners with
	}
	self := f.c.self.ID
	want := make(map[core.PartitionRef]core.NodeID)
	add := func(parts []cluster.Partition) {
		for _, p := range parts {
			if p.Placed() && p.Node != self && p.HasFollower(self) {
				want[p.Ref] = p.Node
			}
		}
	}
	for _, q := range snap.Queues {
		add(q.Parts)
	}
	for _, st := range snap.Streams {
		if st.Info.Replicated() {
			add(st.Parts)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running == nil {
		f.running = make(map[core.PartitionRef]*following)
	}
	for ref, fl := range f.running {
		if owner, ok := want[ref]; !ok || owner != fl.owner {
			fl.cancel()
			<-fl.done
			delete(f.running, ref)
		}
	}
	for ref, owner := range want {
		if _, ok := f.running[ref]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		_, wkey := keysOf(ref)
		fl := &following{owner: owner, cancel: cancel, done: make(chan struct{}),
			fw: &replica.Follower{Key: wkey, NodeID: string(self), Stats: &f.stats}}
		f.running[ref] = fl
		go f.follow(ctx, ref, fl)
	}
	f.publishTailsLocked(snap)
}

// publishTailsLocked publishes this node's durable tails of the
// partitions it follows in sync whose owner is not live (core.LabelTails):
// what the controller reads to choose whom to promote
// (core/cluster/failover.go). The write runs in the background; "" clears
// the label once no owner is missing.
func (f *followers) publishTailsLocked(snap *cluster.Snapshot) {
	self := f.c.self.ID
	tails := make(map[core.PartitionRef]cluster.Tail)
	for ref, fl := range f.running {
		p, ok := snap.Partition(ref)
		if !ok || p.Node != fl.owner || !slices.Contains(p.InSync, self) {
			continue
		}
		fenced := fl.fenced.Load() == p.Epoch
		if snap.Live(fl.owner) && !fenced {
			continue
		}
		tails[ref] = cluster.Tail{Epoch: p.Epoch, Next: fl.fw.DurableNext(), Fenced: fenced}
	}
	f.tailsMu.Lock()
	f.tailsWant = cluster.FormatTails(tails)
	same := f.tailsWant == f.tailsSent
	f.tailsMu.Unlock()
	if same {
		return // the common case: no owner is missing, and none was
	}
	go func() { // each writes the newest value, so the last one wins
		select {
		case f.tailsWrite <- struct{}{}:
			defer func() { <-f.tailsWrite }()
		case <-f.c.stop:
			return
		}
		// Retried until written or superseded: a failover waits for
		// these tails, and coordination may be electing a new leader
		// right then (the dead owner may have been the raft leader).
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
			f.tailsMu.Lock()
			v, sent := f.tailsWant, f.tailsSent
			f.tailsMu.Unlock()
			if v == sent {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
			err := f.c.cl.SetLabel(ctx, core.LabelTails, v)
			cancel()
			if err == nil {
				if v != "" {
					f.c.b.log.Info("the owner of partitions this broker follows is not live or crashed; published their tails", "tails", v)
				}
				f.tailsMu.Lock()
				f.tailsSent = v
				f.tailsMu.Unlock()
				return
			}
			if wait == 100*time.Millisecond { // once per write, not per retry
				f.c.b.log.Warn("publishing replica tails for a failover failed; retrying until it succeeds", "err", err)
			}
			select {
			case <-f.c.stop:
				return
			case <-time.After(wait):
			}
		}
	}()
}

// republishTails publishes the tails again from the current snapshot (a
// replica fenced or lifted its fence). It runs apart: a replica's
// goroutine must not wait for f.mu, which reconcile holds while it waits
// for replicas to stop.
func (f *followers) republishTails() {
	go func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.publishTailsLocked(f.c.cl.Snapshot())
	}()
}

// Crash evidence (docs/cluster.md#replication). When a replica's stream
// from its owner drops (the connection ended, not the owner) and the
// owner's host then answers that nothing listens on its peer address, the
// owner's process is gone. The replica fences: it acknowledges nothing
// more of the partition's epoch and publishes its tail as final
// (cluster.Tail.Fenced). Once every member of the recorded in-sync set has
// fenced, the controller promotes one at once instead of waiting for the
// owner's lease to end: should the owner still run, it cannot confirm
// another record, as no member will acknowledge it (core/cluster/failover.go,
// fencedByAll). A fence holds while the assignment stays in that epoch with
// this node in its in-sync set; once the epoch moves, or the owner took
// this node out of the set, the fence no longer counts for a promotion
// and the replica follows again.

// connectionLost reports whether a replica's run ended because its
// connection to the owner went (not because the owner ended the stream).
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, core.ErrStreamAborted) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// fence fences ref's replica at the assignment's epoch when this node is
// in its in-sync set under fl's owner (otherwise its fence would not
// count, and it just retries), and reports whether it did.
func (f *followers) fence(ref core.PartitionRef, fl *following, log *slog.Logger) bool {
	p, ok := f.c.cl.Snapshot().Partition(ref)
	if !ok || p.Node != fl.owner || !slices.Contains(p.InSync, f.c.self.ID) {
		return false
	}
	fl.fenced.Store(p.Epoch)
	log.Warn("the owner's stream dropped and nothing listens on its address: it crashed; this replica acknowledges nothing more of this epoch and publishes its tail for a failover",
		"epoch", p.Epoch, "tail", fl.fw.DurableNext())
	f.republishTails()
	return true
}

// fenceHolds reports whether ref's replica, fenced at epoch, must stay
// fenced: the assignment is still in that epoch under fl's owner with
// this node in sync.
func (f *followers) fenceHolds(ref core.PartitionRef, fl *following, epoch uint64) bool {
	p, ok := f.c.cl.Snapshot().Partition(ref)
	return ok && p.Epoch == epoch && p.Node == fl.owner && slices.Contains(p.InSync, f.c.self.ID)
}

// stopAll stops every replica (the broker is leaving).
func (f *followers) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ref, fl := range f.running {
		fl.cancel()
		<-fl.done
		delete(f.running, ref)
	}
}

// count returns how many replicas run.
func (f *followers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

// replica returns ref's open replica, if this node runs one (tests).
func (f *followers) replica(ref core.PartitionRef) *storage.Partition {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.running[ref]; fl != nil {
		return fl.log.Load()
	}
	return nil
}

// follow keeps ref's replica fed from its owner until ctx ends: it opens
// the replica, connects to the owner, runs the follower, and starts again
// after a failure (at once after "checkpoint required", after a growing
// pause otherwise), cutting the replica back when it went past the
// owner's log.
func (f *followers) follow(ctx context.Context, ref core.PartitionRef, fl *following) {
	defer close(fl.done)
	b := f.c.b
	log := b.log.With("component", "replication", "partition", ref.String(), "owner", string(fl.owner))
	key, _ := keysOf(ref)
	login := peer.Login{Self: f.c.self.ID, Secret: string(b.secret)}
	fw := fl.fw
	fw.Logger = log
	var rep *storage.Partition
	defer func() {
		if rep != nil {
			if err := b.queues.CloseReplica(key, ref.Partition); err != nil {
				log.Warn("closing the replica", "err", err)
			}
		}
	}()
	pause := 100 * time.Millisecond
	var lastErr string
	dropped := false // the last run ended because the connection to the owner went
	for ctx.Err() == nil {
		if e := fl.fenced.Load(); e != 0 {
			if f.fenceHolds(ref, fl, e) {
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			fl.fenced.Store(0)
			log.Info("the replica's fence no longer counts (the assignment moved, or this node left the in-sync set); following again", "fenced_epoch", e)
			f.republishTails()
		}
		began := time.Now()
		ran := false
		err := func() error {
			if rep == nil {
				r, err := b.queues.OpenReplica(key, ref.Partition)
				if err != nil {
					return err
				}
				rep = r
			}
			fw.Log = rep
			fl.log.Store(rep)
			m := f.c.cl.Snapshot().Members[fl.owner]
			if m == nil || !m.Live || m.Info.PeerAddr == "" {
				return fmt.Errorf("the owner %s is not live", fl.owner)
			}
			link, err := b.links.Get(ctx, core.Peer{ID: fl.owner, Addr: m.Info.PeerAddr})
			if err != nil {
				return err
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			s, err := login.DialRaw(dctx, link)
			cancel()
			if err != nil {
				return err
			}
			defer s.Close()
			ran = true
			return fw.Run(ctx, s)
		}()
		if ctx.Err() != nil {
			return
		}
		if dropped && !ran && errors.Is(err, core.ErrPeerNotListening) && f.fence(ref, fl, log) {
			dropped = false
			continue
		}
		dropped = ran && connectionLost(err) || dropped && !ran && !errors.Is(err, core.ErrPeerNotListening)
		var de *replica.DivergedError
		var be *replica.BehindError
		switch {
		case errors.As(err, &be) && rep != nil:
			log.Info("the owner's log starts past this replica's end (its retention deleted settled records); the replica starts again there",
				"owner_first", be.OwnerFirst, "replica_next", be.FollowerNext)
			r, rerr := b.queues.ResetReplica(key, ref.Partition, be.OwnerFirst)
			if rerr != nil {
				rep = nil // ResetReplica closed it
				log.Error("starting the replica again failed", "err", rerr)
			} else {
				rep = r
			}
			continue
		case errors.As(err, &de) && rep != nil:
			log.Warn("the replica holds records the owner does not; cutting them", "from", de.OwnerNext, "replica_next", de.FollowerNext)
			r, terr := b.queues.TruncateReplica(key, ref.Partition, de.OwnerNext)
			if terr != nil {
				rep = nil // TruncateReplica closed it
				log.Error("cutting the replica failed", "err", terr)
			} else {
				rep = r
			}
			continue
		case errors.Is(err, replica.ErrCheckpointRequired):
			log.Debug("replication starts again from a checkpoint", "reason", err)
			pause = 100 * time.Millisecond
			continue
		}
		if time.Since(began) > 10*time.Second {
			pause = 100 * time.Millisecond // it ran a while: a new failure, not the same one again
		}
		if msg := fmt.Sprint(err); msg != lastErr { // log once per change
			log.Warn("replication interrupted; retrying", "err", err)
			lastErr = msg
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// closeMoved ends the local subscriptions of the partitions this node
// owned in the previous snapshot and another node owns in snap (a drain's
// handoff, or a failover while this node was cut off or frozen): their
// clients get SUBSCRIPTION_CLOSED(owner_moved) and subscribe again at the
// new owner. Then the engine releases those partitions, so that this node
// can follow them (its replica opens the same log). Run goroutine only.
func (c *coordinated) closeMoved(snap *cluster.Snapshot) {
	owned := make(map[core.PartitionRef]bool, len(c.owned))
	snap.AllPartitions(func(p cluster.Partition) {
		if p.Node == c.self.ID {
			owned[p.Ref] = true
		}
	})
	moved := make(map[core.PartitionRef]bool)
	for ref := range c.owned {
		if p, ok := snap.Partition(ref); ok && p.Placed() && p.Node != c.self.ID {
			moved[ref] = true
		}
	}
	c.owned = owned
	if len(moved) == 0 {
		return
	}
	n := 0
	if c.b.sessions != nil {
		n = c.b.sessions.CloseMoved(func(topic, group string, partition uint32) bool {
			return moved[core.PartitionRef{Topic: topic, Group: group, Partition: partition}]
		})
	}
	for ref := range moved {
		key, _ := keysOf(ref)
		c.gates.detach(ref)
		if err := c.b.queues.Release(key, ref.Partition); err != nil {
			c.b.log.Warn("releasing a partition that moved to another broker", "partition", ref.String(), "err", err)
		}
	}
	c.demotions.Add(uint64(len(moved)))
	c.b.log.Info("partitions moved to other brokers: local subscriptions closed (owner_moved), partitions released",
		"partitions", len(moved), "subscriptions", n)
}
