package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/plugins"
)

// memStores are the in-memory coordination clusters of this test
// process, by name: brokers started with coordination.backend = memtest
// and coordination.raft.peers = [name=127.0.0.1:1] share one.
var memStores = struct {
	sync.Mutex
	m map[string]*memcoord.Store
}{m: map[string]*memcoord.Store{}}

func init() {
	plugins.RegisterCoordination("memtest", func(ctx context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
		name := env.Config["coordination.raft.peers"]
		memStores.Lock()
		defer memStores.Unlock()
		st := memStores.m[name]
		if st == nil {
			st = memcoord.NewStore(memcoord.Options{MinTTL: 50 * time.Millisecond, ElectionTTL: 300 * time.Millisecond})
			memStores.m[name] = st
		}
		return st.Member(string(env.NodeID)), nil
	})
}

// startMemCluster starts n brokers sharing one in-memory coordinator.
func startMemCluster(t *testing.T, n int) []*Broker {
	t.Helper()
	name := fmt.Sprintf("%s=127.0.0.1:1", t.Name())
	var out []*Broker
	for i := range n {
		cfg, _, err := config.Load([]string{
			"--server.data_dir=" + t.TempDir(),
			"--broker.listener.bind=127.0.0.1:0",
			"--admin.listener.bind=127.0.0.1:0",
			"--coordination.backend=memtest",
			"--coordination.raft.peers=" + name,
			fmt.Sprintf("--coordination.node_id=n%d", i),
			"--coordination.heartbeat_interval_ms=50",
			"--coordination.liveness_ttl_ms=300",
		}, []string{"FIBRIL_CLUSTER_SECRET=test-secret"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Start(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown() })
		out = append(out, b)
	}
	return out
}

// Three brokers, one client that knows only the first: it declares there,
// publishes to every partition and consumes everything, following the
// topology and REDIRECTs to the owners (issue #4 §8, S-114, S-116).
func TestClusterRoutesClientsToOwners(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()},
		Username: "fibril", Password: "fibril", Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	// Wait until every partition has an owner in the topology.
	var topo *client.Topology
	deadline := time.Now().Add(10 * time.Second)
	for {
		topo, err = c.Topology(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		placed := 0
		for _, p := range topo.Queues {
			if len(p.Owners) > 0 {
				placed++
			}
		}
		if placed == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions not placed: %+v", topo.Queues)
		}
		time.Sleep(20 * time.Millisecond)
	}
	owners := map[string]int{}
	for _, p := range topo.Queues {
		owners[p.Owners[0]]++
	}
	if len(owners) != 3 {
		t.Fatalf("partitions on %d brokers, want 3: %v", len(owners), owners)
	}
	pub := c.Publisher("orders", client.PublisherOptions{})
	const total = 60
	for i := range total {
		p := uint32(i % 6)
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := map[string]bool{}
	for len(got) < total {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d deliveries: %v", len(got), err)
		}
		got[string(d.Payload)] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.PrefetchViolations != 0 {
		t.Fatalf("prefetch violations: %d", st.PrefetchViolations)
	}
}

// Issue #4 §4: nothing is auto-created in coordinated mode; an undeclared
// queue answers 404 (WIRE §7.3).
func TestClusterDoesNotAutoCreate(t *testing.T) {
	bs := startMemCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()},
		Username: "fibril", Password: "fibril", Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Publisher("nope", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Payload: []byte("x")})
	var be *client.Error
	if !errors.As(err, &be) || be.Code != 404 {
		t.Fatalf("publish to an undeclared queue: %v, want 404", err)
	}
}
