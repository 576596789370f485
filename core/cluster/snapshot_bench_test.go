package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// bigState is 10,000 partitions (100 queues × 100) on 3 nodes, each with
// the other two as followers (the default target).
func bigState() *Fixture {
	f := NewFixture()
	nodes := []core.NodeID{"a", "b", "c"}
	for _, n := range nodes {
		f.Node(core.NodeInfo{ID: n, PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelAdvertise: "127.0.0.1:9000"}}, true)
	}
	for q := range 100 {
		topic := fmt.Sprintf("topic-%03d", q)
		f.Queue(queue.QueueInfo{Key: queue.Key{Topic: topic}, PartitionCount: 100, MaxRetries: 5})
		for p := range uint32(100) {
			f.Assign(core.PartitionRef{Topic: topic, Partition: p}, Assignment{Node: nodes[int(p)%3], Epoch: 1,
				Followers: []core.NodeID{nodes[(int(p)+1)%3], nodes[(int(p)+2)%3]}})
		}
	}
	return f
}

// Target: a full rebuild of a 10k-partition snapshot ≤ 5 ms (the
// controller rebuilds on every coordination change).
func BenchmarkSnapshotFullRebuild(b *testing.B) {
	kvs, idx := bigState().KVs()
	b.ReportAllocs()
	for b.Loop() {
		newBuilder().build(nil, kvs, idx)
	}
}

// Target: the snapshot update after one change ≤ 1 ms (the hot path
// reads the snapshot; a change must not stall routing).
func BenchmarkSnapshotIncremental(b *testing.B) {
	f := bigState()
	kvs, idx := f.KVs()
	bl := newBuilder()
	prev := bl.build(nil, kvs, idx)
	ref := core.PartitionRef{Topic: "topic-042", Partition: 7}
	epoch := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		epoch++
		f.Assign(ref, Assignment{Node: "b", Epoch: epoch, Followers: []core.NodeID{"c", "a"}})
		b.StopTimer()
		kvs, idx = f.KVs()
		b.StartTimer()
		prev = bl.build(prev, kvs, idx)
	}
}

// A controller pass over a stable 10k-partition cluster (every owner and
// follower in place: nothing to write). It runs every half heartbeat on
// the controller.
func BenchmarkPlacementPassStable(b *testing.B) {
	snap := bigState().Snapshot()
	c := &Cluster{opts: Options{Now: time.Now, Heartbeat: time.Second}, log: slog.New(slog.DiscardHandler)}
	c.SetTargetFollowers(func() int { return DefaultTargetFollowers })
	for _, id := range snap.MemberIDs {
		snap.Members[id].Info.Labels[core.LabelFollowers] = "1"
	}
	deadSince := map[core.NodeID]time.Time{}
	b.ReportAllocs()
	for b.Loop() {
		c.place(context.Background(), snap, deadSince)
	}
	if n := c.stats.Placements.Load(); n != 0 {
		b.Fatalf("%d writes on a stable cluster", n)
	}
}
