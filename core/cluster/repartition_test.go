package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
)

// Which old partitions each partition of the new layout waits for
// (S-123, S-124).
func TestRepartitionSourcesOf(t *testing.T) {
	grow := &Repartition{From: 2, To: 6}
	for n, want := range map[uint32][]uint32{0: nil, 1: nil, 2: {0}, 3: {1}, 4: {0}, 5: {1}} {
		if got := grow.SourcesOf(n); !slices.Equal(got, want) {
			t.Errorf("grow 2→6: SourcesOf(%d) = %v, want %v", n, got, want)
		}
	}
	shrink := &Repartition{From: 6, To: 2}
	for n, want := range map[uint32][]uint32{0: {2, 4}, 1: {3, 5}, 2: nil, 5: nil} {
		if got := shrink.SourcesOf(n); !slices.Equal(got, want) {
			t.Errorf("shrink 6→2: SourcesOf(%d) = %v, want %v", n, got, want)
		}
	}
	if !shrink.Retiring(2) || shrink.Retiring(1) || grow.Retiring(5) {
		t.Error("Retiring")
	}
}

// The requests S-122 … S-124 refuse, the no-op, and one transition at a
// time.
func TestRepartitionRequests(t *testing.T) {
	tc := newTestCluster(t, "a")
	tc.settle()
	a := tc.nodes["a"]
	ctx := context.Background()
	declare(t, a.Cluster, "jobs", 3)
	if _, err := a.DeclareStream(ctx, queue.StreamSpec{Topic: "events"}, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topic string
		count uint32
		want  error
	}{
		{"jobs", 0, core.ErrBadRequest},
		{"jobs", 4, core.ErrBadRequest}, // not a multiple
		{"jobs", 2, core.ErrBadRequest}, // not a divisor
		{"events", 2, core.ErrBadRequest},
		{"nope", 2, core.ErrNotFound},
	} {
		if r, err := a.Repartition(ctx, c.topic, "", c.count, "ops"); !errors.Is(err, c.want) || r != nil {
			t.Errorf("%s to %d: %v %v, want %v", c.topic, c.count, r, err, c.want)
		}
	}
	if r, err := a.Repartition(ctx, "jobs", "", 3, "ops"); r != nil || err != nil {
		t.Fatalf("the same count: %v %v, want a no-op", r, err)
	}
	r, err := a.Repartition(ctx, "jobs", "", 6, "ops")
	if err != nil || r.From != 3 || r.To != 6 || r.BaseVersion != 0 || r.By != "ops" {
		t.Fatalf("grow: %+v %v", r, err)
	}
	if q := a.Snapshot().Queue("jobs", ""); q.Repartition == nil || len(q.Parts) != 6 {
		t.Fatalf("the view on return: %+v", q)
	}
	if _, err := a.Repartition(ctx, "jobs", "", 1, "ops"); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("a second transition while one is unfinished: %v", err)
	}
}

// A grow, step by step: the new partitions are placed before the
// cutover raises the count and the version; the generation is stamped;
// finalize waits for every source to drain (and, with clients that
// adopted no newer topology, for the adoption timeout), then the marker
// goes. The controller crashes in the middle; its successor goes on.
func TestRepartitionGrow(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	ctx := context.Background()
	declare(t, a.Cluster, "jobs", 2)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "jobs") })
	if _, err := a.Repartition(ctx, "jobs", "", 4, "ops"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "cut over with 4 placed partitions", func() bool {
		q := a.Snapshot().Queue("jobs", "")
		return allPlaced(a.Snapshot(), "jobs") && q.Info.PartitionCount == 4 && q.Info.PartitioningVersion == 1 &&
			q.Repartition != nil && q.Repartition.Generation != 0
	})
	for _, id := range []core.NodeID{"a", "b", "c"} {
		if tc.nodes[id].IsController() {
			tc.crash(id)
			if id == "a" {
				a = tc.nodes["b"]
			}
			break
		}
	}
	for p := range uint32(2) {
		ref := core.PartitionRef{Topic: "jobs", Partition: p}
		if err := a.RecordCutover(ctx, ref, 1, 10+uint64(p)); err != nil {
			t.Fatal(err)
		}
		if err := a.RecordCutover(ctx, ref, 2, 99); err != nil { // a second owner inherits the first one's
			t.Fatal(err)
		}
	}
	if err := a.RecordDrained(ctx, core.PartitionRef{Topic: "jobs", Partition: 0}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the view holds both cutovers", func() bool {
		r := a.Snapshot().RepartitionOf("jobs", "")
		return r != nil && r.Sources[0].Drained && r.Sources[1].Cutover == 11
	})
	r := a.Snapshot().RepartitionOf("jobs", "")
	if r.Sources[0].Cutover != 10 || r.Drained(r.SourcesOf(3)) || !r.Drained(r.SourcesOf(2)) {
		t.Fatalf("sources %+v", r.Sources)
	}
	time.Sleep(3 * testTTL) // no finalize while partition 1 has not drained
	if a.Snapshot().RepartitionOf("jobs", "") == nil {
		t.Fatal("finalized before every source drained")
	}
	if err := a.RecordDrained(ctx, core.PartitionRef{Topic: "jobs", Partition: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "finalized", func() bool {
		q := a.Snapshot().Queue("jobs", "")
		return q.Repartition == nil && len(q.Parts) == 4 && q.Info.PartitionCount == 4
	})
}

