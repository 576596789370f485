// Package cluster is the node's view of the cluster and its part in it,
// built once on core.Coordinator so every coordination backend behaves the
// same: the node registry (this node's lease-bound record, heartbeats,
// labels), the replicated catalog, partition assignments with epochs and
// the "written" mark, the placement controller (on the elected leader)
// and the immutable Snapshot the hot path reads.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// Options configure a Cluster.
type Options struct {
	Coordinator core.Coordinator
	// Self is this node's record: id, peer and admin addresses, labels
	// (LabelAdvertise, LabelVisibility).
	Self core.NodeInfo
	// Heartbeat is coordination.heartbeat_interval_ms; TTL is
	// coordination.liveness_ttl_ms (raised to the backend's MinTTL).
	Heartbeat, TTL time.Duration
	Logger         *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Controller false keeps this node out of the placement election
	// (tests); true (the default through Start) campaigns.
	NoController bool
	// TargetFollowers is replication.target_followers, read at every
	// placement pass; nil leaves it to SetTargetFollowers (the broker sets
	// it once the runtime settings document is open).
	TargetFollowers func() int
}

// Cluster is this node's membership and view. Methods are safe for
// concurrent use.
type Cluster struct {
	opts  Options
	coord core.Coordinator
	log   *slog.Logger
	self  core.NodeID

	snap    atomic.Pointer[Snapshot]
	chMu    sync.Mutex
	changed chan struct{}

	leaseMu  sync.Mutex
	lease    core.Lease
	labels   core.Labels
	recorded bool // the live record under lease was written
	// viewFrom is the store index this node's view must reach before it
	// may act as owner under lease: the index of the lease's live record
	// (ServeUntil).
	viewFrom uint64

	written sync.Map // core.PartitionRef → epoch marked written by this node

	leader atomic.Bool

	targetFollowers atomic.Pointer[func() int]
	// adoptTimeout is routing.repartition_adoption_timeout_ms
	// (SetAdoptionTimeout).
	adoptTimeout atomic.Pointer[func() time.Duration]

	labelSource atomic.Pointer[func() core.Labels]
	labelsSent  core.Labels // heartbeat goroutine only

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stats  Stats
}

// Stats are counters for metrics.
type Stats struct {
	SnapshotRebuilds atomic.Uint64
	HeartbeatErrors  atomic.Uint64
	LeaseLosses      atomic.Uint64
	Placements       atomic.Uint64
	// Promotions counts failovers this node's controller wrote: a
	// follower made owner of a written partition whose owner died.
	Promotions atomic.Uint64
	// UnderReplicated is, on the controller, the placed partitions with
	// fewer live followers than the target allows (Snapshot.UnderReplicated)
	// at its last pass; 0 elsewhere.
	UnderReplicated atomic.Int64
}

// Start joins the cluster: it registers this node under a fresh lease,
// waits for the first snapshot (bounded by ctx) and starts the heartbeat,
// the watch and the placement campaign.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Coordinator == nil || opts.Self.ID == "" {
		return nil, errors.New("cluster: Coordinator and Self.ID are required")
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.TTL < 2*opts.Heartbeat {
		opts.TTL = 2 * opts.Heartbeat
	}
	if min := opts.Coordinator.MinTTL(); opts.TTL < min {
		opts.TTL = min
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cluster{
		opts: opts, coord: opts.Coordinator, self: opts.Self.ID,
		log:     opts.Logger.With("node", string(opts.Self.ID)),
		changed: make(chan struct{}),
		labels:  opts.Self.Labels.Clone(),
	}
	if c.labels == nil {
		c.labels = core.Labels{}
	}
	c.labels[core.LabelFollowers] = "1"
	if opts.TargetFollowers != nil {
		c.SetTargetFollowers(opts.TargetFollowers)
	}
	// A lease can end before its first record is written when granting it
	// took longer than its TTL (a cluster still electing its first
	// leader): register again with a fresh one.
	for {
		err := c.register(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, core.ErrLeaseLost) || ctx.Err() != nil {
			return nil, err
		}
		c.log.Info("lease ended before registration completed; registering again", "err", err)
	}
	// The first snapshot is read before Start returns, so callers never
	// see a nil one.
	kvs, idx, err := c.coord.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("cluster: first read: %w", err)
	}
	b := newBuilder()
	c.publish(b.build(nil, kvs, idx))
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go c.watchLoop(b, idx)
	go c.heartbeatLoop()
	if !opts.NoController {
		c.wg.Add(1)
		go c.controllerLoop()
	}
	return c, nil
}

