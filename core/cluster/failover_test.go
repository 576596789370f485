package cluster

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

func TestTailsRoundTrip(t *testing.T) {
	in := map[core.PartitionRef]Tail{
		{Topic: "orders", Partition: 2}:                  {Epoch: 7, Next: 120},
		{Topic: "billing", Group: "eu", Partition: 0}:    {Epoch: 1, Next: 0},
		{Topic: "a-b_c.d", Group: "g1", Partition: 4095}: {Epoch: 1 << 40, Next: 1 << 50},
		{Topic: "orders", Partition: 3}:                  {Epoch: 7, Next: 99, Fenced: true},
	}
	v := FormatTails(in)
	if got := ParseTails(v); !reflect.DeepEqual(got, in) {
		t.Fatalf("%q parses to %v, want %v", v, got, in)
	}
	if FormatTails(nil) != "" || len(ParseTails("")) != 0 {
		t.Fatal("no tails must be the empty label")
	}
	if got := ParseTails("x 1 assign/a/@default/0\n3 4 assign/a/@default/1\n5 6 queues/a\n7 8 assign/a/@default/2 maybe"); len(got) != 1 {
		t.Fatalf("damaged lines were not skipped: %v", got)
	}
}

// Failover promotes the in-sync member with the highest tail only when at
// most Acks−1 members are missing; members as far as it stay in sync.
func TestPromotion(t *testing.T) {
	live := func(core.NodeID) bool { return true }
	flat := func(core.NodeID) int { return 0 }
	p := Partition{Ref: core.PartitionRef{Topic: "q"}, Assignment: Assignment{Node: "a", Epoch: 4, Written: true,
		Followers: []core.NodeID{"b", "c"}, InSync: []core.NodeID{"b", "c"}, Acks: 1}}
	tails := func(kv ...any) map[core.NodeID]Tail {
		m := map[core.NodeID]Tail{}
		for i := 0; i < len(kv); i += 2 {
			m[core.NodeID(kv[i].(string))] = Tail{Epoch: 4, Next: uint64(kv[i+1].(int))}
		}
		return m
	}
	next, ok := promotion(p, tails("b", 10, "c", 12), live, flat)
	want := Assignment{Node: "c", Epoch: 5, Written: true, Followers: []core.NodeID{"b"}}
	if !ok || !reflect.DeepEqual(next, want) {
		t.Fatalf("b 10, c 12: %+v %v, want %+v", next, ok, want)
	}
	next, ok = promotion(p, tails("b", 12, "c", 12), live, flat)
	want = Assignment{Node: "b", Epoch: 5, Written: true, Followers: []core.NodeID{"c"}, InSync: []core.NodeID{"c"}, Acks: 1}
	if !ok || !reflect.DeepEqual(next, want) {
		t.Fatalf("equal tails: %+v %v, want %+v", next, ok, want)
	}
	if _, ok := promotion(p, tails("b", 12), live, flat); ok {
		t.Fatal("promoted with one of two members silent and one copy needed among them")
	}
	stale := map[core.NodeID]Tail{"b": {Epoch: 3, Next: 50}, "c": {Epoch: 4, Next: 1}}
	if _, ok := promotion(p, stale, live, flat); ok {
		t.Fatal("a tail of another epoch counted")
	}
	p1 := p
	p1.InSync = []core.NodeID{"b"}
	if next, ok := promotion(p1, tails("b", 3, "c", 9), live, flat); !ok || next.Node != "b" {
		t.Fatalf("only b is in sync: %+v %v", next, ok)
	}
	p0 := p
	p0.Acks = 0
	if _, ok := promotion(p0, tails("b", 12, "c", 12), live, flat); ok {
		t.Fatal("promoted a partition whose confirms never needed a follower (local_durable)")
	}
	if _, ok := promotion(p, tails("b", 12, "c", 12), func(id core.NodeID) bool { return false }, flat); ok {
		t.Fatal("promoted a node that may not own partitions")
	}
	if next, ok := promotion(p, tails("b", 12, "c", 12), live, func(id core.NodeID) int { return map[core.NodeID]int{"b": 3, "c": 1}[id] }); !ok || next.Node != "c" {
		t.Fatalf("equal tails, c less loaded: %+v %v", next, ok)
	}
	p2 := p
	p2.InSync, p2.Acks = []core.NodeID{"b", "c", "d"}, 2
	if next, ok := promotion(p2, tails("b", 7, "c", 8), live, flat); !ok || next.Node != "c" || next.Acks != 0 {
		t.Fatalf("two copies needed, one member silent: %+v %v", next, ok)
	}
}

