package routing

import (
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

func node(id, advertise string, private bool) core.NodeInfo {
	l := core.Labels{}
	if advertise != "" {
		l[core.LabelAdvertise] = advertise
	}
	if private {
		l[core.LabelVisibility] = string(core.Private)
	}
	return core.NodeInfo{ID: core.NodeID(id), PeerAddr: "127.0.0.1:1", Labels: l}
}

func ref(p uint32) core.PartitionRef { return core.PartitionRef{Topic: "orders", Partition: p} }

// fixture: a (self, 127.0.0.1:7001), b live public, c dead, d private,
// e live public sharing a's address (one load-balancer address).
// orders#0 a, #1 b, #2 c written, #3 c unwritten, #4 d, #5 e, #6 unplaced.
func fixture() *cluster.Snapshot {
	f := cluster.NewFixture().
		Node(node("a", "127.0.0.1:7001", false), true).
		Node(node("b", "127.0.0.1:7002,127.0.0.1:7012", false), true).
		Node(node("c", "127.0.0.1:7003", false), false).
		Node(node("d", "", true), true).
		Node(node("e", "127.0.0.1:7001", false), true).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 7, PartitioningVersion: 2})
	for i, n := range []string{"a", "b", "c", "c", "d", "e"} {
		f.Assign(ref(uint32(i)), cluster.Assignment{Node: core.NodeID(n), Epoch: 3, Written: i == 2})
	}
	return f.Snapshot()
}

var self = Self{ID: "a", Advertise: []core.Endpoint{{Host: "127.0.0.1", Port: 7001}}}

// WIRE_V1.md §7.3 rows, one per situation of the handler rule.
func TestDecide(t *testing.T) {
	s := fixture()
	cases := []struct {
		ref    core.PartitionRef
		action Action
		code   uint16
		eps    string
	}{
		{ref(0), Serve, 0, ""},
		{ref(1), Redirect, 0, "127.0.0.1:7002,127.0.0.1:7012"},
		{ref(2), Refuse, wire.CodeUnavailable, ""}, // dead owner holding the only copy
		{ref(3), Refuse, wire.CodeUnavailable, ""}, // dead, about to be re-placed
		{ref(4), Refuse, wire.CodeUnavailable, ""}, // private owner: forwarding is a later capability
		{ref(5), Refuse, wire.CodeUnavailable, ""}, // owner's endpoints are this broker's own
		{ref(6), Refuse, wire.CodeConflict, ""},    // no owner yet (S-117)
		{ref(7), Refuse, wire.CodeNotFound, ""},    // beyond the count
		{core.PartitionRef{Topic: "nope"}, Refuse, wire.CodeNotFound, ""},
	}
	for _, c := range cases {
		d := Decide(s, self, c.ref)
		if d.Action != c.action {
			t.Errorf("%s: action %v, want %v (err %v)", c.ref, d.Action, c.action, d.Err)
			continue
		}
		if c.action == Refuse && core.Code(d.Err) != c.code {
			t.Errorf("%s: code %d, want %d (%v)", c.ref, core.Code(d.Err), c.code, d.Err)
		}
		if c.action == Redirect {
			if got := core.FormatEndpoints(d.Endpoints); got != c.eps {
				t.Errorf("%s: endpoints %s, want %s", c.ref, got, c.eps)
			}
			r := RedirectBody(d)
			if r.PartitioningVersion != 2 || r.Topic != "orders" || r.Partition != c.ref.Partition || r.Group.Present {
				t.Errorf("%s: redirect body %+v", c.ref, r)
			}
		}
	}
}

// S-118: a stale partitioning version is redirected to the owner with the
// current version, even when the owner is this broker.
func TestFence(t *testing.T) {
	s := fixture()
	d, fenced := Fence(s, ref(0), 1)
	if !fenced || d.Version != 2 || core.FormatEndpoints(d.Endpoints) != "127.0.0.1:7001" {
		t.Fatalf("stale publish to own partition: %+v %v", d, fenced)
	}
	if _, fenced := Fence(s, ref(0), 2); fenced {
		t.Fatal("current version fenced")
	}
	if _, fenced := Fence(s, ref(2), 0); fenced {
		t.Fatal("fenced with an unresolvable (dead) owner; the publish must pass to the rule")
	}
}

// No client-facing answer ever carries a private broker's address: walk
// every partition through every path (topology, redirect, fence).
func TestNoPrivateAddressLeaks(t *testing.T) {
	s := cluster.NewFixture().
		Node(node("pub", "127.0.0.1:7001", false), true).
		Node(core.NodeInfo{ID: "priv", PeerAddr: "127.0.0.1:7999",
			Labels: core.Labels{core.LabelVisibility: "private", core.LabelAdvertise: "127.0.0.1:7999"}}, true).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 4, PartitioningVersion: 1})
	for i := range uint32(4) {
		n := core.NodeID("priv")
		if i%2 == 0 {
			n = "pub"
		}
		s.Assign(ref(i), cluster.Assignment{Node: n, Epoch: 1})
	}
	snap := s.Snapshot()
	check := func(where string, eps []core.Endpoint) {
		for _, e := range eps {
			if e.Port == 7999 {
				t.Fatalf("%s leaked the private address %s", where, e)
			}
		}
	}
	topo := Topology(snap, wire.TopologyRequest{})
	for _, q := range topo.Queues {
		for _, o := range q.Owners {
			if strings.HasSuffix(o.String(), ":7999") {
				t.Fatalf("topology leaked %s", o)
			}
		}
	}
	for _, me := range []core.NodeID{"pub", "priv", "other"} {
		for i := range uint32(4) {
			d := Decide(snap, Self{ID: me}, ref(i))
			check("redirect", d.Endpoints)
			fd, _ := Fence(snap, ref(i), 0)
			check("fence", fd.Endpoints)
		}
	}
}

// S-112/S-114: every declared partition is listed, placed or not, with the
// count on each entry; filters narrow topic and group.
func TestTopology(t *testing.T) {
	s := fixture()
	topo := Topology(s, wire.TopologyRequest{})
	if topo.Generation == 0 || len(topo.Queues) != 7 {
		t.Fatalf("topology %+v", topo)
	}
	for _, q := range topo.Queues {
		if q.PartitionCount != 7 || q.PartitioningVersion != 2 {
			t.Fatalf("entry %+v", q)
		}
		want := map[uint32]string{0: "127.0.0.1:7001", 1: "127.0.0.1:7002", 5: "127.0.0.1:7001"}[q.Partition]
		got := ""
		if len(q.Owners) > 0 {
			got = q.Owners[0].String()
		}
		if got != want {
			t.Fatalf("partition %d first owner %q, want %q", q.Partition, got, want)
		}
	}
	if n := len(Topology(s, wire.TopologyRequest{Topic: wire.Some("other")}).Queues); n != 0 {
		t.Fatalf("topic filter kept %d", n)
	}
	if n := len(Topology(s, wire.TopologyRequest{Topic: wire.Some("orders"), Group: wire.Some("g")}).Queues); n != 0 {
		t.Fatalf("group filter kept %d", n)
	}
}
