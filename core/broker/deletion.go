package broker

// Deleting queues and streams (docs/admin.md#delete): on a standalone
// broker the engine drops the name at once; in a cluster the delete
// records a tombstone (core/cluster/tombstone.go) and every node drops its
// own copy when its view holds it (dropDeleted), then confirms.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// deleteWait bounds how long a cluster delete waits for the live brokers
// to confirm before it answers with those still pending.
const deleteWait = 10 * time.Second

// deleteTopic deletes a queue (kind "queue") or a stream. A queue with
// messages in flight is refused (409) unless force.
func (b *Broker) deleteTopic(ctx context.Context, kind, topic, group string, force bool, user string) (any, error) {
	if c := b.adminCluster.Load(); c != nil {
		return b.deleteClustered(ctx, c, kind, topic, group, force, user)
	}
	qm := b.readyQueues()
	if qm == nil {
		return nil, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
	}
	if k, ok := qm.Kind(topic); ok && k.String() != kind {
		return nil, core.Errorf(core.ErrBadRequest, "%s is a %s, not a %s", topic, k, kind)
	}
	d, err := b.dropLocal(kind, topic, group, force)
	if err != nil {
		return nil, err
	}
	b.log.Warn(kind+" deleted", kind, displayName(kind, topic, group), "partitions", d.Partitions, "messages", d.Messages, "records", d.Records,
		"subscriptions_closed", d.SubscriptionsClosed, "force", force, "admin_user", user)
	return map[string]any{"kind": kind, "topic": topic, "group": group,
		"deleted":              queue.DeleteReport{Partitions: d.Partitions, Messages: d.Messages, Records: d.Records},
		"subscriptions_closed": d.SubscriptionsClosed}, nil
}

func displayName(kind, topic, group string) string {
	if kind == "queue" {
		return queueKey(topic, group).String()
	}
	return topic
}

// dropLocal drops this broker's copy of a queue or stream: the engine
// removes it (for a queue with messages in flight only when force), and
// every local subscription to it ends with
// SUBSCRIPTION_CLOSED(topic_deleted) — when forced, first, so that the
// clients hear it as early as possible. A name the engine does not know
// drops nothing and is ErrNotFound.
func (b *Broker) dropLocal(kind, topic, group string, force bool) (cluster.Dropped, error) {
	qm := b.readyQueues()
	if qm == nil {
		return cluster.Dropped{}, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
	}
	closed := 0
	closeSubs := func() {
		if s := b.adminSessions.Load(); s != nil {
			closed += s.CloseSubscriptions(func(t, g string, _ uint32) bool {
				return t == topic && (kind == "stream" || g == group)
			}, wire.ReasonTopicDeleted, fmt.Sprintf("%s %s was deleted", kind, topic))
		}
	}
	if force {
		closeSubs()
	}
	var rep queue.DeleteReport
	var err error
	if kind == "stream" {
		rep, err = qm.DeleteStream(topic)
	} else {
		rep, err = qm.DeleteQueue(queueKey(topic, group), force)
	}
	if err != nil {
		return cluster.Dropped{SubscriptionsClosed: closed}, err
	}
	closeSubs() // a subscription that came meanwhile
	return cluster.Dropped{At: time.Now(), Partitions: rep.Partitions, Messages: rep.Messages, Records: rep.Records, SubscriptionsClosed: closed}, nil
}

// deleteClustered is a delete in a cluster: unless forced, a queue's
// owners are asked whether any message is in flight (409 if so, or if an
// owner cannot tell); then the tombstone is recorded and the answer waits
// (at most deleteWait) until every live broker confirmed. Brokers that are
// down confirm when they come back; until every one has, the name cannot
// be declared again.
func (b *Broker) deleteClustered(ctx context.Context, c *coordinated, kind, topic, group string, force bool, user string) (any, error) {
	snap := c.cl.Snapshot()
	if other := otherKind(snap, kind, topic); other != "" {
		return nil, core.Errorf(core.ErrBadRequest, "%s is a %s, not a %s", topic, other, kind)
	}
	if kind == "queue" && !force && snap.Tombstone(kind, topic, group) == nil {
		if err := b.refuseInflight(ctx, topic, group); err != nil {
			return nil, err
		}
	}
	t, err := c.cl.Delete(ctx, kind, topic, group, user, force)
	if err != nil {
		return nil, err
	}
	b.log.Warn(kind+" deleted in the cluster: every broker drops its copy", kind, displayName(kind, topic, group),
		"epoch", t.Epoch, "brokers_pending", len(t.Pending), "force", force, "admin_user", user)
	last := t
	c.cl.Await(ctx, deleteWait, func(s *cluster.Snapshot) bool {
		cur := s.Tombstone(kind, topic, group)
		if cur == nil || cur.Epoch != t.Epoch {
			return true // gone already: declared again (its record went then)
		}
		last = cur
		return cur.Finished || !slices.ContainsFunc(cur.Pending, s.Live)
	})
	out := map[string]any{"kind": kind, "topic": topic, "group": group, "epoch": last.Epoch, "by": last.By, "at": last.At,
		"complete": len(last.Pending) == 0, "finished": last.Finished, "pending": nonNil(last.Pending), "dropped": last.Dropped}
	var total cluster.Dropped
	for _, d := range last.Dropped {
		total.Messages += d.Messages
		total.Records += d.Records
		total.SubscriptionsClosed += d.SubscriptionsClosed
	}
	out["deleted"] = queue.DeleteReport{Partitions: int(last.Partitions), Messages: total.Messages, Records: total.Records}
	out["subscriptions_closed"] = total.SubscriptionsClosed
	return out, nil
}