// casRecorder is a coordinator that records compare-and-set writes; the
// controller's pass needs nothing else of it.
type casRecorder struct {
	core.Coordinator
	writes map[string][]byte
}

func (r *casRecorder) CompareAndSet(_ context.Context, key string, value []byte, _ uint64) (uint64, error) {
	r.writes[key] = value
	return uint64(len(r.writes)), nil
}

// The controller promotes an in-sync follower in the first pass that sees
// the owner's lease gone: the owner stopped confirming a margin before
// its lease could end, so waiting another margin from the controller's
// own first sight only delays the failover (it cost a new controller, after
// a raft leader's death, a full second).
func TestPromotionAtFirstSightOfTheDeadOwner(t *testing.T) {
	ref := core.PartitionRef{Topic: "orders"}
	node := func(id core.NodeID, tails string) core.NodeInfo {
		info := core.NodeInfo{ID: id, PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelFollowers: "1"}}
		if tails != "" {
			info.Labels[core.LabelTails] = tails
		}
		return info
	}
	tails := FormatTails(map[core.PartitionRef]Tail{ref: {Epoch: 4, Next: 20}})
	snap := NewFixture().
		Node(node("a", ""), false).
		Node(node("b", tails), true).
		Node(node("c", tails), true).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 1}).
		Assign(ref, Assignment{Node: "a", Epoch: 4, Written: true,
			Followers: []core.NodeID{"b", "c"}, InSync: []core.NodeID{"b", "c"}, Acks: 1}).
		Snapshot()
	rec := &casRecorder{writes: map[string][]byte{}}
	c := &Cluster{coord: rec, opts: Options{Now: time.Now, Heartbeat: time.Second}, log: slog.New(slog.DiscardHandler)}
	c.SetTargetFollowers(func() int { return DefaultTargetFollowers })
	c.place(context.Background(), snap, map[core.NodeID]time.Time{})
	v, ok := rec.writes[assignKey(ref)]
	if !ok {
		t.Fatal("the first pass that saw the owner dead promoted nobody")
	}
	a, ok := decodeAssignment(v)
	if !ok {
		t.Fatalf("unreadable assignment %q", v)
	}
	if a.Node != "b" && a.Node != "c" || a.Epoch != 5 || !a.Written {
		t.Fatalf("promoted %+v, want b or c at epoch 5, written", a)
	}
	if n := c.stats.Promotions.Load(); n != 1 {
		t.Fatalf("promotions = %d, want 1", n)
	}
}

