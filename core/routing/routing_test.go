package routing

import (
	"fmt"
	"maps"
	"strconv"
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
// e live public sharing a's address (one load-balancer address), f
// private. orders#0 a, #1 b, #2 c written, #3 c unwritten, #4 d, #5 e,
// #6 unplaced, #7 f.
func fixture() *cluster.Snapshot {
	f := cluster.NewFixture().
		Node(node("a", "127.0.0.1:7001", false), true).
		Node(node("b", "127.0.0.1:7002,127.0.0.1:7012", false), true).
		Node(node("c", "127.0.0.1:7003", false), false).
		Node(node("d", "", true), true).
		Node(node("e", "127.0.0.1:7001", false), true).
		Node(node("f", "", true), true).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 8, PartitioningVersion: 2})
	for i, n := range []string{"a", "b", "c", "c", "d", "e", "", "f"} {
		if n != "" {
			f.Assign(ref(uint32(i)), cluster.Assignment{Node: core.NodeID(n), Epoch: 3, Written: i == 2})
		}
	}
	return f.Snapshot()
}

var self = Self{ID: "a", Advertise: []core.Endpoint{{Host: "127.0.0.1", Port: 7001}}}

// gatewayOf is the address the fixture's gateway set (a, b, e) answers
// for ref, by the pinned rendezvous (its vectors are tested separately).
func gatewayOf(r core.PartitionRef) string {
	return map[core.NodeID]string{"a": "127.0.0.1:7001", "b": "127.0.0.1:7002,127.0.0.1:7012", "e": "127.0.0.1:7001"}[Rendezvous(r, []core.NodeID{"a", "b", "e"})]
}

type decideCase struct {
	ref    core.PartitionRef
	action Action
	code   uint16
	eps    string
}

func checkDecide(t *testing.T, who string, s *cluster.Snapshot, me Self, forwarded bool, cases []decideCase) {
	t.Helper()
	for _, c := range cases {
		d := Decide(s, me, c.ref, forwarded)
		if d.Action != c.action {
			t.Errorf("%s %s: action %v, want %v (err %v)", who, c.ref, d.Action, c.action, d.Err)
			continue
		}
		if (c.action == Refuse || c.action == Forward) && core.Code(d.Err) != c.code {
			t.Errorf("%s %s: code %d, want %d (%v)", who, c.ref, core.Code(d.Err), c.code, d.Err)
		}
		if c.action == Redirect {
			if got := core.FormatEndpoints(d.Endpoints); got != c.eps {
				t.Errorf("%s %s: endpoints %s, want %s", who, c.ref, got, c.eps)
			}
			r := RedirectBody(d)
			if r.PartitioningVersion != 2 || r.Topic != "orders" || r.Partition != c.ref.Partition || r.Group.Present {
				t.Errorf("%s %s: redirect body %+v", who, c.ref, r)
			}
		}
	}
}