// Self is this node's id.
func (c *Cluster) Self() core.NodeID { return c.self }

// Snapshot is the current view. Never nil after Start.
func (c *Cluster) Snapshot() *Snapshot { return c.snap.Load() }

// Changed returns a channel closed when the next snapshot is published.
func (c *Cluster) Changed() <-chan struct{} {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	return c.changed
}

// IsController reports whether this node currently runs placement.
func (c *Cluster) IsController() bool { return c.leader.Load() }

// Stats exposes the counters.
func (c *Cluster) Stats() *Stats { return &c.stats }

// Margin is the safety margin of ownership (S-138): an owner stops
// confirming at its lease's ValidUntil minus Margin, and the controller
// re-places a dead node's never-written partitions only Margin after its
// lease ended. One heartbeat interval covers a missed renew and clock-rate
// drift between the two machines.
func (c *Cluster) Margin() time.Duration { return c.opts.Heartbeat }

// TTL is the liveness TTL in force (after raising to the backend minimum).
func (c *Cluster) TTL() time.Duration { return c.opts.TTL }

// ServeUntil is until when this node may act as owner: its lease's
// ValidUntil minus Margin — the zero time without a lease, and also until
// this node's view includes the lease's own live record. A node that lost
// its lease (cut off from coordination, or frozen) and registered again
// may find, once its view catches up, that its partitions moved meanwhile;
// before then its view still names it owner in the old epoch, and it must
// not serve them on that.
func (c *Cluster) ServeUntil() time.Time {
	c.leaseMu.Lock()
	l, from := c.lease, c.viewFrom
	c.leaseMu.Unlock()
	if l == nil {
		return time.Time{}
	}
	if s := c.Snapshot(); s == nil || s.Index < from {
		return time.Time{}
	}
	vu := l.ValidUntil()
	if vu.IsZero() {
		return vu
	}
	return vu.Add(-c.Margin())
}

// LeaseValid reports whether this node may act as owner now.
func (c *Cluster) LeaseValid() bool { return c.opts.Now().Before(c.ServeUntil()) }

func (c *Cluster) publish(s *Snapshot) {
	c.snap.Store(s)
	c.stats.SnapshotRebuilds.Add(1)
	c.chMu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.chMu.Unlock()
}

// watchLoop follows the whole key space and publishes a snapshot per
// change. Errors back off and retry; the last snapshot stays in force.
func (c *Cluster) watchLoop(b *builder, idx uint64) {
	defer c.wg.Done()
	backoff := 50 * time.Millisecond
	for c.ctx.Err() == nil {
		kvs, next, err := c.coord.Watch(c.ctx, "", idx)
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			c.log.Debug("cluster watch failed; retrying", "err", err)
			if !c.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if next <= idx {
			continue
		}
		idx = next
		c.publish(b.build(c.Snapshot(), kvs, idx))
	}
}

func (c *Cluster) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// register grants a lease and writes this node's records: the persistent
// member record and the lease-bound live record with its labels.
func (c *Cluster) register(ctx context.Context) error {
	lease, err := c.coord.GrantLease(ctx, c.opts.TTL)
	if err != nil {
		return fmt.Errorf("cluster: grant lease: %w", err)
	}
	info := c.opts.Self
	info.Labels = nil
	b, _ := json.Marshal(info)
	if _, err := c.coord.CompareAndSet(ctx, memberKey(c.self), b, core.AnyVersion); err != nil {
		return fmt.Errorf("cluster: register member: %w", err)
	}
	c.leaseMu.Lock()
	c.lease, c.recorded, c.viewFrom = lease, false, math.MaxUint64
	labels := c.labels.Clone()
	c.leaseMu.Unlock()
	return c.putRecord(ctx, lease, labels)
}