// A shrink: the cutover lowers the count at once, the retiring
// partitions stay in the view until finalize, which removes their
// assignments.
func TestRepartitionShrink(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	tc.settle()
	a := tc.nodes["a"]
	ctx := context.Background()
	declare(t, a.Cluster, "jobs", 4)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "jobs") })
	if _, err := a.Repartition(ctx, "jobs", "", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "cut over", func() bool {
		q := a.Snapshot().Queue("jobs", "")
		return q.Info.PartitionCount == 2 && q.Info.PartitioningVersion == 1 && len(q.Parts) == 4
	})
	for p := range uint32(4) {
		ref := core.PartitionRef{Topic: "jobs", Partition: p}
		if err := a.RecordCutover(ctx, ref, 1, 5); err != nil {
			t.Fatal(err)
		}
		if err := a.RecordDrained(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "finalized", func() bool {
		q := a.Snapshot().Queue("jobs", "")
		return q.Repartition == nil && len(q.Parts) == 2
	})
	if kvs, _, err := a.coord.List(ctx, prefixAssign+"jobs/"); err != nil || len(kvs) != 2 {
		t.Fatalf("assignments after the shrink: %v %v", kvs, err)
	}
}

// Deleting a queue mid-transition removes its marker with it.
func TestRepartitionGoesWithTheQueue(t *testing.T) {
	tc := newTestCluster(t, "a")
	tc.settle()
	a := tc.nodes["a"]
	ctx := context.Background()
	declare(t, a.Cluster, "jobs", 1)
	if _, err := a.Repartition(ctx, "jobs", "", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	tomb, err := a.Delete(ctx, "queue", "jobs", "", "ops", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ConfirmDropped(ctx, tomb, Dropped{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "deleted", func() bool {
		t := a.Snapshot().Tombstone("queue", "jobs", "")
		return t != nil && t.Finished
	})
	if kv, err := a.coord.Get(ctx, repartitionKey("jobs", "")); err != nil || kv.Version != 0 {
		t.Fatalf("marker after the delete: %+v %v", kv, err)
	}
}

// Finalize waits for the adoption floor to reach the cutover's generation
// (a node whose clients acknowledged only an older topology holds it up)
// until routing.repartition_adoption_timeout_ms passes (S-125).
func TestRepartitionWaitsForAdoption(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.start("a", core.Labels{core.LabelAdvertise: "127.0.0.1:9000", core.LabelAdoption: "1"})
	tc.settle()
	a.SetAdoptionTimeout(func() time.Duration { return time.Hour })
	ctx := context.Background()
	declare(t, a.Cluster, "jobs", 1)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "jobs") })
	if _, err := a.Repartition(ctx, "jobs", "", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "cut over and stamped", func() bool {
		r := a.Snapshot().RepartitionOf("jobs", "")
		return r != nil && r.Generation > 1
	})
	ref := core.PartitionRef{Topic: "jobs"}
	if err := a.RecordCutover(ctx, ref, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordDrained(ctx, ref); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the drain seen", func() bool {
		r := a.Snapshot().RepartitionOf("jobs", "")
		return r != nil && !r.DrainedAt.IsZero()
	})
	time.Sleep(3 * testTTL)
	if a.Snapshot().RepartitionOf("jobs", "") == nil {
		t.Fatal("finalized while the adoption floor trails and the timeout has not passed")
	}
	a.SetAdoptionTimeout(func() time.Duration { return 0 })
	testkit.Eventually(t, 5*time.Second, "finalized after the timeout", func() bool {
		return a.Snapshot().RepartitionOf("jobs", "") == nil
	})
}