// docs/protocol.md#answers rows, one per situation of the handler rule (core/routing/README.md#handler-rule).
func TestDecide(t *testing.T) {
	s := fixture()
	// A public broker on a client session: it forwards.
	checkDecide(t, "public", s, self, false, []decideCase{
		{ref(0), Serve, 0, ""},
		{ref(1), Redirect, 0, "127.0.0.1:7002,127.0.0.1:7012"},
		{ref(2), Refuse, wire.CodeUnavailable, ""},  // dead owner holding the only copy
		{ref(3), Refuse, wire.CodeUnavailable, ""},  // dead, about to be re-placed
		{ref(4), Forward, wire.CodeUnavailable, ""}, // private owner
		{ref(5), Forward, wire.CodeUnavailable, ""}, // owner behind this broker's own (shared) address
		{ref(6), Refuse, wire.CodeUnavailable, ""},  // no owner in a gateway's view yet
		{ref(7), Forward, wire.CodeUnavailable, ""},
		{ref(8), Refuse, wire.CodeNotFound, ""}, // beyond the count
		{core.PartitionRef{Topic: "nope"}, Refuse, wire.CodeNotFound, ""},
	})
	// Past the count, the answer says the queue exists and how many
	// partitions it has (a client after a shrink), not "not declared".
	if d := Decide(s, self, ref(8), false); d.Err == nil || !strings.Contains(d.Err.Error(), "orders has 8 partitions; partition 8 does not exist") {
		t.Fatalf("partition 8 of 8: %v", d.Err)
	}
	// A private broker never forwards: the gateway's endpoints, or 409
	// when it has none of its own to avoid.
	priv := Self{ID: "d", Private: true}
	checkDecide(t, "private", s, priv, false, []decideCase{
		{ref(4), Serve, 0, ""},
		{ref(0), Redirect, 0, "127.0.0.1:7001"},
		{ref(5), Redirect, 0, "127.0.0.1:7001"},
		{ref(6), Refuse, wire.CodeConflict, ""}, // S-117
		{ref(7), Redirect, 0, gatewayOf(ref(7))},
	})
	// A public broker on a forwarded session (one hop): never forwards,
	// never redirects to its own address.
	var r4, r7 decideCase
	for i, rc := range []*decideCase{&r4, &r7} {
		r := ref([]uint32{4, 7}[i])
		if gw := gatewayOf(r); gw == "127.0.0.1:7001" {
			*rc = decideCase{r, Refuse, wire.CodeConflict, ""}
		} else {
			*rc = decideCase{r, Redirect, 0, gw}
		}
	}
	checkDecide(t, "forwarded", s, self, true, []decideCase{
		{ref(0), Serve, 0, ""},
		{ref(1), Redirect, 0, "127.0.0.1:7002,127.0.0.1:7012"},
		{ref(5), Refuse, wire.CodeConflict, ""},
		{ref(6), Refuse, wire.CodeConflict, ""},
		r4, r7,
	})
}

// core/routing/README.md#gateway-set: a privately owned partition's client endpoints
// are its gateway's — one live, non-draining public broker chosen by the
// pinned rendezvous — stable while the gateway set stands, moving only the
// partitions of a gateway that dies or drains; none without a gateway.
func TestGatewaySelection(t *testing.T) {
	build := func(nodes ...core.NodeInfo) *cluster.Snapshot {
		f := cluster.NewFixture().Node(node("p", "", true), true).
			Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 64, PartitioningVersion: 1})
		for _, n := range nodes {
			live := n.Labels["test/dead"] == ""
			delete(n.Labels, "test/dead")
			f.Node(n, live)
		}
		for i := range uint32(64) {
			f.Assign(ref(i), cluster.Assignment{Node: "p", Epoch: 1})
		}
		return f.Snapshot()
	}
	pub := func(id string, port int, extra ...string) core.NodeInfo {
		n := node(id, "127.0.0.1:"+strconv.Itoa(port), false)
		for i := 0; i+1 < len(extra); i += 2 {
			n.Labels[extra[i]] = extra[i+1]
		}
		return n
	}
	endpoint := func(s *cluster.Snapshot, i uint32) string {
		p, _ := s.Partition(ref(i))
		return core.FormatEndpoints(ClientEndpoints(s, p))
	}
	three := build(pub("g1", 7001), pub("g2", 7002), pub("g3", 7003))
	if got := three.Gateways; len(got) != 3 {
		t.Fatalf("gateways %v", got)
	}
	used := map[string]int{}
	for i := range uint32(64) {
		want := map[core.NodeID]string{"g1": "127.0.0.1:7001", "g2": "127.0.0.1:7002", "g3": "127.0.0.1:7003"}[Rendezvous(ref(i), []core.NodeID{"g1", "g2", "g3"})]
		if got := endpoint(three, i); got != want {
			t.Fatalf("partition %d: %s, want %s", i, got, want)
		}
		used[want]++
	}
	if len(used) != 3 {
		t.Fatalf("64 partitions used only %v", used)
	}
	// g2 drains, or dies: only its partitions move, to g1 or g3.
	for _, s := range []*cluster.Snapshot{
		build(pub("g1", 7001), pub("g2", 7002, core.LabelDraining, "true"), pub("g3", 7003)),
		build(pub("g1", 7001), pub("g2", 7002, "test/dead", "x"), pub("g3", 7003)),
	} {
		for i := range uint32(64) {
			before, after := endpoint(three, i), endpoint(s, i)
			switch {
			case after == "127.0.0.1:7002":
				t.Fatalf("partition %d still goes to the gone gateway", i)
			case before != "127.0.0.1:7002" && after != before:
				t.Fatalf("partition %d moved from %s to %s although its gateway stayed", i, before, after)
			}
		}
	}
	// Public brokers behind one load-balancer address: that address.
	lb := build(pub("g1", 7000), pub("g2", 7000))
	for i := range uint32(64) {
		if got := endpoint(lb, i); got != "127.0.0.1:7000" {
			t.Fatalf("shared address: %s", got)
		}
	}
	// No live public broker: no endpoints (a client falls back to its
	// bootstrap broker, S-115).
	none := build(pub("g1", 7001, "test/dead", "x"))
	if got := endpoint(none, 0); got != "" || len(none.Gateways) != 0 {
		t.Fatalf("no gateway: %q %v", got, none.Gateways)
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
	topo := Topology(snap, wire.TopologyRequest{}, false)
	for _, q := range topo.Queues {
		for _, o := range q.Owners {
			if strings.HasSuffix(o.String(), ":7999") {
				t.Fatalf("topology leaked %s", o)
			}
		}
	}
	for _, me := range []Self{{ID: "pub"}, {ID: "priv", Private: true}, {ID: "other"}, {ID: "other", Private: true}} {
		for _, forwarded := range []bool{false, true} {
			for i := range uint32(4) {
				d := Decide(snap, me, ref(i), forwarded)
				check("redirect", d.Endpoints)
				fd, _ := Fence(snap, ref(i), 0)
				check("fence", fd.Endpoints)
				p, _ := snap.Partition(ref(i))
				check("client endpoints", ClientEndpoints(snap, p))
			}
		}
	}
}

