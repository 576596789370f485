package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// Repartition: changing a queue's partition count in a cluster
// (docs/repartition.md). One record per transition, at
// repartition/<topic>/<group|@default>, is the durable marker; the queue's
// catalog entry keeps the routing truth (partition count and partitioning
// version). A transition goes through these steps, each one a
// compare-and-set that a crash anywhere leaves to be redone:
//
//  1. Repartition writes the marker. The view then lists every partition
//     either layout has (max of the two counts), so placement gives the
//     new partitions of a grow owners and followers. Their owners hold
//     them: nothing is delivered from them yet.
//  2. Once every one of them is placed, the controller raises the queue's
//     partition count and partitioning version in the catalog entry: the
//     cutover. Producers routed by the old layout are fenced (S-118) and
//     re-route.
//  3. The owner of each old partition (a source) records its cutover
//     offset — everything below it was routed by the old layout,
//     everything from it by the new one — and, once every message below it
//     is settled, that it drained.
//  4. A partition whose new messages must wait for a source (SourcesOf)
//     starts delivering them when the sources drained: a key's messages
//     keep their order.
//  5. The controller stamps the topology generation of the cutover and,
//     once every source drained and either the cluster's adoption floor
//     reached that generation or the adoption timeout passed, finalizes:
//     the partitions a shrink retires lose their assignments (their
//     owners drop them), then the marker goes.
const prefixRepartition = "repartition/"

// DefaultAdoptionTimeout is how long finalize waits, after every source
// drained, for the cluster's adoption floor to reach the cutover's
// generation (S-125, repartition_adoption_timeout_ms).
const DefaultAdoptionTimeout = 30 * time.Second

func repartitionKey(topic, group string) string {
	return prefixRepartition + topic + "/" + groupSeg(group)
}

// Repartition is a partition count change in progress.
type Repartition struct {
	Topic string `json:"topic"`
	Group string `json:"group,omitempty"`
	// From is the partition count before, To the count asked for.
	From uint32 `json:"from"`
	To   uint32 `json:"to"`
	// BaseVersion is the partitioning version before; the cutover raises
	// it to BaseVersion+1.
	BaseVersion uint64    `json:"base_version"`
	By          string    `json:"by,omitempty"` // the admin user, for the audit trail
	At          time.Time `json:"at"`
	// Generation is the topology generation of the first view the
	// controller saw with the raised version (0: not stamped yet).
	Generation uint64 `json:"generation,omitempty"`
	// Sources holds, per old partition, what its owner recorded.
	Sources map[uint32]Source `json:"sources,omitempty"`
	// DrainedAt is when the controller first saw every source drained.
	DrainedAt time.Time `json:"drained_at,omitzero"`
	// Version is the record's coordination version.
	Version uint64 `json:"-"`
}

// Source is what the owner of one old partition recorded.
type Source struct {
	// Cutover is the first offset routed by the new layout.
	Cutover uint64 `json:"cutover"`
	// Epoch is the owner's epoch when it recorded the cutover.
	Epoch uint64 `json:"epoch"`
	// Drained: every message below Cutover was settled.
	Drained bool `json:"drained,omitempty"`
}

// Name is "queue orders/@default", for logs and errors.
func (r *Repartition) Name() string { return "queue " + r.Topic + "/" + groupSeg(r.Group) }

// Grow reports whether the transition adds partitions.
func (r *Repartition) Grow() bool { return r.To > r.From }

// Width is the number of partitions that exist during the transition:
// both layouts' partitions.
func (r *Repartition) Width() uint32 { return max(r.From, r.To) }

// CutOver reports whether the catalog entry info carries the raised
// partitioning version: producers are fenced to the new layout.
func (r *Repartition) CutOver(info queue.QueueInfo) bool {
	return info.PartitioningVersion > r.BaseVersion
}

// Retiring reports whether partition n goes at finalize (a shrink's
// partitions at or past the new count).
func (r *Repartition) Retiring(n uint32) bool { return n >= r.To }

