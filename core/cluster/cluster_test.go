package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

const (
	testHeartbeat = 20 * time.Millisecond
	testTTL       = 100 * time.Millisecond
)

type testNode struct {
	*Cluster
	id core.NodeID
}

type testCluster struct {
	t     *testing.T
	store *memcoord.Store
	nodes map[core.NodeID]*testNode
	// target is replication.target_followers for every node's controller
	// (DefaultTargetFollowers unless a test changes it).
	target atomic.Int64
	// wrap, when set, wraps each node's coordinator (a lagging view).
	wrap func(core.NodeID, core.Coordinator) core.Coordinator
}

func newTestCluster(t *testing.T, ids ...core.NodeID) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, store: memcoord.NewStore(memcoord.Options{MinTTL: 20 * time.Millisecond, ElectionTTL: testTTL}),
		nodes: make(map[core.NodeID]*testNode)}
	tc.target.Store(DefaultTargetFollowers)
	for _, id := range ids {
		tc.start(id, nil)
	}
	return tc
}

func (tc *testCluster) start(id core.NodeID, labels core.Labels) *testNode {
	tc.t.Helper()
	if labels == nil {
		labels = core.Labels{core.LabelAdvertise: "127.0.0.1:" + fmt.Sprint(9000+len(tc.nodes))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var coord core.Coordinator = tc.store.Member(string(id))
	if tc.wrap != nil {
		coord = tc.wrap(id, coord)
	}
	c, err := Start(ctx, Options{Coordinator: coord,
		Self:      core.NodeInfo{ID: id, PeerAddr: "127.0.0.1:1", Labels: labels},
		Heartbeat: testHeartbeat, TTL: testTTL, Logger: slog.New(slog.DiscardHandler),
		TargetFollowers: func() int { return int(tc.target.Load()) }})
	if err != nil {
		tc.t.Fatal(err)
	}
	n := &testNode{Cluster: c, id: id}
	tc.nodes[id] = n
	tc.t.Cleanup(func() { _ = c.Close(context.Background(), false) })
	return n
}

// settle waits until every node's view holds every node live, so that
// the controller's first plan already sees them all (a plan made from a
// view that lacks a node adds its follower roles later, with a new epoch).
func (tc *testCluster) settle() {
	tc.t.Helper()
	testkit.Eventually(tc.t, 5*time.Second, "every node live in every view", func() bool {
		for _, n := range tc.nodes {
			for id := range tc.nodes {
				if !n.Snapshot().Live(id) {
					return false
				}
			}
		}
		return true
	})
}

// crash stops a node as kill -9 would: no revoke, its member handle closed.
func (tc *testCluster) crash(id core.NodeID) {
	n := tc.nodes[id]
	_ = n.Close(context.Background(), false)
	_ = n.coord.Close()
	delete(tc.nodes, id)
}

func declare(t *testing.T, c *Cluster, topic string, parts uint32) queue.QueueInfo {
	t.Helper()
	info, err := c.DeclareQueue(context.Background(), queue.QueueSpec{Key: queue.Key{Topic: topic},
		PartitionCount: wire.Some(parts)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func allPlaced(s *Snapshot, topic string) bool {
	q := s.Queue(topic, "")
	if q == nil {
		return false
	}
	for _, p := range q.Parts {
		if !p.Placed() {
			return false
		}
	}
	return true
}

func owners(s *Snapshot, topic string) map[core.NodeID]int {
	out := map[core.NodeID]int{}
	for _, p := range s.Queue(topic, "").Parts {
		out[p.Node]++
	}
	return out
}

// S-133: every declared partition gets an owner among live nodes, and a
// queue's partitions land on distinct nodes before any node gets a second.
func TestPlacementSpreadsPartitions(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 6)
	for _, n := range tc.nodes {
		testkit.Eventually(t, 5*time.Second, "all placed on "+string(n.id), func() bool { return allPlaced(n.Snapshot(), "orders") })
	}
	got := owners(a.Snapshot(), "orders")
	for _, id := range []core.NodeID{"a", "b", "c"} {
		if got[id] != 2 {
			t.Fatalf("placement %v: want 2 partitions per node", got)
		}
	}
	for _, p := range a.Snapshot().Queue("orders", "").Parts {
		if p.Epoch != 1 || p.Written {
			t.Fatalf("new assignment %+v: want epoch 1, not written", p)
		}
	}
	// Exactly one controller.
	leaders := 0
	for _, n := range tc.nodes {
		if n.IsController() {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d controllers, want 1", leaders)
	}
}

// Partitions are listed even before they are placed; the
// catalog is replicated; a redeclare with another count is the cluster's
// 409 (S-18); a topic is a queue or a stream for life (S-22).
func TestCatalogDecisions(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	info := declare(t, a.Cluster, "orders", 3)
	if info.PartitionCount != 3 {
		t.Fatalf("declared %+v", info)
	}
	testkit.Eventually(t, 5*time.Second, "b sees the queue", func() bool { return b.Snapshot().Queue("orders", "") != nil })
	if n := len(b.Snapshot().Queue("orders", "").Parts); n != 3 {
		t.Fatalf("b lists %d partitions", n)
	}
	// Same declaration elsewhere: the same decision.
	again, err := b.DeclareQueue(context.Background(), queue.QueueSpec{Key: queue.Key{Topic: "orders"}}, 7)
	if err != nil || again.PartitionCount != 3 {
		t.Fatalf("redeclare without count: %+v %v", again, err)
	}
	_, err = b.DeclareQueue(context.Background(), queue.QueueSpec{Key: queue.Key{Topic: "orders"}, PartitionCount: wire.Some(uint32(5))}, 1)
	if core.Code(err) != wire.CodeConflict {
		t.Fatalf("redeclare with another count: %v, want 409", err)
	}
	_, err = b.DeclareStream(context.Background(), queue.StreamSpec{Topic: "orders"}, 1)
	if core.Code(err) != wire.CodeBadRequest {
		t.Fatalf("stream on a queue topic: %v, want 400", err)
	}
	// Concurrent first declarations agree.
	errs := make(chan error, 2)
	for _, n := range []*testNode{a, b} {
		go func() {
			_, err := n.DeclareQueue(context.Background(), queue.QueueSpec{Key: queue.Key{Topic: "race"}, PartitionCount: wire.Some(uint32(2))}, 1)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// S-138 (only a node holding a partition's log may own it): a dead owner's written
// partitions stay assigned to it; its never-written ones move, with a new
// epoch, only after the TTL and the margin.
func TestDeadOwnerKeepsWrittenPartitions(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 6)
	// Every node's view, not only the declaring one's: the victim's own
	// view is read below and may trail a's.
	testkit.Eventually(t, 5*time.Second, "placed in every view", func() bool {
		for _, n := range tc.nodes {
			if !allPlaced(n.Snapshot(), "orders") {
				return false
			}
		}
		return true
	})
	victim := core.NodeID("b")
	if a.IsController() || tc.nodes["b"].IsController() {
		victim = "c"
		if tc.nodes["c"].IsController() {
			victim = "b"
		}
	}
	vn := tc.nodes[victim]
	var written, unwritten []core.PartitionRef
	for _, p := range vn.Snapshot().Queue("orders", "").Parts {
		if p.Node != victim {
			continue
		}
		if len(written) == 0 {
			if err := vn.MarkWritten(context.Background(), p.Ref); err != nil {
				t.Fatal(err)
			}
			written = append(written, p.Ref)
		} else {
			unwritten = append(unwritten, p.Ref)
		}
	}
	if len(written) != 1 || len(unwritten) != 1 {
		t.Fatalf("victim %s owns written %v unwritten %v", victim, written, unwritten)
	}
	crashed := time.Now()
	tc.crash(victim)
	testkit.Eventually(t, 5*time.Second, "unwritten partition re-placed", func() bool {
		p, _ := a.Snapshot().Partition(unwritten[0])
		return p.Node != victim && p.Placed()
	})
	if el := time.Since(crashed); el < testTTL {
		t.Fatalf("re-placed %v after the crash, before the TTL %v", el, testTTL)
	}
	p, _ := a.Snapshot().Partition(unwritten[0])
	if p.Epoch != 2 {
		t.Fatalf("re-placed with epoch %d, want 2", p.Epoch)
	}
	// Give the controller several more passes; the written one stays.
	time.Sleep(4 * testTTL)
	w, _ := a.Snapshot().Partition(written[0])
	if w.Node != victim || !w.Written || w.Epoch != 1 {
		t.Fatalf("written partition of a dead owner moved: %+v", w)
	}
	if a.Snapshot().Live(victim) {
		t.Fatal("crashed node still live")
	}
}

// The written mark is only for the committed owner, and it is idempotent.
func TestMarkWritten(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 2)
	for _, n := range tc.nodes {
		testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(n.Snapshot(), "orders") })
	}
	for _, p := range a.Snapshot().Queue("orders", "").Parts {
		owner, other := tc.nodes[p.Node], tc.nodes["a"]
		if p.Node == "a" {
			other = tc.nodes["b"]
		}
		if err := other.MarkWritten(context.Background(), p.Ref); !errors.Is(err, core.ErrUnavailable) {
			t.Fatalf("non-owner mark: %v, want unavailable", err)
		}
		for range 2 {
			if err := owner.MarkWritten(context.Background(), p.Ref); err != nil {
				t.Fatal(err)
			}
		}
		testkit.Eventually(t, 5*time.Second, "mark visible", func() bool {
			q, _ := other.Snapshot().Partition(p.Ref)
			return q.Written && q.Epoch == p.Epoch && q.Node == p.Node
		})
	}
}

// S-128: a draining node gets no new placements but keeps what it owns.
func TestDrainingNodeGetsNoNewPartitions(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	a := tc.nodes["a"]
	declare(t, a.Cluster, "before", 3)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "before") })
	if err := tc.nodes["c"].SetLabel(context.Background(), core.LabelDraining, "true"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "draining visible", func() bool { return a.Snapshot().Members["c"].Info.Draining() })
	declare(t, a.Cluster, "after", 4)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "after") })
	if got := owners(a.Snapshot(), "after"); got["c"] != 0 || got["a"] != 2 || got["b"] != 2 {
		t.Fatalf("placement while c drains: %v", got)
	}
	if got := owners(a.Snapshot(), "before"); got["c"] != 1 {
		t.Fatalf("draining node lost its partition: %v", got)
	}
}

