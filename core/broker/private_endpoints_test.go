package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// rawTopology asks b for the whole topology over a bare connection, so
// that the endpoints' tags are seen as they are on the wire.
func rawTopology(ctx context.Context, t *testing.T, b *Broker) wire.Topology {
	t.Helper()
	conn, err := client.DialConn(ctx, b.BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril",
		Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f, err := conn.Do(ctx, wire.OpTopology, &wire.TopologyRequest{})
	if err != nil || f.Op != wire.OpTopologyOK {
		t.Fatalf("TOPOLOGY: %v %v", f.Op, err)
	}
	var ok wire.TopologyOK
	if err := ok.Decode(f.Body); err != nil {
		t.Fatal(err)
	}
	return ok.Topology
}

// privateEntries checks every queue entry of topo: with exposed, the
// entries of the partitions in mine list untagged endpoints first, none
// of them private, then privAddr tagged private; every other entry (and
// every entry without exposed) has no tag and no private address. It
// reports whether topo is so.
func privateEntries(topo wire.Topology, privAddr string, mine []uint32, exposed bool) bool {
	for _, q := range topo.Queues {
		want := exposed && slices.Contains(mine, q.Partition)
		n := len(q.Owners)
		if want && (n < 2 || q.Owners[n-1].String() != privAddr || !slices.Equal(q.Owners[n-1].Tags, []string{core.TagPrivate})) {
			return false
		}
		if want {
			n--
		}
		for _, o := range q.Owners[:n] {
			if len(o.Tags) > 0 || o.String() == privAddr {
				return false
			}
		}
	}
	return true
}

// core/routing/README.md#private-endpoints, with one private broker (n1)
// between two public ones:
//   - off (the default), no TOPOLOGY answer names n1, and n1 publishes no
//     address;
//   - the runtime setting turned on (no restart), the entries of n1's
//     partitions list the gateway first, then n1's address tagged private;
//   - an external client (default options) still never dials n1 — its
//     dialer fails the test if it tries — and publishes and consumes
//     through the gateway;
//   - an internal client with PreferPrivateEndpoints publishes directly to
//     n1 (it dials n1; no gateway relays a confirm);
//   - n1 stops: the internal client tries n1 at most once more, goes
//     through the gateways (then to the new owners), and every confirmed
//     message, from before and after, is delivered.
func TestPrivateEndpointsForInternalClients(t *testing.T) {
	bs := startMemClusterWith(t, 3, func(i int) []string {
		if i == 1 {
			return []string{"--broker.visibility=private"}
		}
		return nil
	})
	priv := bs[1]
	privAddr := priv.BrokerAddr().String()
	public := []*Broker{bs[0], bs[2]}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	external, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()}, Username: "fibril", Password: "fibril",
		Dial: privateGuard(t, map[string]bool{privAddr: true})})
	if err != nil {
		t.Fatal(err)
	}
	defer external.Close()
	const parts = 6
	if _, err := external.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	var mine []uint32 // the partitions n1 owns
	testkit.Eventually(t, 10*time.Second, "every partition placed, with followers", func() bool {
		snap := bs[0].cluster.cl.Snapshot()
		q := snap.Queue("orders", "")
		if q == nil {
			return false
		}
		mine = mine[:0]
		for _, p := range q.Parts {
			if !p.Placed() || len(p.Followers) != 2 {
				return false
			}
			if p.Node == priv.nodeID {
				mine = append(mine, p.Ref.Partition)
			}
		}
		return true
	})
	if len(mine) == 0 {
		t.Fatal("placement gave the private broker nothing; the test proves nothing")
	}

	// Off: nothing names n1, on any broker, and n1 publishes no address.
	for _, b := range bs {
		if !privateEntries(rawTopology(ctx, t, b), privAddr, mine, false) {
			t.Fatalf("with routing.expose_private_endpoints off, TOPOLOGY from %s names the private broker or a tag: %+v",
				b.nodeID, rawTopology(ctx, t, b))
		}
	}
	if l := bs[0].cluster.cl.Snapshot().Members[priv.nodeID].Info.Labels[core.LabelPrivateAdvertise]; l != "" {
		t.Fatalf("the private broker publishes %q with the setting off", l)
	}

	// On, through the admin API of one broker: every broker answers the
	// tagged entries.
	if code, body := editRuntimeSettings(t, bs[0], func(doc map[string]any) {
		doc["routing"].(map[string]any)["expose_private_endpoints"] = true
	}); code != 200 {
		t.Fatalf("turning routing.expose_private_endpoints on: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, "every broker lists the private owner's address, tagged private, after the gateway's", func() bool {
		for _, b := range bs {
			if !privateEntries(rawTopology(ctx, t, b), privAddr, mine, true) {
				return false
			}
		}
		return true
	})

	// The external client keeps using the gateways.
	pub := external.Publisher("orders", client.PublisherOptions{})
	for p := range uint32(parts) {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint("external-", p))}); err != nil {
			t.Fatalf("external publish to partition %d: %v", p, err)
		}
	}
	sub, err := external.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	consumeDistinct(ctx, t, sub, parts)
	sub.Close()

	// The internal client goes to n1 directly.
	dials := testkit.DialLog{Next: loopbackOnly(t)}
	internal, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()}, Username: "fibril", Password: "fibril",
		PreferPrivateEndpoints: true, Dial: dials.Dial, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer internal.Close()
	relayed := sumCounter(t, public, "fibril_forward_confirms_total")
	ipub := internal.Publisher("orders", client.PublisherOptions{})
	confirmed := map[string]bool{}
	for i := range 20 {
		p := mine[i%len(mine)]
		msg := fmt.Sprint("direct-", i)
		if _, err := ipub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(msg)}); err != nil {
			t.Fatalf("internal publish %d to partition %d: %v", i, p, err)
		}
		confirmed[msg] = true
	}
	if dials.Count(privAddr) == 0 {
		t.Fatal("the internal client never dialled the private owner")
	}
	if now := sumCounter(t, public, "fibril_forward_confirms_total"); now != relayed {
		t.Fatalf("a gateway relayed %v of the internal client's confirms; they should have gone to the owner directly", now-relayed)
	}
	isub, err := internal.Subscribe(ctx, "orders", client.SubscribeOptions{Partitions: mine, Prefetch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer isub.Close()

	// n1 stops.
	before := dials.Count(privAddr)
	if err := priv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := mine[i%len(mine)]
		msg := fmt.Sprint("after-", i)
		testkit.Eventually(t, 20*time.Second, "a confirmed publish after the private owner stopped", func() bool {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			_, err := ipub.PublishConfirmed(pctx, client.Message{Partition: &p, Payload: []byte(msg)})
			return err == nil
		})
		confirmed[msg] = true
	}
	awaitConfirmed(ctx, t, isub, confirmed)
	if n := dials.Count(privAddr) - before; n > 1 {
		t.Fatalf("the internal client dialled the stopped private broker %d times; it should go through the gateway after at most one", n)
	}
}