// SourcesOf lists the old partitions that must drain their pre-cutover
// messages before partition n delivers messages routed by the new layout
// (S-123, S-124): for a grow, the new partition n's source n mod From;
// for a shrink, the other partitions that merge into the survivor n. nil
// when n waits for nothing (an old partition of a grow, or one a shrink
// retires).
func (r *Repartition) SourcesOf(n uint32) []uint32 {
	if r.Grow() {
		if n < r.From {
			return nil
		}
		return []uint32{n % r.From}
	}
	if n >= r.To {
		return nil
	}
	var out []uint32
	for p := n + r.To; p < r.From; p += r.To {
		out = append(out, p)
	}
	return out
}

// Drained reports whether every source named drained.
func (r *Repartition) Drained(sources []uint32) bool {
	for _, p := range sources {
		if !r.Sources[p].Drained {
			return false
		}
	}
	return true
}

// AllDrained reports whether every old partition drained.
func (r *Repartition) AllDrained() bool {
	for p := range r.From {
		if !r.Sources[p].Drained {
			return false
		}
	}
	return true
}

func decodeRepartition(b []byte, version uint64) (*Repartition, bool) {
	var r Repartition
	if json.Unmarshal(b, &r) != nil || r.Topic == "" || r.From == 0 || r.To == 0 || r.From == r.To {
		return nil, false
	}
	r.Version = version
	return &r, true
}

// readRepartition reads the marker of a queue linearizably (nil: none).
func (c *Cluster) readRepartition(ctx context.Context, topic, group string) (*Repartition, error) {
	return readRecord(ctx, c, repartitionKey(topic, group), "repartition", decodeRepartition)
}

// Repartition starts changing the partition count of a queue (group ""
// being the default group) to count (S-122 … S-124) and waits until this
// node's view holds the marker. It returns nil and no error when count is
// the current count and nothing is in progress (a no-op). Refused with
// ErrBadRequest: a count of 0, a grow that is not a multiple of the
// current count, a shrink that does not divide it, a stream, a
// transition of the queue that is unfinished. ErrNotFound: the queue is
// not declared (or is being deleted).
func (c *Cluster) Repartition(ctx context.Context, topic, group string, count uint32, user string) (*Repartition, error) {
	if count == 0 {
		return nil, core.Errorf(core.ErrBadRequest, "partition_count must be at least 1")
	}
	name := displayName("queue", topic, group)
	for range maxDeclareRounds {
		if prev, err := c.readRepartition(ctx, topic, group); err != nil {
			return nil, err
		} else if prev != nil {
			return nil, core.Errorf(core.ErrBadRequest, "queue %s is still being repartitioned from %d to %d partitions; wait until that finishes",
				name, prev.From, prev.To)
		}
		kinds, err := c.kindOf(ctx, topic)
		if err != nil {
			return nil, err
		}
		if k, ok := kinds(topic); ok && k == queue.KindStream {
			return nil, core.Errorf(core.ErrBadRequest, "%q is a stream; a stream's partitions cannot be repartitioned (its consumers address records by partition and offset)", topic)
		}
		kv, err := c.coord.Get(ctx, queueKey(topic, group))
		if err != nil {
			return nil, unavailable(err)
		}
		if kv.Version == 0 {
			return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", name)
		}
		if t, err := c.readTombstone(ctx, tombstoneKey("queue", topic, group)); err != nil {
			return nil, err
		} else if t != nil && !t.Finished {
			return nil, core.Errorf(core.ErrNotFound, "queue %s is being deleted", name)
		}
		info, err := queue.DecodeQueueInfo(kv.Value)
		if err != nil {
			return nil, core.Errorf(core.ErrInternal, "catalog entry %s is unreadable: %v", kv.Key, err)
		}
		from := info.PartitionCount
		switch {
		case count == from:
			return nil, nil
		case count > from && count%from != 0:
			return nil, core.Errorf(core.ErrBadRequest, "queue %s has %d partitions: a grow must go to a multiple of that (%d, %d, …), not %d",
				name, from, 2*from, 3*from, count)
		case count < from && from%count != 0:
			return nil, core.Errorf(core.ErrBadRequest, "queue %s has %d partitions: a shrink must go to a divisor of that, not %d", name, from, count)
		}
		r := Repartition{Topic: topic, Group: group, From: from, To: count, BaseVersion: info.PartitioningVersion, By: user, At: c.opts.Now()}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, core.Errorf(core.ErrInternal, "encode repartition: %v", err)
		}
		v, err := c.coord.CompareAndSet(ctx, repartitionKey(topic, group), b, 0)
		if errors.Is(err, core.ErrVersionConflict) {
			continue // another request won: report it
		}
		if err != nil {
			return nil, unavailable(err)
		}
		r.Version = v
		c.awaitIndex(ctx, v)
		c.log.Info("repartition started", "queue", r.Name(), "from", r.From, "to", r.To, "by", user)
		return &r, nil
	}
	return nil, core.Errorf(core.ErrUnavailable, "repartition %s: concurrent changes kept conflicting; retry", name)
}

