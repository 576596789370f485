package cluster

import (
	"context"
	"errors"
	"reflect"

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
	key := queueKey(spec.Topic, spec.Group.Value)
	for range maxDeclareRounds {
		kv, err := c.coord.Get(ctx, key)
		if err != nil {
			return queue.QueueInfo{}, unavailable(err)
		}
		var cur *queue.QueueInfo
		if kv.Version != 0 {
			info, err := queue.DecodeQueueInfo(kv.Value)
			if err != nil {
				return queue.QueueInfo{}, core.Errorf(core.ErrInternal, "catalog entry %s is unreadable: %v", key, err)
			}
			cur = &info
		}
		kinds, err := c.kindOf(ctx, spec.Topic)
		if err != nil {
			return queue.QueueInfo{}, err
		}
		info, err := queue.ResolveQueue(cur, spec, defaultCount, kinds)
		if err != nil {
			return queue.QueueInfo{}, err
		}
		if cur != nil && reflect.DeepEqual(info, *cur) {
			return info, nil
		}
		if cur == nil {
			if err := c.claimTopic(ctx, spec.Topic, queue.KindQueue); err != nil {
				return queue.QueueInfo{}, err
			}
		}
		b, err := queue.EncodeQueueInfo(info)
		if err != nil {
			return queue.QueueInfo{}, core.Errorf(core.ErrInternal, "encode %s: %v", key, err)
		}
		if _, err := c.coord.CompareAndSet(ctx, key, b, kv.Version); err == nil {
			return info, nil
		} else if !errors.Is(err, core.ErrVersionConflict) {
			return queue.QueueInfo{}, unavailable(err)
		}
	}
	return queue.QueueInfo{}, core.Errorf(core.ErrUnavailable, "queue %s: concurrent declarations kept conflicting; retry", spec.Key)
}

// DeclareStream records a stream declaration (S-70), as DeclareQueue does
// for queues.
func (c *Cluster) DeclareStream(ctx context.Context, spec queue.StreamSpec, defaultCount uint32) (queue.StreamInfo, error) {
	key := streamKey(spec.Topic)
	for range maxDeclareRounds {
		kv, err := c.coord.Get(ctx, key)
		if err != nil {
			return queue.StreamInfo{}, unavailable(err)
		}
		var cur *queue.StreamInfo
		if kv.Version != 0 {
			info, err := queue.DecodeStreamInfo(kv.Value)
			if err != nil {
				return queue.StreamInfo{}, core.Errorf(core.ErrInternal, "catalog entry %s is unreadable: %v", key, err)
			}
			cur = &info
		}
		kinds, err := c.kindOf(ctx, spec.Topic)
		if err != nil {
			return queue.StreamInfo{}, err
		}
		info, err := queue.ResolveStream(cur, spec, defaultCount, kinds)
		if err != nil || cur != nil {
			return info, err
		}
		if err := c.claimTopic(ctx, spec.Topic, queue.KindStream); err != nil {
			return queue.StreamInfo{}, err
		}
		b, err := queue.EncodeStreamInfo(info)
		if err != nil {
			return queue.StreamInfo{}, core.Errorf(core.ErrInternal, "encode %s: %v", key, err)
		}
		if _, err := c.coord.CompareAndSet(ctx, key, b, 0); err == nil {
			return info, nil
		} else if !errors.Is(err, core.ErrVersionConflict) {
			return queue.StreamInfo{}, unavailable(err)
		}
	}
	return queue.StreamInfo{}, core.Errorf(core.ErrUnavailable, "stream %q: concurrent declarations kept conflicting; retry", spec.Topic)
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
// §7.3), keeping client-meaningful sentinels as they are.
func unavailable(err error) error {
	if errors.Is(err, core.ErrBadRequest) || errors.Is(err, core.ErrUnavailable) {
		return err
	}
	return core.Errorf(core.ErrUnavailable, "coordination: %v", err)
}
