package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
)

// placedWith reports whether every partition of topic is placed with
// exactly want followers.
func placedWith(s *Snapshot, topic string, want int) bool {
	if !allPlaced(s, topic) {
		return false
	}
	for _, p := range s.Queue(topic, "").Parts {
		if len(p.Followers) != want {
			return false
		}
	}
	return true
}

// checkDistinct fails when a partition's owner and followers are not
// distinct nodes.
func checkDistinct(t *testing.T, s *Snapshot, topic string) {
	t.Helper()
	for _, p := range s.Queue(topic, "").Parts {
		r := p.Replicas()
		if len(slices.Compact(slices.Sorted(slices.Values(r)))) != len(r) {
			t.Fatalf("%s: replicas %v are not distinct", p.Ref, r)
		}
	}
}

// S-133: every placed partition gets min(target, live nodes − 1)
// followers, distinct from its owner and from each other, in the same
// write as its owner (epoch 1).
func TestFollowersPlaced(t *testing.T) {
	for _, c := range []struct {
		nodes  []core.NodeID
		target int64
		want   int
	}{
		{[]core.NodeID{"a", "b", "c"}, 2, 2},
		{[]core.NodeID{"a", "b"}, 2, 1},
		{[]core.NodeID{"a"}, 2, 0},
		{[]core.NodeID{"a", "b", "c"}, 1, 1},
		{[]core.NodeID{"a", "b", "c"}, 0, 0},
	} {
		t.Run(fmt.Sprintf("%d nodes target %d", len(c.nodes), c.target), func(t *testing.T) {
			tc := newTestCluster(t)
			tc.target.Store(c.target)
			for _, id := range c.nodes {
				tc.start(id, nil)
			}
			tc.settle()
			a := tc.nodes["a"]
			declare(t, a.Cluster, "orders", 4)
			testkit.Eventually(t, 5*time.Second, "placed with followers", func() bool { return placedWith(a.Snapshot(), "orders", c.want) })
			checkDistinct(t, a.Snapshot(), "orders")
			for _, p := range a.Snapshot().Queue("orders", "").Parts {
				if p.Epoch != 1 {
					t.Fatalf("%+v: want epoch 1 (owner and followers in one write)", p)
				}
			}
		})
	}
}

// copies counts, per node, the partitions of topic it holds a copy of
// (owner or follower).
func copies(s *Snapshot, topic string) map[core.NodeID]int {
	out := map[core.NodeID]int{}
	for _, p := range s.Queue(topic, "").Parts {
		for _, id := range p.Replicas() {
			out[id]++
		}
	}
	return out
}

// Copies spread evenly: with three nodes and a six-partition queue every
// node holds the same number of copies, give or take one, whatever the
// target.
func TestFollowersSpread(t *testing.T) {
	for _, target := range []int64{1, 2} {
		t.Run(fmt.Sprint("target ", target), func(t *testing.T) {
			tc := newTestCluster(t)
			tc.target.Store(target)
			for _, id := range []core.NodeID{"a", "b", "c"} {
				tc.start(id, nil)
			}
			tc.settle()
			a := tc.nodes["a"]
			declare(t, a.Cluster, "orders", 6)
			testkit.Eventually(t, 5*time.Second, "placed", func() bool { return placedWith(a.Snapshot(), "orders", int(target)) })
			got := copies(a.Snapshot(), "orders")
			lo, hi := 1<<30, 0
			for _, id := range []core.NodeID{"a", "b", "c"} {
				lo, hi = min(lo, got[id]), max(hi, got[id])
			}
			if hi-lo > 1 || lo+hi < 2*6*(int(target)+1)/3-1 {
				t.Fatalf("copies per node %v with target %d: not even", got, target)
			}
		})
	}
}

// assignVersions reads every assignment's version straight from the store.
func assignVersions(t *testing.T, n *testNode) map[string]uint64 {
	t.Helper()
	kvs, _, err := n.coord.List(context.Background(), prefixAssign)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, kv := range kvs {
		out[kv.Key] = kv.Version
	}
	return out
}

