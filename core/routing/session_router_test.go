package routing

import (
	"errors"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/storage"
)

// A grow shows its new partitions in the view before this broker's
// catalog follower installs them in the engine: an operation on one of
// them in that moment is 503 (the client retries), not 404, and one on a
// partition the engine has is served.
func TestEnsureLocalNewPartitionIsRetryable(t *testing.T) {
	qm, err := queue.Open(queue.Options{Dir: t.TempDir(), Storage: storage.Options{Fsync: storage.FsyncNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer qm.Close()
	key := queue.Key{Topic: "orders"}
	if _, err := qm.ApplyQueue(queue.QueueInfo{Key: key, PartitionCount: 2}); err != nil {
		t.Fatal(err)
	}
	f := cluster.NewFixture().Node(node("a", "127.0.0.1:7001", false), true).
		Queue(queue.QueueInfo{Key: key, PartitionCount: 4, PartitioningVersion: 1})
	for i := range uint32(4) {
		f.Assign(ref(i), cluster.Assignment{Node: "a", Epoch: 1})
	}
	snap := f.Snapshot()
	r := &SessionRouter{Queues: qm}
	if err := r.EnsureLocal(snap, ref(1)); err != nil {
		t.Fatalf("a partition the engine has: %v", err)
	}
	if err := r.EnsureLocal(snap, ref(3)); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("a partition the view has and the engine not yet: %v, want 503", err)
	}
	if err := r.EnsureLocal(snap, ref(7)); err != nil {
		t.Fatalf("past the view's count (Decide refuses it before): %v", err)
	}
}