// A controller that dies is replaced, and placement goes on.
func TestControllerFailover(t *testing.T) {
	tc := newTestCluster(t, "a", "b", "c")
	var leader core.NodeID
	testkit.Eventually(t, 5*time.Second, "a controller", func() bool {
		for id, n := range tc.nodes {
			if n.IsController() {
				leader = id
				return true
			}
		}
		return false
	})
	var other *testNode
	for id, n := range tc.nodes {
		if id != leader {
			other = n
		}
	}
	// Seen live first: a view that has not met the controller yet would
	// pass "seen dead" below at once (seen in CI), and a new controller
	// whose view still holds the old one's lease could place on it.
	testkit.Eventually(t, 5*time.Second, "the controller seen live", func() bool {
		for id, n := range tc.nodes {
			if id != leader && !n.Snapshot().Live(leader) {
				return false
			}
		}
		return true
	})
	tc.crash(leader)
	testkit.Eventually(t, 5*time.Second, "the dead controller seen dead by every survivor (the next controller among them)", func() bool {
		for _, n := range tc.nodes {
			if n.Snapshot().Live(leader) {
				return false
			}
		}
		return true
	})
	declare(t, other.Cluster, "later", 4)
	testkit.Eventually(t, 5*time.Second, "placed by a new controller", func() bool { return allPlaced(other.Snapshot(), "later") })
	for _, p := range other.Snapshot().Queue("later", "").Parts {
		if p.Node == leader {
			t.Fatalf("placed on the dead controller: %+v", p)
		}
	}
}

