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
	"github.com/fibrilgo/fibril/core/wire"
)

// A delete's tombstone takes the queue out of every view at once, with an
// epoch above its partitions'; the name cannot be declared again while a
// member has not confirmed (also one that is down: every member is on the
// list); once all have, the controller removes the name's records and
// marks the tombstone finished, a new declaration (same kind only) takes
// its place, and a stream cannot take the name.
func TestTombstoneLifecycle(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	ctx := context.Background()
	declare(t, a.Cluster, "jobs", 3)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "jobs") })
	var maxEpoch uint64
	for _, p := range a.Snapshot().Queue("jobs", "").Parts {
		maxEpoch = max(maxEpoch, p.Epoch)
	}
	tc.crash("c")

	if _, err := a.Delete(ctx, "queue", "nope", "", "ops", false); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("deleting an undeclared queue: %v", err)
	}
	tomb, err := a.Delete(ctx, "queue", "jobs", "", "ops", false)
	if err != nil {
		t.Fatal(err)
	}
	if tomb.Epoch <= maxEpoch || tomb.By != "ops" || !slices.Equal(tomb.Pending, []core.NodeID{"a", "b", "c"}) {
		t.Fatalf("tombstone %+v (partition epochs up to %d)", tomb, maxEpoch)
	}
	if again, err := a.Delete(ctx, "queue", "jobs", "", "someone else", true); err != nil || again.By != "ops" {
		t.Fatalf("a second delete: %+v %v, want the one in progress", again, err)
	}
	for _, id := range []core.NodeID{"a", "b"} {
		n := tc.nodes[id]
		testkit.Eventually(t, 5*time.Second, "the queue leaves "+string(id)+"'s view", func() bool {
			return n.Snapshot().Queue("jobs", "") == nil && n.Snapshot().Tombstone("queue", "jobs", "") != nil
		})
		if err := n.ConfirmDropped(ctx, tomb, Dropped{Messages: 1}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.DeclareQueue(ctx, queue.QueueSpec{Key: queue.Key{Topic: "jobs"}, PartitionCount: wire.Some(uint32(2))}, 1)
	if !errors.Is(err, core.ErrConflict) {
		t.Fatalf("declaring while c has not confirmed: %v", err)
	}
	c := tc.start("c", nil)
	if err := c.ConfirmDropped(ctx, tomb, Dropped{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the controller finishes the deletion", func() bool {
		t := a.Snapshot().Tombstone("queue", "jobs", "")
		return t != nil && t.Finished && len(t.Dropped) == 3
	})
	if kvs, _, err := a.coord.List(ctx, prefixAssign+"jobs/"); err != nil || len(kvs) != 0 {
		t.Fatalf("assignments left: %v %v", kvs, err)
	}
	if _, err := a.DeclareStream(ctx, queue.StreamSpec{Topic: "jobs"}, 1); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("the name as a stream: %v", err)
	}
	info := declare(t, a.Cluster, "jobs", 2)
	if info.PartitionCount != 2 {
		t.Fatalf("declared again: %+v", info)
	}
	testkit.Eventually(t, 5*time.Second, "the new queue placed", func() bool {
		s := a.Snapshot()
		return allPlaced(s, "jobs") && s.Tombstone("queue", "jobs", "") == nil
	})
}

// What a backup restores: the catalog and assignments (the latter without
// followers: a restored follower holds no copy), users and settings; not
// membership or liveness.
func TestRestorable(t *testing.T) {
	a := Assignment{Node: "n1", Epoch: 4, Written: true, Followers: []core.NodeID{"n2", "n3"}, InSync: []core.NodeID{"n2"}, Acks: 1}
	v, ok := Restorable(assignKey(core.PartitionRef{Topic: "jobs", Partition: 2}), encodeAssignment(a))
	got, ok2 := decodeAssignment(v)
	if !ok || !ok2 || got.Node != "n1" || got.Epoch != 4 || !got.Written || got.Followers != nil || got.InSync != nil || got.Acks != 0 {
		t.Fatalf("restored assignment %+v (%v %v)", got, ok, ok2)
	}
	for key, want := range map[string]bool{
		queueKey("jobs", ""): true, streamKey("events"): true, prefixTopics + "jobs": true, KeyUsers: true, KeySettings: true,
		tombstoneKey("queue", "old", ""): true, repartitionKey("jobs", ""): true, memberKey("n1"): false, nodeKey("n1"): false, "_election/placement": false,
	} {
		if _, ok := Restorable(key, []byte("{}")); ok != want {
			t.Errorf("Restorable(%q) = %v, want %v", key, ok, want)
		}
	}
}
