package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// prefixTopics holds each topic's kind ("queue" or "stream"), created once
// with compare-and-set, so that two brokers declaring the same topic as a
// queue and as a stream at once cannot both succeed (S-22).
const prefixTopics = "topics/"

// maxDeclareRounds bounds the compare-and-set retries of one declaration.
const maxDeclareRounds = 16

// DeclareQueue records a queue declaration in the cluster catalog and
// returns the cluster's decision (S-18, S-19): the same rules as a
// standalone broker (queue.ResolveQueue), applied under compare-and-set so
// that concurrent declarations on different brokers agree. defaultCount
// is partitioning.default_partition_count from the runtime settings.
func (c *Cluster) DeclareQueue(ctx context.Context, spec queue.QueueSpec, defaultCount uint32) (queue.QueueInfo, error) {
	return declareEntry(ctx, c, queueKey(spec.Topic, spec.Group.Value), tombstoneKey("queue", spec.Topic, spec.Group.Value), spec.Topic, queue.KindQueue,
		"queue "+spec.Key.String(), queue.DecodeQueueInfo, queue.EncodeQueueInfo,
		func(cur *queue.QueueInfo, kinds func(string) (queue.Kind, bool)) (queue.QueueInfo, error) {
			return queue.ResolveQueue(cur, spec, defaultCount, kinds)
		})
}

// DeclareStream records a stream declaration (S-70), as DeclareQueue does
// for queues.
func (c *Cluster) DeclareStream(ctx context.Context, spec queue.StreamSpec, defaultCount uint32) (queue.StreamInfo, error) {
	return declareEntry(ctx, c, streamKey(spec.Topic), tombstoneKey("stream", spec.Topic, ""), spec.Topic, queue.KindStream,
		fmt.Sprintf("stream %q", spec.Topic), queue.DecodeStreamInfo, queue.EncodeStreamInfo,
		func(cur *queue.StreamInfo, kinds func(string) (queue.Kind, bool)) (queue.StreamInfo, error) {
			return queue.ResolveStream(cur, spec, defaultCount, kinds)
		})
}

// declareEntry is the compare-and-set loop behind both declarations: read the
// catalog entry at key, let resolve decide against it, claim the topic's
// kind for a new entry, and write the decision unless it changes nothing.
// A conflicting concurrent write makes it read and decide again. A name
// whose deletion (the tombstone at tomb) is unfinished is refused; a
// finished one's tombstone goes.
func declareEntry[T any](ctx context.Context, c *Cluster, key, tomb, topic string, kind queue.Kind, what string,
	decode func([]byte) (T, error), encode func(T) ([]byte, error),
	resolve func(cur *T, kinds func(string) (queue.Kind, bool)) (T, error)) (T, error) {
	var zero T
	for range maxDeclareRounds {
		if err := c.clearFinished(ctx, tomb); err != nil {
			return zero, err
		}
		kv, err := c.coord.Get(ctx, key)
		if err != nil {
			return zero, unavailable(err)
		}
		var cur *T
		if kv.Version != 0 {
			info, err := decode(kv.Value)
			if err != nil {
				return zero, core.Errorf(core.ErrInternal, "catalog entry %s is unreadable: %v", key, err)
			}
			cur = &info
		}
		kinds, err := c.kindOf(ctx, topic)
		if err != nil {
			return zero, err
		}
		info, err := resolve(cur, kinds)
		if err != nil {
			return zero, err
		}
		if cur != nil && reflect.DeepEqual(info, *cur) {
			c.awaitIndex(ctx, kv.Version)
			return info, nil
		}
		if cur == nil {
			if err := c.claimTopic(ctx, topic, kind); err != nil {
				return zero, err
			}
		}
		b, err := encode(info)
		if err != nil {
			return zero, core.Errorf(core.ErrInternal, "encode %s: %v", key, err)
		}
		if v, err := c.coord.CompareAndSet(ctx, key, b, kv.Version); err == nil {
			c.awaitIndex(ctx, v)
			return info, nil
		} else if !errors.Is(err, core.ErrVersionConflict) {
			return zero, unavailable(err)
		}
	}
	return zero, core.Errorf(core.ErrUnavailable, "%s: concurrent declarations kept conflicting; retry", what)
}

