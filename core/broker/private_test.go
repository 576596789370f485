package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/testkit"
)

// core/routing/README.md#gateway-set: with one public and two private brokers, every
// partition gets client endpoints, and a privately owned partition's are
// the public gateway's — the private brokers' client addresses appear in
// no topology answer, on any broker. When the only public broker drains,
// the topology API flags coordination.no_live_public_broker and private
// partitions have no endpoints.
func TestPrivateOwnersAnswerTheGateway(t *testing.T) {
	bs := startMemClusterWith(t, 3, func(i int) []string {
		if i > 0 {
			return []string{"--broker.visibility=private"}
		}
		return nil
	})
	gateway := bs[0].BrokerAddr().String()
	private := []string{bs[1].BrokerAddr().String(), bs[2].BrokerAddr().String()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Coordination struct {
			NoLivePublicBroker bool `json:"no_live_public_broker"`
		} `json:"coordination"`
		Partitions []struct {
			Owner     string   `json:"owner"`
			Endpoints []string `json:"client_endpoints"`
		} `json:"partitions"`
	}
	topology := func(b *Broker) view {
		code, body := adminDo(t, b, "GET", "/admin/api/topology", "")
		if code != 200 {
			t.Fatalf("topology: %d %s", code, body)
		}
		var v view
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	testkit.Eventually(t, 5*time.Second, "every partition placed in every broker's view", func() bool {
		for _, b := range bs {
			for _, p := range topology(b).Partitions {
				if p.Owner == "" {
					return false
				}
			}
		}
		return true
	})
	privateOwned := 0
	for _, b := range bs {
		v := topology(b)
		if v.Coordination.NoLivePublicBroker {
			t.Fatal("no_live_public_broker set while the public broker is live")
		}
		if n := counterValue(t, b, "fibril_cluster_live_public_brokers"); n != 1 {
			t.Fatalf("fibril_cluster_live_public_brokers = %v, want 1", n)
		}
		if n := counterValue(t, b, "fibril_cluster_ownerless_partitions"); n != 0 {
			t.Fatalf("fibril_cluster_ownerless_partitions = %v with every owner live", n)
		}
		for _, p := range v.Partitions {
			if p.Owner != "n0" {
				privateOwned++
			}
			if strings.Join(p.Endpoints, ",") != gateway {
				t.Fatalf("partition owned by %s answers %v, want the gateway %s", p.Owner, p.Endpoints, gateway)
			}
		}
	}
	if privateOwned == 0 {
		t.Fatal("placement gave the private brokers nothing; the test proves nothing")
	}
	// Through the wire too: TOPOLOGY on each broker.
	for _, b := range bs {
		cb := dialClient(ctx, t, b)
		topo, err := cb.Topology(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range topo.Queues {
			for _, o := range q.Owners {
				for _, p := range private {
					if o == p {
						t.Fatalf("TOPOLOGY from %s leaked the private address %s", b.BrokerAddr(), o)
					}
				}
			}
		}
	}
	// The only public broker drains: no gateway left.
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/drain", `{"grace_ms":0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "no_live_public_broker on a private broker", func() bool {
		return topology(bs[1]).Coordination.NoLivePublicBroker
	})
	if n := counterValue(t, bs[1], "fibril_cluster_live_public_brokers"); n != 0 {
		t.Fatalf("fibril_cluster_live_public_brokers = %v with the only public broker drained", n)
	}
	for _, p := range topology(bs[1]).Partitions {
		if p.Owner != "n0" && len(p.Endpoints) != 0 {
			t.Fatalf("private partition answers %v with no gateway", p.Endpoints)
		}
	}
}