// S-112/S-114: every declared partition is listed, placed or not, with the
// count on each entry; filters narrow topic and group.
func TestTopology(t *testing.T) {
	s := fixture()
	topo := Topology(s, wire.TopologyRequest{}, false)
	if topo.Generation == 0 || len(topo.Queues) != 8 {
		t.Fatalf("topology %+v", topo)
	}
	for _, q := range topo.Queues {
		if q.PartitionCount != 8 || q.PartitioningVersion != 2 {
			t.Fatalf("entry %+v", q)
		}
		// Private owners (#4 d, #7 f) answer their gateway's address.
		want := map[uint32]string{0: "127.0.0.1:7001", 1: "127.0.0.1:7002", 5: "127.0.0.1:7001",
			4: strings.Split(gatewayOf(ref(4)), ",")[0], 7: strings.Split(gatewayOf(ref(7)), ",")[0]}[q.Partition]
		got := ""
		if len(q.Owners) > 0 {
			got = q.Owners[0].String()
		}
		if got != want {
			t.Fatalf("partition %d first owner %q, want %q", q.Partition, got, want)
		}
	}
	if n := len(Topology(s, wire.TopologyRequest{Topic: wire.Some("other")}, false).Queues); n != 0 {
		t.Fatalf("topic filter kept %d", n)
	}
	if n := len(Topology(s, wire.TopologyRequest{Topic: wire.Some("orders"), Group: wire.Some("g")}, false).Queues); n != 0 {
		t.Fatalf("group filter kept %d", n)
	}
}

// privateFixture: pub (public, 127.0.0.1:7001) and two private owners,
// priv (publishing its client addresses 127.0.0.1:7998 and [::1]:7999 in
// LabelPrivateAdvertise, as a private broker does while
// routing.expose_private_endpoints is on) and quiet (publishing none).
// orders#0 pub, #1 priv, #2 quiet; the stream events#0 priv.
func privateFixture(pubLive bool) *cluster.Snapshot {
	f := cluster.NewFixture().
		Node(node("pub", "127.0.0.1:7001", false), pubLive).
		Node(core.NodeInfo{ID: "priv", PeerAddr: "127.0.0.1:7990", Labels: core.Labels{core.LabelVisibility: "private",
			core.LabelPrivateAdvertise: "127.0.0.1:7998,[::1]:7999"}}, true).
		Node(node("quiet", "", true), true).
		Queue(queue.QueueInfo{Key: queue.Key{Topic: "orders"}, PartitionCount: 3}).
		Stream(queue.StreamInfo{StreamSpec: queue.StreamSpec{Topic: "events"}, PartitionCount: 1})
	for i, n := range []core.NodeID{"pub", "priv", "quiet"} {
		f.Assign(ref(uint32(i)), cluster.Assignment{Node: n, Epoch: 1})
	}
	f.Assign(core.PartitionRef{Topic: "events"}, cluster.Assignment{Node: "priv", Epoch: 1})
	return f.Snapshot()
}