// updateRepartition applies change to the marker of a queue under
// compare-and-set, reading it again on a conflict. change returns false
// to leave the record as it is. A missing marker is no error.
func (c *Cluster) updateRepartition(ctx context.Context, topic, group string, change func(*Repartition) bool) error {
	return updateRecord(ctx, c, repartitionKey(topic, group), "repartition", decodeRepartition, change)
}

// RecordCutover records, as the owner of old partition n under epoch,
// the first offset it stores under the new layout. A cutover already
// recorded stays (a new owner after a failover inherits it); an
// unfinished transition is required.
func (c *Cluster) RecordCutover(ctx context.Context, ref core.PartitionRef, epoch, cutover uint64) error {
	return c.updateRepartition(ctx, ref.Topic, ref.Group, func(r *Repartition) bool {
		if ref.Partition >= r.From {
			return false
		}
		if _, ok := r.Sources[ref.Partition]; ok {
			return false
		}
		if r.Sources == nil {
			r.Sources = make(map[uint32]Source)
		}
		r.Sources[ref.Partition] = Source{Cutover: cutover, Epoch: epoch}
		return true
	})
}

// RecordDrained records that every message of old partition n below its
// cutover was settled.
func (c *Cluster) RecordDrained(ctx context.Context, ref core.PartitionRef) error {
	return c.updateRepartition(ctx, ref.Topic, ref.Group, func(r *Repartition) bool {
		s, ok := r.Sources[ref.Partition]
		if !ok || s.Drained {
			return false
		}
		s.Drained = true
		r.Sources[ref.Partition] = s
		return true
	})
}

// advanceRepartitions is the controller's part (steps 2 and 5 above).
func (c *Cluster) advanceRepartitions(ctx context.Context, snap *Snapshot) {
	for _, q := range snap.Queues {
		r := q.Repartition
		if r == nil {
			continue
		}
		if err := c.advanceRepartition(ctx, snap, q, r); err != nil && ctx.Err() == nil {
			c.log.Warn("repartition step failed; the next pass retries", "queue", r.Name(), "err", err)
		}
	}
}

func (c *Cluster) advanceRepartition(ctx context.Context, snap *Snapshot, q *Queue, r *Repartition) error {
	info := q.Info
	if !r.CutOver(info) {
		if info.PartitioningVersion != r.BaseVersion || info.PartitionCount != r.From {
			// A marker written from a stale read (a transition finished
			// between the read and the write): it can never apply.
			c.log.Warn("dropping a repartition record that does not match the queue", "queue", r.Name(),
				"record_from", r.From, "queue_partitions", info.PartitionCount)
			return c.coord.CompareAndDelete(ctx, repartitionKey(r.Topic, r.Group), r.Version)
		}
		for _, p := range q.Parts {
			if !p.Placed() {
				return nil // step 1 goes on
			}
		}
		return c.cutover(ctx, r)
	}
	if r.Generation == 0 {
		return c.updateRepartition(ctx, r.Topic, r.Group, func(cur *Repartition) bool {
			if cur.Generation != 0 {
				return false
			}
			cur.Generation = snap.Generation
			return true
		})
	}
	if !r.AllDrained() {
		return nil
	}
	now := c.opts.Now()
	if r.DrainedAt.IsZero() {
		return c.updateRepartition(ctx, r.Topic, r.Group, func(cur *Repartition) bool {
			if !cur.DrainedAt.IsZero() {
				return false
			}
			cur.DrainedAt = now
			return true
		})
	}
	// Nodes whose clients never acknowledged a topology publish no
	// adoption level; with none at all, no client holds an older one.
	if floor, ok := snap.AdoptionFloor(); ok && floor < r.Generation && now.Sub(r.DrainedAt) < c.adoptionTimeout() {
		return nil
	}
	return c.finalize(ctx, q, r)
}