// core/forward/README.md#upstream-sessions: a client that only ever talks to the public broker
// publishes (confirmed and not) to and consumes from partitions owned by
// private brokers; every confirm is the owner's (the message is stored on
// the owner, never on the gateway), deliveries carry client-facing
// subscription ids from 2^48, and acks reach the owner (nothing is
// redelivered).
func TestForwardingThroughTheGateway(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			bs, c := startPrivateCluster(t, 3, transportFlags(t, tr)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 6}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "every partition placed", func() bool {
				topo, err := c.Topology(ctx, "orders")
				if err != nil {
					return false
				}
				placed := 0
				for _, q := range topo.Queues {
					if len(q.Owners) > 0 {
						placed++
					}
				}
				return placed == 6
			})
			pub := c.Publisher("orders", client.PublisherOptions{})
			const total = 60
			for i := range total {
				p := uint32(i % 6)
				if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint(i))}); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			for i := range 6 { // fire-and-forget too
				p := uint32(i)
				if err := pub.Publish(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint("ff", i))}); err != nil {
					t.Fatal(err)
				}
			}
			// Each message is stored on its partition's owner only.
			for _, b := range bs {
				snap := b.cluster.cl.Snapshot()
				for _, d := range b.queues.Depths() {
					p, _ := snap.Partition(core.PartitionRef{Topic: d.Key.Topic, Partition: d.Partition})
					if p.Node != b.nodeID {
						t.Fatalf("%s holds %s#%d, owned by %s", b.nodeID, d.Key, d.Partition, p.Node)
					}
				}
			}
			sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 8})
			if err != nil {
				t.Fatal(err)
			}
			consumeDistinct(ctx, t, sub, total+6)
			// core/forward/README.md#observability: the gateway and the owners publish their session
			// counts; the gateway counted the owners' confirms.
			testkit.Eventually(t, 5*time.Second, "the session count labels", func() bool {
				snap := bs[0].cluster.cl.Snapshot()
				fwd := 0
				for _, b := range bs[1:] {
					if snap.Members[b.nodeID].Info.Labels[core.LabelForwardedSessions] != "" {
						fwd++
					}
				}
				return snap.Members["n0"].Info.Labels[core.LabelUpstreamSessions] != "" && fwd > 0
			})
			if n := counterValue(t, bs[0], "fibril_forward_upstream_sessions"); n < 1 {
				t.Fatalf("fibril_forward_upstream_sessions = %v while forwarding", n)
			}
			forwarded := 0
			snap := bs[0].cluster.cl.Snapshot()
			for i := range total {
				if p, _ := snap.Partition(core.PartitionRef{Topic: "orders", Partition: uint32(i % 6)}); p.Node != "n0" {
					forwarded++
				}
			}
			// core/forward/README.md#observability: the owner marks a forwarded session "via node P for
			// user U"; the gateway lists its upstreams.
			type connsView struct {
				Connections []session.ConnInfo `json:"connections"`
			}
			var owner, gw connsView
			_, body := adminDo(t, bs[1], "GET", "/admin/api/connections", "")
			if err := json.Unmarshal([]byte(body), &owner); err != nil {
				t.Fatal(err)
			}
			via := 0
			for _, ci := range owner.Connections {
				if ci.Forwarded != nil && ci.Forwarded.Summary == "via node n0 for user fibril" && ci.User == "@node" {
					via++
				}
			}
			if via == 0 {
				t.Fatalf("the owner's connections show no forwarded session: %s", body)
			}
			_, body = adminDo(t, bs[0], "GET", "/admin/api/connections", "")
			if err := json.Unmarshal([]byte(body), &gw); err != nil {
				t.Fatal(err)
			}
			if len(gw.Connections) == 0 || len(gw.Connections[0].Upstreams) == 0 || gw.Connections[0].User != "fibril" {
				t.Fatalf("the gateway's connections: %s", body)
			}
			if got := counterValue(t, bs[0], "fibril_forward_confirms_total"); int(got) != forwarded {
				t.Fatalf("fibril_forward_confirms_total = %v, want %d (the confirmed publishes to private owners)", got, forwarded)
			}
			sub.Close()
			// Acks reached the owners: nothing is left or redelivered.
			testkit.Eventually(t, 5*time.Second, "every owner settled everything", func() bool {
				for _, b := range bs {
					for _, d := range b.queues.Depths() {
						if d.Ready != 0 || d.Inflight != 0 {
							return false
						}
					}
				}
				return true
			})
		})
	}
}

// Two public brokers behind one load-balancer address (both
// advertise it; the balancer here sends every connection to n0) and a
// private one. Every partition answers the balancer's address, n0 forwards
// what n1 and n2 own — no redirect ping-pong — and every confirmed
// publish and delivery goes through. Over tcp and quic.
func TestTwoPublicBrokersShareOneAddress(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			twoPublicBrokersShareOneAddress(t, transportFlags(t, tr))
		})
	}
}

func twoPublicBrokersShareOneAddress(t *testing.T, extra []string) {
	lbLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := lbLn.Addr().String()
	bs := startMemClusterWith(t, 3, func(i int) []string {
		if i == 2 {
			return append([]string{"--broker.visibility=private"}, extra...)
		}
		// Behind a balancer each public broker needs its own peer address
		// (the default, the first advertise entry, is the balancer's): a
		// peer listener of its own gives it one.
		return append([]string{"--broker.peer_listener.bind=127.0.0.1:0", "--broker.listener.advertise=" + lb}, extra...)
	})
	go func() { // the balancer: every connection to n0
		for {
			in, err := lbLn.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", bs[0].BrokerAddr().String())
			if err != nil {
				in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() { lbLn.Close() })
	guard := loopbackOnly(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{lb}, Username: "fibril", Password: "fibril", TLS: clientTLS(bs[0]),
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != lb {
				t.Errorf("the client dialled %s, not the balancer", addr)
				return nil, errors.New("not the balancer")
			}
			return guard(ctx, network, addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "lb", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	owners := map[core.NodeID]int{}
	testkit.Eventually(t, 5*time.Second, "every partition placed", func() bool {
		snap := bs[0].cluster.cl.Snapshot()
		q := snap.Queue("lb", "")
		if q == nil {
			return false
		}
		clear(owners)
		for _, p := range q.Parts {
			if !p.Placed() {
				return false
			}
			owners[p.Node]++
		}
		return true
	})
	if owners["n1"] == 0 || owners["n2"] == 0 {
		t.Fatalf("placement %v leaves n1 or n2 without partitions; the test proves nothing", owners)
	}
	pub := c.Publisher("lb", client.PublisherOptions{})
	for i := range 30 {
		p := uint32(i % 6)
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("publish %d (partition %d): %v", i, p, err)
		}
	}
	sub, err := c.Subscribe(ctx, "lb", client.SubscribeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	consumeDistinct(ctx, t, sub, 30)
	if n := counterValue(t, bs[0], "fibril_forward_confirms_total"); n != float64(5*(owners["n1"]+owners["n2"])) {
		t.Fatalf("n0 relayed %v confirms, want %d (the partitions n1 and n2 own)", n, 5*(owners["n1"]+owners["n2"]))
	}
}
