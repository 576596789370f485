package cluster

import (
	"encoding/json"
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
		routing bool // does the change alter routing (the owner)?
	}{
		{core.PartitionRef{Topic: "q1", Partition: 1}, Assignment{Node: "a", Epoch: 1}, true},
		{core.PartitionRef{Topic: "s1"}, Assignment{Node: "a", Epoch: 1}, true},
		{core.PartitionRef{Topic: "q1", Partition: 1}, Assignment{Node: "a", Epoch: 1, Written: true}, false},
		// Followers move the epoch but not where clients go.
		{core.PartitionRef{Topic: "q1", Partition: 1}, Assignment{Node: "a", Epoch: 2, Written: true, Followers: []core.NodeID{"b"}}, false},
		{core.PartitionRef{Topic: "q1", Partition: 1}, Assignment{Node: "a", Epoch: 3, Written: true, Followers: []core.NodeID{"c", "b"}}, false},
		{core.PartitionRef{Topic: "q1"}, Assignment{Node: "a", Epoch: 1, Followers: []core.NodeID{"b"}}, true},
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

// The stored form: records written before followers existed decode as
// they did, an assignment without followers encodes to exactly the old
// bytes, followers round-trip in order, a flag a later version may add is
// skipped, and damaged records are refused.
func TestAssignmentEncoding(t *testing.T) {
	for old, want := range map[string]Assignment{
		"1 a":              {Node: "a", Epoch: 1},
		"7 node-2 written": {Node: "node-2", Epoch: 7, Written: true},
	} {
		got, ok := decodeAssignment([]byte(old))
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("old record %q: %+v %v", old, got, ok)
		}
		if b := encodeAssignment(want); string(b) != old {
			t.Fatalf("%+v without followers encodes to %q, want the old %q", want, b, old)
		}
	}
	for _, a := range []Assignment{
		{Node: "a", Epoch: 3, Followers: []core.NodeID{"b"}},
		{Node: "a", Epoch: 4, Written: true, Followers: []core.NodeID{"c", "b"}},
		{Node: "a", Epoch: 5, Written: true, Followers: []core.NodeID{"c", "b"}, InSync: []core.NodeID{"b", "d"}, Acks: 1},
		{Node: "a", Epoch: 6, Followers: []core.NodeID{"c"}, Acks: 2},
	} {
		b := encodeAssignment(a)
		got, ok := decodeAssignment(b)
		if !ok || !reflect.DeepEqual(got, a) {
			t.Fatalf("%+v → %q → %+v %v", a, b, got, ok)
		}
	}
	if got, ok := decodeAssignment([]byte("5 a written isr=a,b followers=b")); !ok ||
		!reflect.DeepEqual(got, Assignment{Node: "a", Epoch: 5, Written: true, Followers: []core.NodeID{"b"}}) {
		t.Fatalf("unknown flag: %+v %v", got, ok)
	}
	for _, bad := range []string{"", "1", "x a", " a", "1  a", "1 a ", "1 a followers=b,,c", "1 a followers=b,", "1 a in_sync=", "1 a acks=-1", "1 a acks=x"} {
		if got, ok := decodeAssignment([]byte(bad)); ok {
			t.Fatalf("%q decoded as %+v", bad, got)
		}
	}
	// The JSON form (admin views, tools) keeps its old shape too.
	var a Assignment
	if err := json.Unmarshal([]byte(`{"node":"a","epoch":2,"written":true}`), &a); err != nil || a.Followers != nil || a.Node != "a" {
		t.Fatalf("old JSON: %+v %v", a, err)
	}
	if b, _ := json.Marshal(Assignment{Node: "a", Epoch: 2}); string(b) != `{"node":"a","epoch":2}` {
		t.Fatalf("JSON without followers: %s", b)
	}
	if got := (Assignment{Node: "a", Followers: []core.NodeID{"b", "c"}}).Replicas(); !reflect.DeepEqual(got, []core.NodeID{"a", "b", "c"}) {
		t.Fatalf("replicas %v", got)
	}
}

// Owned yields the placed partitions of a node, in order, and stops when
// the loop does.
func TestQueueOwned(t *testing.T) {
	ref := func(n uint32) core.PartitionRef { return core.PartitionRef{Topic: "q", Partition: n} }
	q := &Queue{Parts: []Partition{
		{Ref: ref(0), Assignment: Assignment{Node: "a"}, Version: 3},
		{Ref: ref(1), Assignment: Assignment{Node: "b"}, Version: 2},
		{Ref: ref(2), Assignment: Assignment{Node: "a"}}, // not placed: no version yet
		{Ref: ref(3), Assignment: Assignment{Node: "a"}, Version: 7},
	}}
	var got []uint32
	for p := range q.Owned("a") {
		got = append(got, p.Ref.Partition)
	}
	if !reflect.DeepEqual(got, []uint32{0, 3}) {
		t.Fatalf("owned by a: %v, want [0 3]", got)
	}
	for range q.Owned("a") {
		break // a loop that stops early must not panic
	}
	if !q.Parts[1].OwnedBy("b") || q.Parts[1].OwnedBy("a") || q.Parts[2].OwnedBy("a") {
		t.Fatal("OwnedBy disagrees with the placement")
	}
}