// kindOf returns a kind lookup for queue.Resolve*: topic itself is read
// linearizably from the topics/ claims, other topics (a DLQ target) from
// the snapshot.
func (c *Cluster) kindOf(ctx context.Context, topic string) (func(string) (queue.Kind, bool), error) {
	kv, err := c.coord.Get(ctx, prefixTopics+topic)
	if err != nil {
		return nil, unavailable(err)
	}
	snap := c.Snapshot()
	return func(t string) (queue.Kind, bool) {
		if t == topic {
			return kindFromClaim(kv)
		}
		for _, q := range snap.Queues {
			if q.Info.Topic == t {
				return queue.KindQueue, true
			}
		}
		if snap.Stream(t) != nil {
			return queue.KindStream, true
		}
		return 0, false
	}, nil
}

func kindFromClaim(kv core.KV) (queue.Kind, bool) {
	switch string(kv.Value) {
	case "queue":
		return queue.KindQueue, true
	case "stream":
		return queue.KindStream, true
	}
	return 0, false
}

// claimTopic records topic's kind once. Losing the race to the other kind
// is the S-22 error.
func (c *Cluster) claimTopic(ctx context.Context, topic string, kind queue.Kind) error {
	name := "queue"
	if kind == queue.KindStream {
		name = "stream"
	}
	_, err := c.coord.CompareAndSet(ctx, prefixTopics+topic, []byte(name), 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, core.ErrVersionConflict) {
		return unavailable(err)
	}
	kv, err := c.coord.Get(ctx, prefixTopics+topic)
	if err != nil {
		return unavailable(err)
	}
	if k, ok := kindFromClaim(kv); ok && k != kind {
		return core.Errorf(core.ErrBadRequest, "topic %q is a %s; a topic is a queue or a stream for life", topic, string(kv.Value))
	}
	return nil
}

// unavailable maps a coordination failure to the client's 503 (WIRE
// docs/protocol.md#answers), keeping client-meaningful sentinels as they are.
func unavailable(err error) error {
	if errors.Is(err, core.ErrBadRequest) || errors.Is(err, core.ErrUnavailable) {
		return err
	}
	return core.Errorf(core.ErrUnavailable, "coordination: %v", err)
}

// maxAwaitIndex bounds how long a declaration waits for this node's view
// to catch up with its own write.
const maxAwaitIndex = 2 * time.Second

// awaitIndex waits until this node's snapshot reflects the store index idx
// (a key version is the index of its write), so that a client reading
// TOPOLOGY right after DECLARE_OK on the same broker sees its declaration:
// the watch that feeds the snapshot may lag a write that already returned.
// It gives up after maxAwaitIndex or when ctx ends: the declaration stands
// either way, and the topology push brings it to the client later.
func (c *Cluster) awaitIndex(ctx context.Context, idx uint64) {
	c.Await(ctx, maxAwaitIndex, func(s *Snapshot) bool { return s.Index >= idx })
}

// Await waits until cond holds for this node's view, at most limit (none
// when limit is not positive) or until ctx ends, and reports whether it
// held. It looks again at every new snapshot: the channel is taken before
// the look, so a snapshot published in between is never missed.
func (c *Cluster) Await(ctx context.Context, limit time.Duration, cond func(*Snapshot) bool) bool {
	if cond(c.Snapshot()) {
		return true
	}
	if limit <= 0 {
		return false
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		changed := c.Changed()
		if cond(c.Snapshot()) {
			return true
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// CatchUp is for an operation on a partition this node's view does not
// know or has no owner for: it reads the partition's assignment
// linearizably, which tells the store's current index, and when the view
// trails that index waits (bounded as awaitIndex) until it has caught up.
// It reports whether it waited, that is whether deciding again may answer
// differently. A broker that owns a just-declared partition thereby serves
// the first operation a client (or a gateway) sends it instead of refusing
// it from a view that trails the declaration or the placement.
func (c *Cluster) CatchUp(ctx context.Context, ref core.PartitionRef) bool {
	_, idx, err := c.coord.List(ctx, assignKey(ref))
	if err != nil || c.Snapshot().Index >= idx {
		return false
	}
	c.awaitIndex(ctx, idx)
	return true
}