// entry renders a topology entry's endpoints as host:port[#tag] for the
// comparisons below.
func entry(owners []wire.AdvertisedAddress) string {
	var parts []string
	for _, o := range owners {
		p := o.String()
		for _, tag := range o.Tags {
			p += "#" + tag
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

// core/routing/README.md#private-endpoints: with routing.expose_private_endpoints
// off, no topology entry names a private owner even when it publishes its
// addresses; on, a privately owned partition's entry lists the gateway's
// endpoints first, unchanged, then the owner's own, tagged private — for
// queues and streams alike. Public owners' entries, and private owners that
// publish nothing, are unchanged.
func TestTopologyPrivateEndpoints(t *testing.T) {
	s := privateFixture(true)
	off := map[string]string{"orders#0": "127.0.0.1:7001", "orders#1": "127.0.0.1:7001", "orders#2": "127.0.0.1:7001",
		"events#0": "127.0.0.1:7001"}
	on := map[string]string{"orders#0": "127.0.0.1:7001", "orders#1": "127.0.0.1:7001,127.0.0.1:7998#private,[::1]:7999#private",
		"orders#2": "127.0.0.1:7001", "events#0": "127.0.0.1:7001,127.0.0.1:7998#private,[::1]:7999#private"}
	for _, c := range []struct {
		expose bool
		want   map[string]string
	}{{false, off}, {true, on}} {
		topo := Topology(s, wire.TopologyRequest{}, c.expose)
		got := map[string]string{}
		for _, q := range topo.Queues {
			got[fmt.Sprintf("%s#%d", q.Topic, q.Partition)] = entry(q.Owners)
		}
		for _, st := range topo.Streams {
			got[fmt.Sprintf("%s#%d", st.Topic, st.Partition)] = entry(st.Owners)
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("expose = %v: entries %v, want %v", c.expose, got, c.want)
		}
	}
}

// The tagged entries belong to topology answers only: redirects, the
// fence and ClientEndpoints (the admin view) never carry a private
// address, whatever the setting; and a private owner's addresses are not
// listed in an entry without gateway endpoints (no live public broker),
// where they would be the first entry an SDK dials.
func TestPrivateEndpointsOnlyInTopology(t *testing.T) {
	s := privateFixture(true)
	leaks := func(eps []core.Endpoint) bool {
		for _, e := range eps {
			if e.Port == 7998 || e.Port == 7999 || len(e.Tags) > 0 {
				return true
			}
		}
		return false
	}
	for _, me := range []Self{{ID: "pub"}, {ID: "priv", Private: true}, {ID: "quiet", Private: true}, {ID: "other"}} {
		for _, forwarded := range []bool{false, true} {
			for i := range uint32(3) {
				if d := Decide(s, me, ref(i), forwarded); leaks(d.Endpoints) {
					t.Errorf("%s: redirect for %s carries %v", me.ID, ref(i), d.Endpoints)
				}
			}
		}
	}
	for i := range uint32(3) {
		if d, _ := Fence(s, ref(i), 0); leaks(d.Endpoints) {
			t.Errorf("fence for %s carries %v", ref(i), d.Endpoints)
		}
		if p, _ := s.Partition(ref(i)); leaks(ClientEndpoints(s, p)) {
			t.Errorf("ClientEndpoints(%s) carries a private address", ref(i))
		}
	}
	noGateway := privateFixture(false)
	for _, q := range Topology(noGateway, wire.TopologyRequest{}, true).Queues {
		if len(q.Owners) != 0 {
			t.Errorf("with no live public broker, orders#%d lists %s", q.Partition, entry(q.Owners))
		}
	}
}