// The owner's serving window ends before the cluster can hand its
// partitions on: ServeUntil stays at least Margin before the lease's end.
func TestServeUntilStopsBeforeExpiry(t *testing.T) {
	tc := newTestCluster(t, "a")
	a := tc.nodes["a"]
	if !a.LeaseValid() {
		t.Fatal("fresh node's lease not valid")
	}
	tc.store.PauseMember("a") // its coordinator is gone: renews fail
	// Every renew that succeeded started before this instant, so the
	// lease ends by paused+TTL and serving must stop Margin earlier. The
	// bound is checked on ServeUntil itself, not on how soon a poll
	// notices (CI once saw a poll land 0.8 ms past the TTL).
	bound := time.Now().Add(testTTL - a.Margin())
	if su := a.ServeUntil(); su.After(bound) {
		t.Fatalf("serves until %v past the bound (the last renew's TTL minus the margin)", su.Sub(bound))
	}
	testkit.Eventually(t, 5*time.Second, "lease no longer valid", func() bool { return !a.LeaseValid() })
	if su := a.ServeUntil(); su.After(bound) {
		t.Fatalf("once lapsed, serves until %v past the bound", su.Sub(bound))
	}
	tc.store.ResumeMember("a")
	testkit.Eventually(t, 5*time.Second, "valid again", a.LeaseValid)
}