func nonNil(ids []core.NodeID) []core.NodeID {
	if ids == nil {
		return []core.NodeID{}
	}
	return ids
}

// otherKind names the kind topic has in the cluster when it is not kind.
func otherKind(snap *cluster.Snapshot, kind, topic string) string {
	if kind == "queue" && snap.Stream(topic) != nil {
		return "stream"
	}
	if kind == "stream" && slices.ContainsFunc(snap.Queues, func(q *cluster.Queue) bool { return q.Info.Topic == topic }) {
		return "queue"
	}
	return ""
}

// refuseInflight asks every owner of the queue's partitions for its
// numbers: a message in flight, or a partition whose owner cannot answer,
// refuses an unforced delete (409).
func (b *Broker) refuseInflight(ctx context.Context, topic, group string) error {
	views, err := b.collectViews(ctx, "queue", topic, group, true)
	if err != nil {
		return err
	}
	for _, v := range views {
		if v.Kind != "queue" {
			continue
		}
		for _, p := range v.Partitions {
			switch {
			case p.localPartition != nil && p.Queue != nil && p.Queue.Inflight > 0:
				return core.Errorf(core.ErrConflict, "queue %s has %d messages in flight (partition %d); let the consumers settle them, or delete with force",
					displayName("queue", topic, group), p.Queue.Inflight, p.Partition)
			case p.Unavailable != "" && p.Unavailable != unavailableNotPlaced && p.Unavailable != unavailableNotLoaded:
				return core.Errorf(core.ErrConflict, "cannot tell whether partition %d of queue %s has messages in flight (%s); delete with force",
					p.Partition, displayName("queue", topic, group), p.Unavailable)
			}
		}
	}
	return nil
}

// deletions is what this node did about the tombstones in its view
// (dropDeleted): dropped its copy, and whether a confirmation is being
// written.
type deletions struct {
	mu sync.Mutex
	m  map[string]*deletion // by tombstone name and epoch
}

type deletion struct {
	dropped    *cluster.Dropped
	confirming bool
}

// dropDeleted drops this node's copy of every queue and stream its view
// holds a tombstone for, and confirms where the tombstone waits for this
// node. A drop that fails is tried again at the next look (run calls it
// on every view and every gateTick). Run goroutine only.
func (c *coordinated) dropDeleted(snap *cluster.Snapshot) {
	d := &c.deletions
	d.mu.Lock()
	defer d.mu.Unlock()
	live := make(map[string]*deletion, len(snap.Tombstones))
	for _, t := range snap.Tombstones {
		if t.Finished {
			continue
		}
		id := fmt.Sprintf("%s@%d", t.Name(), t.Epoch)
		st := d.m[id]
		if st == nil {
			st = &deletion{}
		}
		live[id] = st
		if st.dropped == nil {
			dr, err := c.dropCopy(t)
			if err != nil {
				c.b.log.Warn("could not drop a deleted "+t.Kind+"; retrying", "name", t.Name(), "err", err)
				continue
			}
			st.dropped = &dr
		}
		if st.confirming || !t.IsPending(c.self.ID) {
			continue
		}
		st.confirming = true
		go c.confirmDropped(t, st)
	}
	d.m = live
}

// dropCopy drops what this node holds of t's queue or stream: replicas
// stopped already (the view leaves the name out), so the engine's
// directory goes with the engine's entry.
func (c *coordinated) dropCopy(t *cluster.Tombstone) (cluster.Dropped, error) {
	for n := range t.Partitions {
		ref := core.PartitionRef{Topic: t.Topic, Group: t.Group, Partition: n}
		c.gates.detach(ref)
		c.progress.forget(ref)
	}
	dr, err := c.b.dropLocal(t.Kind, t.Topic, t.Group, true)
	if core.Code(err) == wire.CodeNotFound {
		// never installed here, or dropped by an earlier process
		dr, err = cluster.Dropped{At: time.Now(), SubscriptionsClosed: dr.SubscriptionsClosed}, nil
	}
	if err == nil {
		c.b.log.Info(t.Kind+" dropped: deleted in the cluster", "name", t.Name(), "epoch", t.Epoch, "messages", dr.Messages,
			"records", dr.Records, "subscriptions_closed", dr.SubscriptionsClosed, "deleted_by", t.By)
	}
	return dr, err
}

func (c *coordinated) confirmDropped(t *cluster.Tombstone, st *deletion) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cl.TTL())
	defer cancel()
	c.deletions.mu.Lock()
	dr := *st.dropped
	c.deletions.mu.Unlock()
	err := c.cl.ConfirmDropped(ctx, t, dr)
	c.deletions.mu.Lock()
	st.confirming = false
	c.deletions.mu.Unlock()
	if err != nil {
		c.b.log.Warn("could not confirm dropping a deleted "+t.Kind+"; retrying", "name", t.Name(), "err", err)
	}
}
