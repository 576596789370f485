package queue

import (
	"encoding/json"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// ResolveQueue decides a DECLARE_QUEUE (S-18, S-20, docs/protocol.md#declare) against the
// current declaration of the queue (nil: none) and returns the declaration
// that results. It is pure, so a standalone broker (Manager.DeclareQueue)
// and the cluster catalog (core/cluster, under compare-and-set) decide the
// same way. kindOf reports whether a topic is already a queue or a stream.
//
// A new queue gets spec's partition count (absent: defaultCount; 0 is
// raised to 1) and max_retries (absent: 5, S-60). Redeclaring may change
// the DLQ policy, max_retries and the default TTL — an absent field keeps
// the current value — never the partition count (409).
func ResolveQueue(cur *QueueInfo, spec QueueSpec, defaultCount uint32, kindOf func(topic string) (Kind, bool)) (QueueInfo, error) {
	spec.Key = spec.Key.norm()
	if err := checkKey(spec.Key); err != nil {
		return QueueInfo{}, err
	}
	if d, ok := spec.DLQ.Get(); ok {
		if !d.Kind.Valid() {
			return QueueInfo{}, core.Errorf(core.ErrBadRequest, "unknown dlq_policy kind %d", d.Kind)
		}
		if d.Kind == wire.DLQNamed {
			t := Key{Topic: d.Topic, Group: d.Group}.norm()
			if err := checkKey(t); err != nil {
				return QueueInfo{}, core.Errorf(core.ErrBadRequest, "dead-letter target: %v", err)
			}
			if k, ok := kindOf(t.Topic); ok && k == KindStream {
				return QueueInfo{}, core.Errorf(core.ErrBadRequest, "dead-letter target %q is a stream; it must be a queue", t.Topic)
			}
			d.Group = t.Group
		} else {
			d.Topic, d.Group = "", wire.Option[string]{} // meaningless for these kinds
		}
		spec.DLQ = wire.Some(d)
	}
	if k, ok := kindOf(spec.Topic); ok && k == KindStream {
		return QueueInfo{}, core.Errorf(core.ErrBadRequest, "topic %q is a stream; a topic is a queue or a stream for life", spec.Topic)
	}
	count := partitionCount(spec.PartitionCount, defaultCount)
	if cur != nil {
		if spec.PartitionCount.Present && count != cur.PartitionCount {
			return QueueInfo{}, core.Errorf(core.ErrConflict,
				"queue %s has %d partitions; it cannot be redeclared with %d (partition counts are fixed at creation)",
				spec.Key, cur.PartitionCount, count)
		}
		next := *cur
		if spec.DLQ.Present {
			next.DLQ = spec.DLQ
		}
		if spec.MaxRetries.Present {
			next.MaxRetries = spec.MaxRetries.Value
		}
		if spec.DefaultTTLMillis.Present {
			next.DefaultTTLMillis = spec.DefaultTTLMillis
		}
		return next, nil
	}
	info := QueueInfo{
		Key:              spec.Key,
		PartitionCount:   count,
		DLQ:              spec.DLQ,
		MaxRetries:       defaultMaxRetries,
		DefaultTTLMillis: spec.DefaultTTLMillis,
	}
	if r, ok := spec.MaxRetries.Get(); ok {
		info.MaxRetries = r
	}
	return info, nil
}

// ResolveStream decides a DECLARE_PLEXUS (S-70) against the current
// declaration (nil: none), as ResolveQueue does for queues: idempotent,
// and a different explicit partition count is a conflict.
func ResolveStream(cur *StreamInfo, spec StreamSpec, defaultCount uint32, kindOf func(topic string) (Kind, bool)) (StreamInfo, error) {
	if err := checkName("topic", spec.Topic); err != nil {
		return StreamInfo{}, err
	}
	if !spec.Durability.Valid() {
		return StreamInfo{}, core.Errorf(core.ErrBadRequest, "unknown stream durability %d", spec.Durability)
	}
	if k, ok := kindOf(spec.Topic); ok && k == KindQueue {
		return StreamInfo{}, core.Errorf(core.ErrBadRequest, "topic %q is a queue; a topic is a queue or a stream for life", spec.Topic)
	}
	count := partitionCount(spec.PartitionCount, defaultCount)
	if cur != nil {
		if spec.PartitionCount.Present && count != cur.PartitionCount {
			return StreamInfo{}, core.Errorf(core.ErrConflict,
				"stream %q has %d partitions; it cannot be redeclared with %d (partition counts are fixed at creation)",
				spec.Topic, cur.PartitionCount, count)
		}
		return *cur, nil
	}
	return StreamInfo{StreamSpec: spec, PartitionCount: count}, nil
}

// EncodeQueueInfo is the catalog's JSON form of a declaration (the same
// record the standalone catalog file holds), for the cluster catalog.
func EncodeQueueInfo(info QueueInfo) ([]byte, error) { return json.Marshal(toCatalogQueue(info)) }

// DecodeQueueInfo is the inverse of EncodeQueueInfo; it validates names.
func DecodeQueueInfo(b []byte) (QueueInfo, error) {
	var c catalogQueue
	if err := json.Unmarshal(b, &c); err != nil {
		return QueueInfo{}, err
	}
	return fromCatalogQueue(c)
}

// EncodeStreamInfo is the catalog's JSON form of a stream declaration.
func EncodeStreamInfo(info StreamInfo) ([]byte, error) { return json.Marshal(toCatalogStream(info)) }

// DecodeStreamInfo is the inverse of EncodeStreamInfo.
func DecodeStreamInfo(b []byte) (StreamInfo, error) {
	var c catalogStream
	if err := json.Unmarshal(b, &c); err != nil {
		return StreamInfo{}, err
	}
	if err := checkName("topic", c.Topic); err != nil || c.Partitions == 0 {
		return StreamInfo{}, core.Errorf(core.ErrBadRequest, "bad stream entry %q", c.Topic)
	}
	return fromCatalogStream(c), nil
}

// partitionCount is the count a declaration asks for: the explicit one,
// else the default, never below 1.
func partitionCount(asked wire.Option[uint32], def uint32) uint32 {
	if c, ok := asked.Get(); ok {
		def = c
	}
	return max(def, 1)
}