// fixedLease is a lease valid until a fixed time.
type fixedLease struct {
	core.Lease
	until time.Time
}

func (l fixedLease) ValidUntil() time.Time { return l.until }

// A node that registered again (after its lease was lost) serves nothing
// until its view holds its new live record: until then the view may still
// name it owner of partitions that moved meanwhile, in their old epoch.
func TestServeUntilWaitsForTheViewOfTheNewLease(t *testing.T) {
	c := &Cluster{opts: Options{Now: time.Now, Heartbeat: time.Second}}
	until := time.Now().Add(time.Minute)
	c.lease, c.recorded, c.viewFrom = fixedLease{until: until}, true, 7
	c.snap.Store(&Snapshot{Index: 6})
	if c.LeaseValid() || !c.ServeUntil().IsZero() {
		t.Fatalf("serving until %v with a view at index 6, before the lease's record at 7", c.ServeUntil())
	}
	c.snap.Store(&Snapshot{Index: 7})
	if want := until.Add(-c.Margin()); !c.LeaseValid() || !c.ServeUntil().Equal(want) {
		t.Fatalf("view at 7: serving until %v, want %v", c.ServeUntil(), want)
	}
}

// Heartbeats must not move the topology generation (S-131); a routing
// change must.
func TestGenerationMovesOnRoutingChangesOnly(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 2)
	testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(a.Snapshot(), "orders") })
	g := a.Snapshot().Generation
	time.Sleep(5 * testHeartbeat)
	if a.Snapshot().Generation != g {
		t.Fatalf("generation moved without a routing change: %d → %d", g, a.Snapshot().Generation)
	}
	declare(t, a.Cluster, "more", 1)
	testkit.Eventually(t, 5*time.Second, "generation moves", func() bool { return a.Snapshot().Generation > g })
}

// A private node's exposed client addresses (core.LabelPrivateAdvertise,
// core/routing/README.md#private-endpoints) are routing content: publishing
// and withdrawing them moves the generation, so connected clients get a
// TOPOLOGY_UPDATE either way.
func TestPrivateAdvertiseMovesTheGeneration(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	testkit.Eventually(t, 5*time.Second, "both nodes live", func() bool { return a.Snapshot().Live("a") && a.Snapshot().Live("b") })
	var expose atomic.Bool
	b.SetLabelSource(func() core.Labels {
		if expose.Load() {
			return core.Labels{core.LabelPrivateAdvertise: "127.0.0.1:7999"}
		}
		return core.Labels{core.LabelPrivateAdvertise: ""}
	})
	for _, on := range []bool{true, false} {
		gen := a.Snapshot().Generation
		expose.Store(on)
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("the label is published = %v", on), func() bool {
			return (a.Snapshot().Members["b"].Info.Labels[core.LabelPrivateAdvertise] != "") == on
		})
		if g := a.Snapshot().Generation; g == gen {
			t.Fatalf("exposed = %v left the generation at %d", on, g)
		}
	}
}

// S-120: each node publishes its adoption level with its heartbeat; the
// cluster floor is the lowest among live nodes; the label never moves the
// topology generation.
func TestAdoptionFloor(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	if _, ok := a.Snapshot().AdoptionFloor(); ok {
		t.Fatal("a floor before any node published one")
	}
	testkit.Eventually(t, 5*time.Second, "both nodes live", func() bool { return a.Snapshot().Live("a") && a.Snapshot().Live("b") })
	gen := a.Snapshot().Generation
	a.SetLabelSource(func() core.Labels { return core.Labels{core.LabelAdoption: "9"} })
	b.SetLabelSource(func() core.Labels { return core.Labels{core.LabelAdoption: "7"} })
	testkit.Eventually(t, 5*time.Second, "the floor is 7", func() bool {
		f, ok := a.Snapshot().AdoptionFloor()
		return ok && f == 7
	})
	if g := a.Snapshot().Generation; g != gen {
		t.Fatalf("adoption labels moved the generation %d → %d", gen, g)
	}
	tc.crash("b") // dead nodes do not hold the floor down
	testkit.Eventually(t, 5*time.Second, "the floor is 9", func() bool {
		f, ok := a.Snapshot().AdoptionFloor()
		return ok && f == 9
	})
}

// laggingWatch delays every Watch answer, as a local replica that trails the
// leader does.
type laggingWatch struct {
	core.Coordinator
	lag time.Duration
}