// A stable cluster writes nothing: once every partition has its owner and
// followers, further controller passes leave every record alone.
func TestStablePlanWritesNothing(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 6)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return placedWith(a.Snapshot(), "orders", 2) })
	placements := func() uint64 {
		var n uint64
		for _, node := range tc.nodes {
			n += node.Stats().Placements.Load()
		}
		return n
	}
	before, versions := placements(), assignVersions(t, a)
	// Every controller pass in this window sees the same plan.
	time.Sleep(20 * testHeartbeat)
	if after := placements(); after != before {
		t.Fatalf("%d assignment writes on a stable cluster", after-before)
	}
	if now := assignVersions(t, a); !mapsEqual(now, versions) {
		t.Fatalf("assignments rewritten on a stable cluster: %v → %v", versions, now)
	}
	for _, n := range tc.nodes {
		if n.IsController() && n.Stats().UnderReplicated.Load() != 0 {
			t.Fatalf("under-replicated %d on a full cluster", n.Stats().UnderReplicated.Load())
		}
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// notController returns a node of tc that is not the controller.
func notController(t *testing.T, tc *testCluster) core.NodeID {
	t.Helper()
	var id core.NodeID
	testkit.Eventually(t, 5*time.Second, "a controller elected", func() bool {
		for _, n := range tc.nodes {
			if n.IsController() {
				return true
			}
		}
		return false
	})
	for _, n := range slices.Sorted(func(yield func(core.NodeID) bool) {
		for k := range tc.nodes {
			if !yield(k) {
				return
			}
		}
	}) {
		if !tc.nodes[n].IsController() {
			id = n
			break
		}
	}
	return id
}

// A follower that dies is replaced once it has been dead for Margin, with
// the next epoch, and a written partition keeps its written mark; its
// written partitions stay with it (S-138) and keep their followers.
func TestDeadFollowerReplaced(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c", "d")
	tc.settle()
	victim := notController(t, tc)
	var survivor *testNode
	for id, n := range tc.nodes {
		if id != victim {
			survivor = n
			break
		}
	}
	declare(t, survivor.Cluster, "orders", 8)
	testkit.Eventually(t, 5*time.Second, "placed in every view", func() bool {
		for _, n := range tc.nodes {
			if !placedWith(n.Snapshot(), "orders", 2) {
				return false
			}
		}
		return true
	})
	// Every owner marks its partitions written.
	for _, p := range survivor.Snapshot().Queue("orders", "").Parts {
		if err := tc.nodes[p.Node].MarkWritten(context.Background(), p.Ref); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "marks visible", func() bool {
		for _, p := range survivor.Snapshot().Queue("orders", "").Parts {
			if !p.Written {
				return false
			}
		}
		return true
	})
	before := survivor.Snapshot().Queue("orders", "").Parts
	followed := 0
	for _, p := range before {
		if p.HasFollower(victim) {
			followed++
		}
	}
	if followed == 0 {
		t.Fatalf("%s follows nothing: %+v", victim, before)
	}
	tc.crash(victim)
	testkit.Eventually(t, 5*time.Second, "the dead follower replaced", func() bool {
		for _, p := range survivor.Snapshot().Queue("orders", "").Parts {
			if p.HasFollower(victim) {
				return false
			}
		}
		return true
	})
	after := survivor.Snapshot()
	for i, p := range after.Queue("orders", "").Parts {
		old := before[i]
		switch {
		case old.HasFollower(victim):
			if p.Node != old.Node || !p.Written || p.Epoch != old.Epoch+1 || len(p.Followers) != 2 || slices.Contains(p.Followers, victim) {
				t.Fatalf("replaced %+v → %+v: want the same owner, written, epoch+1, two live followers", old, p)
			}
			if p.Followers[0] != old.Followers[0] && p.Followers[0] != old.Followers[1] {
				t.Fatalf("replaced %+v → %+v: the surviving follower was not kept first", old, p)
			}
		case old.Node == victim:
			if p.Node != victim || !p.Written || p.Epoch != old.Epoch || !slices.Equal(p.Followers, old.Followers) {
				t.Fatalf("dead owner's written partition %+v → %+v: want it unchanged", old, p)
			}
		default:
			if p.Epoch != old.Epoch {
				t.Fatalf("%+v → %+v changed though the victim took no part", old, p)
			}
		}
		for _, f := range p.Followers {
			if !after.Live(f) {
				t.Fatalf("%+v: follower %s is not live", p, f)
			}
		}
	}
	checkDistinct(t, after, "orders")
}

// With nobody to replace it, a dead follower is dropped after Margin, and
// it gets its role back when it returns; every change moves the epoch.
func TestFollowerDroppedAndRestored(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	victim := notController(t, tc)
	var survivor *testNode
	for id, n := range tc.nodes {
		if id != victim {
			survivor = n
			break
		}
	}
	declare(t, survivor.Cluster, "orders", 3)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return placedWith(survivor.Snapshot(), "orders", 2) })
	var ref core.PartitionRef
	for _, p := range survivor.Snapshot().Queue("orders", "").Parts {
		if p.Node != victim {
			ref = p.Ref
		}
	}
	p0, _ := survivor.Snapshot().Partition(ref)
	tc.crash(victim)
	testkit.Eventually(t, 5*time.Second, "the dead follower dropped", func() bool {
		p, _ := survivor.Snapshot().Partition(ref)
		return !p.HasFollower(victim)
	})
	p1, _ := survivor.Snapshot().Partition(ref)
	if len(p1.Followers) != 1 || p1.Epoch != p0.Epoch+1 || p1.Node != p0.Node {
		t.Fatalf("%+v → %+v: want one follower left, epoch+1", p0, p1)
	}
	if n := survivor.Snapshot().UnderReplicated(2); n != 0 {
		t.Fatalf("%d partitions under-replicated with two live nodes and one follower each", n)
	}
	tc.start(victim, nil)
	testkit.Eventually(t, 5*time.Second, "the returning node follows again", func() bool {
		p, _ := survivor.Snapshot().Partition(ref)
		return len(p.Followers) == 2
	})
	p2, _ := survivor.Snapshot().Partition(ref)
	if p2.Epoch != p1.Epoch+1 || p2.Followers[0] != p1.Followers[0] {
		t.Fatalf("%+v → %+v: want the kept follower first, epoch+1", p1, p2)
	}
}