// With the owner's lease still live, the controller promotes only when
// every member of the recorded in-sync set published a fenced tail under
// the partition's epoch (each saw the owner crash); one member that did
// not, or a fence of an older epoch, leaves the partition with its owner.
func TestPromotionOnCrashEvidence(t *testing.T) {
	ref := core.PartitionRef{Topic: "orders"}
	run := func(tails map[core.NodeID]Tail) (Assignment, bool) {
		f := NewFixture()
		node := func(id core.NodeID) core.NodeInfo {
			info := core.NodeInfo{ID: id, PeerAddr: "127.0.0.1:1", Labels: core.Labels{core.LabelFollowers: "1"}}
			if tl, ok := tails[id]; ok {
				info.Labels[core.LabelTails] = FormatTails(map[core.PartitionRef]Tail{ref: tl})
			}
			return info
		}
		snap := f.Node(node("a"), true).Node(node("b"), true).Node(node("c"), true).
			Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 1}).
			Assign(ref, Assignment{Node: "a", Epoch: 4, Written: true,
				Followers: []core.NodeID{"b", "c"}, InSync: []core.NodeID{"b", "c"}, Acks: 1}).
			Snapshot()
		rec := &casRecorder{writes: map[string][]byte{}}
		c := &Cluster{coord: rec, opts: Options{Now: time.Now, Heartbeat: time.Second}, log: slog.New(slog.DiscardHandler)}
		c.SetTargetFollowers(func() int { return DefaultTargetFollowers })
		c.place(context.Background(), snap, map[core.NodeID]time.Time{})
		v, ok := rec.writes[assignKey(ref)]
		if !ok {
			return Assignment{}, false
		}
		a, _ := decodeAssignment(v)
		return a, a.Node != "a"
	}
	fenced := func(next uint64) Tail { return Tail{Epoch: 4, Next: next, Fenced: true} }
	if a, moved := run(map[core.NodeID]Tail{"b": fenced(10), "c": fenced(12)}); !moved || a.Node != "c" || a.Epoch != 5 {
		t.Fatalf("both members fenced: %+v moved %v, want c at epoch 5", a, moved)
	}
	if a, moved := run(map[core.NodeID]Tail{"b": fenced(10), "c": {Epoch: 4, Next: 12}}); moved {
		t.Fatalf("c did not fence, yet the live owner's partition moved: %+v", a)
	}
	if a, moved := run(map[core.NodeID]Tail{"b": fenced(10)}); moved {
		t.Fatalf("c is silent, yet the live owner's partition moved: %+v", a)
	}
	if a, moved := run(map[core.NodeID]Tail{"b": {Epoch: 3, Next: 10, Fenced: true}, "c": {Epoch: 3, Next: 12, Fenced: true}}); moved {
		t.Fatalf("fences of an older epoch moved the partition: %+v", a)
	}
}

// A member of the in-sync set promotes on crash evidence itself (the
// controller may be the node that crashed); a node that is not a member
// does not, and neither does a member while one member has not fenced.
func TestPromoteFencedByAMember(t *testing.T) {
	ref := core.PartitionRef{Topic: "orders"}
	run := func(self core.NodeID, cFenced bool) (Assignment, bool) {
		node := func(id core.NodeID, tl *Tail) core.NodeInfo {
			info := core.NodeInfo{ID: id, PeerAddr: "127.0.0.1:1", Labels: core.Labels{}}
			if tl != nil {
				info.Labels[core.LabelTails] = FormatTails(map[core.PartitionRef]Tail{ref: *tl})
			}
			return info
		}
		snap := NewFixture().
			Node(node("a", nil), true).
			Node(node("b", &Tail{Epoch: 4, Next: 10, Fenced: true}), true).
			Node(node("c", &Tail{Epoch: 4, Next: 12, Fenced: cFenced}), true).
			Node(node("d", nil), true).
			Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 1}).
			Assign(ref, Assignment{Node: "a", Epoch: 4, Written: true,
				Followers: []core.NodeID{"b", "c"}, InSync: []core.NodeID{"b", "c"}, Acks: 1}).
			Snapshot()
		rec := &casRecorder{writes: map[string][]byte{}}
		c := &Cluster{coord: rec, self: self, opts: Options{Now: time.Now, Heartbeat: time.Second}, log: slog.New(slog.DiscardHandler)}
		if n := c.PromoteFenced(context.Background(), snap); n != len(rec.writes) {
			t.Fatalf("PromoteFenced says %d moved, %d written", n, len(rec.writes))
		}
		v, ok := rec.writes[assignKey(ref)]
		if !ok {
			return Assignment{}, false
		}
		a, _ := decodeAssignment(v)
		return a, true
	}
	if a, moved := run("b", true); !moved || a.Node != "c" || a.Epoch != 5 || !a.Written || !slices.Equal(a.Followers, []core.NodeID{"b"}) {
		t.Fatalf("member b, all fenced: %+v moved %v, want c at epoch 5 with follower b", a, moved)
	}
	if a, moved := run("d", true); moved {
		t.Fatalf("d is no member, yet it moved the partition: %+v", a)
	}
	if a, moved := run("b", false); moved {
		t.Fatalf("c did not fence, yet b moved the partition: %+v", a)
	}
}
