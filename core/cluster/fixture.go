package cluster

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// Fixture builds a coordination state by hand and turns it into a
// Snapshot, for tests and simulations of code that reads snapshots
// (routing, topology) without running a cluster. It writes the same
// records a running cluster would.
type Fixture struct {
	kvs map[string]core.KV
	idx uint64
}

// NewFixture starts an empty state.
func NewFixture() *Fixture { return &Fixture{kvs: make(map[string]core.KV)} }

func (f *Fixture) put(key string, v any) {
	var b []byte
	switch x := v.(type) {
	case []byte:
		b = x
	default:
		b, _ = json.Marshal(v)
	}
	f.idx++
	f.kvs[key] = core.KV{Key: key, Value: b, Version: f.idx}
}

// Node records a member; live adds its lease-bound live record.
func (f *Fixture) Node(info core.NodeInfo, live bool) *Fixture {
	m := info
	m.Labels = nil
	f.put(memberKey(info.ID), m)
	if live {
		f.put(nodeKey(info.ID), info)
	} else {
		f.idx++
		delete(f.kvs, nodeKey(info.ID))
	}
	return f
}

// Queue declares a queue.
func (f *Fixture) Queue(info queue.QueueInfo) *Fixture {
	b, _ := queue.EncodeQueueInfo(info)
	f.put(queueKey(info.Topic, info.Group.Value), b)
	return f
}

// Stream declares a stream.
func (f *Fixture) Stream(info queue.StreamInfo) *Fixture {
	b, _ := queue.EncodeStreamInfo(info)
	f.put(streamKey(info.Topic), b)
	return f
}

// Assign records a partition's assignment.
func (f *Fixture) Assign(ref core.PartitionRef, a Assignment) *Fixture {
	f.put(assignKey(ref), encodeAssignment(a))
	return f
}

// KVs returns the state as a sorted key list and its index.
func (f *Fixture) KVs() ([]core.KV, uint64) {
	out := make([]core.KV, 0, len(f.kvs))
	for _, kv := range f.kvs {
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b core.KV) int { return strings.Compare(a.Key, b.Key) })
	return out, f.idx
}

// Snapshot builds the snapshot of the current state.
func (f *Fixture) Snapshot() *Snapshot {
	kvs, idx := f.KVs()
	return newBuilder().build(nil, kvs, idx)
}