// The written mark survives a follower change: the controller carries it
// over into the new epoch, and the owner still counts the partition as
// marked (no new mark, no refusal).
func TestWrittenMarkSurvivesFollowerChange(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 3)
	testkit.Eventually(t, 5*time.Second, "placed in every view", func() bool {
		for _, n := range tc.nodes {
			if !placedWith(n.Snapshot(), "orders", 2) {
				return false
			}
		}
		return true
	})
	p0 := a.Snapshot().Queue("orders", "").Parts[0]
	owner := tc.nodes[p0.Node]
	if err := owner.MarkWritten(context.Background(), p0.Ref); err != nil {
		t.Fatal(err)
	}
	tc.target.Store(1)
	testkit.Eventually(t, 5*time.Second, "one follower in the owner's view", func() bool {
		p, _ := owner.Snapshot().Partition(p0.Ref)
		return len(p.Followers) == 1
	})
	p1, _ := owner.Snapshot().Partition(p0.Ref)
	if !p1.Written || p1.Node != p0.Node || p1.Epoch <= p0.Epoch {
		t.Fatalf("%+v → %+v: want the same owner, still written, a newer epoch", p0, p1)
	}
	if !owner.IsWritten(p1) {
		t.Fatal("the owner no longer counts the partition as marked")
	}
	if err := owner.MarkWritten(context.Background(), p0.Ref); err != nil {
		t.Fatalf("marking again after the follower change: %v", err)
	}
}