// SetAdoptionTimeout gives the controller
// routing.repartition_adoption_timeout_ms, read at every pass; until it
// is called, DefaultAdoptionTimeout applies.
func (c *Cluster) SetAdoptionTimeout(f func() time.Duration) { c.adoptTimeout.Store(&f) }

func (c *Cluster) adoptionTimeout() time.Duration {
	if f := c.adoptTimeout.Load(); f != nil {
		return (*f)()
	}
	return DefaultAdoptionTimeout
}

// cutover raises the queue's partition count and partitioning version
// (step 2), when the catalog entry still holds the layout the marker
// started from.
func (c *Cluster) cutover(ctx context.Context, r *Repartition) error {
	key := queueKey(r.Topic, r.Group)
	kv, err := c.coord.Get(ctx, key)
	if err != nil || kv.Version == 0 {
		return err
	}
	info, err := queue.DecodeQueueInfo(kv.Value)
	if err != nil {
		return fmt.Errorf("catalog entry %s: %w", key, err)
	}
	if info.PartitioningVersion != r.BaseVersion || info.PartitionCount != r.From {
		return nil // done already, or the next pass drops a stale marker
	}
	info.PartitionCount, info.PartitioningVersion = r.To, r.BaseVersion+1
	b, err := queue.EncodeQueueInfo(info)
	if err != nil {
		return err
	}
	if _, err := c.coord.CompareAndSet(ctx, key, b, kv.Version); err != nil && !errors.Is(err, core.ErrVersionConflict) {
		return err
	}
	c.log.Info("repartition cut over: producers are fenced to the new layout", "queue", r.Name(), "partitions", r.To,
		"partitioning_version", info.PartitioningVersion)
	return nil
}

// finalize (step 5) removes the assignments of the partitions a shrink
// retires, then the marker. Each removal is compare-and-delete on the
// version just read; a crash or a conflict leaves the marker and the next
// pass goes on from there.
func (c *Cluster) finalize(ctx context.Context, q *Queue, r *Repartition) error {
	for n := r.To; n < r.From; n++ {
		ref := core.PartitionRef{Topic: r.Topic, Group: r.Group, Partition: n}
		kv, err := c.coord.Get(ctx, assignKey(ref))
		if err != nil {
			return err
		}
		if kv.Version == 0 {
			continue
		}
		if err := c.coord.CompareAndDelete(ctx, kv.Key, kv.Version); err != nil {
			return err
		}
	}
	if err := c.coord.CompareAndDelete(ctx, repartitionKey(r.Topic, r.Group), r.Version); err != nil {
		return err
	}
	c.log.Info("repartition finished", "queue", r.Name(), "partitions", r.To, "partitioning_version", q.Info.PartitioningVersion,
		"took", c.opts.Now().Sub(r.At).Round(time.Millisecond).String())
	return nil
}

// RepartitionOf returns the transition in progress of a queue, if any.
func (s *Snapshot) RepartitionOf(topic, group string) *Repartition {
	if q := s.Queue(topic, group); q != nil {
		return q.Repartition
	}
	return nil
}

// parseRepartitionKey splits repartition/<topic>/<group|@default>.
func parseRepartitionKey(k string) (topic, group string, ok bool) {
	rest, ok := strings.CutPrefix(k, prefixRepartition)
	if !ok {
		return "", "", false
	}
	topic, seg, ok := strings.Cut(rest, "/")
	if !ok || topic == "" {
		return "", "", false
	}
	return topic, groupOf(seg), true
}

// attachRepartitions hangs each marker on its queue and widens the
// queue's partitions to both layouts (before the assignments are read).
func (s *Snapshot) attachRepartitions(markers map[queueID]*Repartition) {
	for id, r := range markers {
		q := s.queues[id]
		if q == nil {
			continue
		}
		q.Repartition = r
		for n := uint32(len(q.Parts)); n < r.Width(); n++ {
			q.Parts = append(q.Parts, Partition{Ref: core.PartitionRef{Topic: q.Info.Topic, Group: q.Info.Group.Value, Partition: n}})
		}
	}
}
