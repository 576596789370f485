package broker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// Seed §1–§2 (issue 6 §2): with one public and two private brokers, every
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
	waitFor(t, "every partition placed", func() bool {
		for _, p := range topology(bs[0]).Partitions {
			if p.Owner == "" {
				return false
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
	waitFor(t, "no_live_public_broker on a private broker", func() bool {
		return topology(bs[1]).Coordination.NoLivePublicBroker
	})
	for _, p := range topology(bs[1]).Partitions {
		if p.Owner != "n0" && len(p.Endpoints) != 0 {
			t.Fatalf("private partition answers %v with no gateway", p.Endpoints)
		}
	}
}