// The owner's first-write mark and a follower change race: the owner's
// view still holds the record from before the change (its watch lags),
// so its compare-and-set conflicts; it must find itself still the owner
// under the newer epoch and mark that record, not report the partition
// moved. Then a burst of follower changes and marks at once: every mark
// succeeds and every record ends written.
func TestMarkWrittenDuringFollowerChange(t *testing.T) {
	tc := newTestCluster(t)
	tc.target.Store(1)
	lagging := core.NodeID("a")
	tc.wrap = func(id core.NodeID, c core.Coordinator) core.Coordinator {
		if id == lagging {
			return laggingWatch{c, 300 * time.Millisecond}
		}
		return c
	}
	for _, id := range []core.NodeID{"a", "b", "c"} {
		tc.start(id, nil)
	}
	tc.settle()
	a := tc.nodes["a"]
	declare(t, tc.nodes["b"].Cluster, "orders", 6)
	testkit.Eventually(t, 5*time.Second, "placed in a's view", func() bool { return placedWith(a.Snapshot(), "orders", 1) })
	var mine []Partition
	for _, p := range a.Snapshot().Queue("orders", "").Parts {
		if p.Node == "a" {
			mine = append(mine, p)
		}
	}
	if len(mine) < 2 {
		t.Fatalf("a owns %d partitions", len(mine))
	}
	// The controller's kind of write: same owner, another follower, the
	// next epoch, at the record's version.
	p := mine[0]
	other := core.NodeID("b")
	if p.HasFollower("b") {
		other = "c"
	}
	next := p.Assignment
	next.Followers, next.Epoch = []core.NodeID{other}, p.Epoch+1
	if _, err := tc.store.Member("t").CompareAndSet(context.Background(), assignKey(p.Ref), encodeAssignment(next), p.Version); err != nil {
		t.Fatal(err)
	}
	if q, _ := a.Snapshot().Partition(p.Ref); q.Epoch != p.Epoch {
		t.Skip("a's view caught up before the mark; the lag did not show")
	}
	if err := a.MarkWritten(context.Background(), p.Ref); err != nil {
		t.Fatalf("mark after a follower change: %v", err)
	}
	kv, err := tc.store.Member("t").Get(context.Background(), assignKey(p.Ref))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := decodeAssignment(kv.Value)
	if !got.Written || got.Epoch != next.Epoch || got.Node != "a" || !slices.Equal(got.Followers, next.Followers) {
		t.Fatalf("record after the mark: %+v, want %+v written", got, next)
	}

	// A burst: the target flips while the owner marks the rest.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			select {
			case <-stop:
				return
			case <-time.After(testHeartbeat / 2):
			}
			tc.target.Store(int64(1 + i%2))
		}
	}()
	for _, p := range mine[1:] {
		if err := a.MarkWritten(context.Background(), p.Ref); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("mark during follower changes: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	testkit.Eventually(t, 5*time.Second, "every mark kept", func() bool {
		for _, p := range mine {
			q, _ := tc.nodes["b"].Snapshot().Partition(p.Ref)
			if !q.Written || q.Node != "a" {
				return false
			}
		}
		return true
	})
}

// S-128: a draining node keeps its follower roles while nobody can take
// them, and hands them over as soon as a node that can joins.
func TestDrainingFollowerKeptUntilReplaced(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 3)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return placedWith(a.Snapshot(), "orders", 2) })
	if err := tc.nodes["c"].SetLabel(context.Background(), core.LabelDraining, "true"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "draining visible", func() bool { return a.Snapshot().Members["c"].Info.Draining() })
	before := a.Snapshot().Queue("orders", "").Parts
	time.Sleep(5 * testHeartbeat) // several controller passes
	for i, p := range a.Snapshot().Queue("orders", "").Parts {
		if p.Epoch != before[i].Epoch || !slices.Equal(p.Replicas(), before[i].Replicas()) {
			t.Fatalf("%+v → %+v: the draining follower moved with nobody to take its place", before[i], p)
		}
	}
	tc.start("d", nil)
	testkit.Eventually(t, 5*time.Second, "d takes c's follower roles", func() bool {
		for _, p := range a.Snapshot().Queue("orders", "").Parts {
			if p.HasFollower("c") || len(p.Followers) != 2 {
				return false
			}
		}
		return true
	})
	for _, p := range a.Snapshot().Queue("orders", "").Parts {
		if p.Node == "c" {
			continue // c still owns its partition (sticky while draining)
		}
		if !p.HasFollower("d") {
			t.Fatalf("%+v: d did not replace c", p)
		}
	}
}

// A live node of a version before followers (no fibril/followers label)
// could not read an assignment with followers, so none is planned while
// it is live; once it is gone, every partition gets its followers.
func TestNoFollowersWhileAnOldNodeIsLive(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	ctx := context.Background()
	old := tc.store.Member("old")
	t.Cleanup(func() { _ = old.Close() })
	lease, err := old.GrantLease(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	info := core.NodeInfo{ID: "old", PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelAdvertise: "127.0.0.1:9099"}}
	b, _ := json.Marshal(info)
	if _, err := old.CompareAndSet(ctx, memberKey("old"), b, core.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Put(ctx, nodeKey("old"), b, core.AnyVersion); err != nil {
		t.Fatal(err)
	}
	a := tc.nodes["a"]
	testkit.Eventually(t, 5*time.Second, "the old node live", func() bool { return a.Snapshot().Live("old") })
	tc.settle()
	declare(t, a.Cluster, "orders", 4)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "orders") })
	time.Sleep(5 * testHeartbeat) // several controller passes
	for _, p := range a.Snapshot().Queue("orders", "").Parts {
		if len(p.Followers) != 0 {
			t.Fatalf("%+v: followers planned while a node that cannot read them is live", p)
		}
	}
	if err := lease.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "followers once the old node is gone", func() bool {
		return placedWith(a.Snapshot(), "orders", 2)
	})
}