func (l laggingWatch) Watch(ctx context.Context, prefix string, after uint64) ([]core.KV, uint64, error) {
	kvs, idx, err := l.Coordinator.Watch(ctx, prefix, after)
	if err == nil {
		time.Sleep(l.lag)
	}
	return kvs, idx, err
}

// A declaration returns only once this node's own view holds it, so a
// TOPOLOGY read on the same broker right after DECLARE_OK lists the queue
// (S-114; a client subscribing to "every partition" reads the count from
// it). The watch here lags every write by 300 ms.
func TestDeclarationIsInOwnViewOnReturn(t *testing.T) {
	store := memcoord.NewStore(memcoord.Options{MinTTL: 20 * time.Millisecond, ElectionTTL: testTTL})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Start(ctx, Options{Coordinator: laggingWatch{store.Member("a"), 300 * time.Millisecond},
		Self:      core.NodeInfo{ID: "a", PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelAdvertise: "127.0.0.1:9000"}},
		Heartbeat: testHeartbeat, TTL: testTTL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background(), false) })
	declare(t, c, "ryw", 3)
	if c.Snapshot().Queue("ryw", "") == nil {
		t.Fatal("DeclareQueue returned before this node's view held the queue")
	}
	// Declaring it again changes nothing and still answers from a view
	// that holds it.
	declare(t, c, "ryw", 3)
	if c.Snapshot().Queue("ryw", "") == nil {
		t.Fatal("a repeated declaration returned before the view held the queue")
	}
}

// A node whose view trails a declaration made elsewhere catches up on
// demand: CatchUp learns the store's index from a linearizable read and
// waits until the view reflects it, and says so.
func TestCatchUpWaitsForADeclarationMadeElsewhere(t *testing.T) {
	tc := newTestCluster(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Start(ctx, Options{Coordinator: laggingWatch{tc.store.Member("b"), 300 * time.Millisecond},
		Self:      core.NodeInfo{ID: "b", PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelAdvertise: "127.0.0.1:9100"}},
		Heartbeat: testHeartbeat, TTL: testTTL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background(), false) })
	declare(t, tc.nodes["a"].Cluster, "elsewhere", 2)
	if b.Snapshot().Queue("elsewhere", "") != nil {
		t.Skip("b's view caught up before the check; the lag did not show")
	}
	if !b.CatchUp(ctx, core.PartitionRef{Topic: "elsewhere", Partition: 1}) {
		t.Fatal("CatchUp did not wait for a declared queue its view lacked")
	}
	if b.Snapshot().Queue("elsewhere", "") == nil {
		t.Fatal("after CatchUp the view still lacks the queue")
	}
}

// NewEpoch moves an owned partition past an epoch, keeping owner,
// followers and the written mark; a second call finds it done; a
// non-owner is refused.
func TestNewEpoch(t *testing.T) {
	tc := newTestCluster(t, "a", "b")
	tc.settle()
	a := tc.nodes["a"]
	declare(t, a.Cluster, "orders", 1)
	for _, n := range tc.nodes {
		testkit.Eventually(t, 5*time.Second, "placed", func() bool { return allPlaced(n.Snapshot(), "orders") })
	}
	p := a.Snapshot().Queue("orders", "").Parts[0]
	owner, other := tc.nodes[p.Node], tc.nodes["a"]
	if p.Node == "a" {
		other = tc.nodes["b"]
	}
	if err := owner.MarkWritten(context.Background(), p.Ref); err != nil {
		t.Fatal(err)
	}
	if _, err := other.NewEpoch(context.Background(), p.Ref, p.Epoch); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("non-owner: %v, want unavailable", err)
	}
	testkit.Eventually(t, 5*time.Second, "the mark in the owner's view", func() bool {
		q, _ := owner.Snapshot().Partition(p.Ref)
		return q.Written
	})
	e, err := owner.NewEpoch(context.Background(), p.Ref, p.Epoch+3)
	if err != nil || e != p.Epoch+4 {
		t.Fatalf("NewEpoch above %d: %d, %v", p.Epoch+3, e, err)
	}
	testkit.Eventually(t, 5*time.Second, "the new epoch visible, mark and owner kept", func() bool {
		q, _ := other.Snapshot().Partition(p.Ref)
		return q.Epoch == e && q.Written && q.Node == p.Node && len(q.Followers) == len(p.Followers)
	})
	if again, err := owner.NewEpoch(context.Background(), p.Ref, p.Epoch); err != nil || again != e {
		t.Fatalf("NewEpoch below the current epoch: %d, %v, want %d", again, err, e)
	}
}