func (c *Cluster) putRecord(ctx context.Context, lease core.Lease, labels core.Labels) error {
	info := c.opts.Self
	info.Labels = labels
	b, _ := json.Marshal(info)
	v, err := lease.Put(ctx, nodeKey(c.self), b, core.AnyVersion)
	if err != nil {
		return fmt.Errorf("cluster: write node record: %w", err)
	}
	c.leaseMu.Lock()
	if c.lease == lease && !c.recorded {
		c.recorded, c.viewFrom = true, v
	}
	c.leaseMu.Unlock()
	return nil
}

// SetLabelSource tells the heartbeat where to read labels this node
// publishes as they change — the topology adoption level (S-120), the
// forwarding session counts, a private node's exposed client addresses —
// each written when its value moved ("" deletes it). The session server
// exists only after the cluster is joined, hence a setter. Of these labels
// only core.LabelPrivateAdvertise is routing content (it moves the
// generation); the others never do.
func (c *Cluster) SetLabelSource(f func() core.Labels) { c.labelSource.Store(&f) }

// publishLabels writes the source's labels that changed since the last
// successful write (heartbeat goroutine only).
func (c *Cluster) publishLabels() {
	f := c.labelSource.Load()
	if f == nil {
		return
	}
	for key, value := range (*f)() {
		if sent, ok := c.labelsSent[key]; ok && sent == value || !ok && value == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.Heartbeat)
		err := c.SetLabel(ctx, key, value)
		cancel()
		if err != nil {
			return
		}
		if c.labelsSent == nil {
			c.labelsSent = core.Labels{}
		}
		c.labelsSent[key] = value
	}
}

// SetLabel changes one of this node's labels ("" deletes it) and writes
// the record at once.
func (c *Cluster) SetLabel(ctx context.Context, key, value string) error {
	c.leaseMu.Lock()
	if c.labels == nil {
		c.labels = core.Labels{}
	}
	if value == "" {
		delete(c.labels, key)
	} else {
		c.labels[key] = value
	}
	lease, labels := c.lease, c.labels.Clone()
	c.leaseMu.Unlock()
	return c.putRecord(ctx, lease, labels)
}

// heartbeatLoop renews the lease every heartbeat interval. A lost lease
// (the cluster declared this node dead) is replaced by a new one and the
// record rewritten: the node comes back as live, and its written
// partitions are still its own.
func (c *Cluster) heartbeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.leaseMu.Lock()
		lease := c.lease
		c.leaseMu.Unlock()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.Heartbeat)
		err := lease.Renew(ctx)
		cancel()
		switch {
		case err == nil:
			c.leaseMu.Lock()
			recorded, labels := c.recorded, c.labels.Clone()
			c.leaseMu.Unlock()
			if !recorded { // a re-registration whose record write failed
				ctx, cancel := context.WithTimeout(c.ctx, c.opts.Heartbeat)
				if err := c.putRecord(ctx, lease, labels); err != nil {
					c.log.Debug("node record write failed", "err", err)
				}
				cancel()
			}
			c.publishLabels()
		case errors.Is(err, core.ErrLeaseLost):
			c.stats.LeaseLosses.Add(1)
			c.log.Warn("liveness lease lost; registering again", "err", err)
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.TTL)
			if err := c.register(ctx); err != nil {
				c.log.Warn("re-registration failed", "err", err)
			}
			cancel()
		default:
			c.stats.HeartbeatErrors.Add(1)
			if c.ctx.Err() == nil {
				c.log.Debug("heartbeat failed", "err", err, "serve_until", c.ServeUntil())
			}
		}
	}
}

// Close leaves the cluster. With revoke, the lease is revoked first so
// peers see this node gone at once (a clean shutdown); without, it
// expires as a crash would.
func (c *Cluster) Close(ctx context.Context, revoke bool) error {
	c.cancel()
	c.wg.Wait()
	if !revoke {
		return nil
	}
	c.leaseMu.Lock()
	lease := c.lease
	c.leaseMu.Unlock()
	return lease.Revoke(ctx)
}
