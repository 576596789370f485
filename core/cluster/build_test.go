package cluster

import (
	"reflect"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// An incremental rebuild (only assignments changed) gives the same
// partitions as a full one, shares every channel it did not touch, and
// moves the generation only for routing changes.
func TestIncrementalBuildMatchesFull(t *testing.T) {
	f := NewFixture().
		Node(core.NodeInfo{ID: "a", Labels: core.Labels{core.LabelAdvertise: "127.0.0.1:9000"}}, true).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "q1"}, PartitionCount: 2, MaxRetries: 5}).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "q2"}, PartitionCount: 2, MaxRetries: 5}).
		Stream(queue.StreamInfo{StreamSpec: queue.StreamSpec{Topic: "s1"}, PartitionCount: 1})
	b := newBuilder()
	kvs, idx := f.KVs()
	prev := b.build(nil, kvs, idx)

	steps := []struct {
		ref     core.PartitionRef
		a       Assignment
		routing bool // does the change alter routing (owner/epoch)?
	}{
		{core.PartitionRef{Topic: "q1", Partition: 1}, Assignment{Node: "a", Epoch: 1}, true},
		{core.PartitionRef{Topic: "s1"}, Assignment{Node: "a", Epoch: 1}, true},
		{core.PartitionRef{Topic: "q1", Partition: 1}, Assignment{Node: "a", Epoch: 1, Written: true}, false},
	}
	for i, st := range steps {
		f.Assign(st.ref, st.a)
		kvs, idx = f.KVs()
		inc := b.build(prev, kvs, idx)
		full := newBuilder().build(nil, kvs, idx)
		for _, ref := range []core.PartitionRef{{Topic: "q1"}, {Topic: "q1", Partition: 1}, {Topic: "q2"}, {Topic: "q2", Partition: 1}, {Topic: "s1"}} {
			pi, _ := inc.Partition(ref)
			pf, _ := full.Partition(ref)
			if !reflect.DeepEqual(pi, pf) {
				t.Fatalf("step %d, %s: incremental %+v, full %+v", i, ref, pi, pf)
			}
		}
		if inc.Queue("q2", "") != prev.Queue("q2", "") {
			t.Fatalf("step %d: an untouched queue was copied", i)
		}
		if moved := inc.Generation != prev.Generation; moved != st.routing {
			t.Fatalf("step %d: generation moved %v, want %v", i, moved, st.routing)
		}
		prev = inc
	}
}
