package integration

// The cluster scenarios on the Consul backend, against a real agent
// (coordination/consul/consultest): one public and two private brokers,
// declare, placement, routing and forwarding, an owner killed and failed
// over, a Consul restart mid-traffic, and a broker cut off from Consul
// that stops serving before another broker takes its partition.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/coordination/consul/consultest"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/transport/faultproxy"
)

var consulPrefixSeq atomic.Int64

// consulBackend puts every node on a Consul agent (addr(i) for node i),
// under a key prefix of the cluster's own. Heartbeats are once a second:
// Consul's sessions last at least 10 s, so renewing 4 times a second
// would only load the agent.
func consulBackend(addr func(i int) string) backend {
	return func(t *testing.T, nodes []*clusterNode) [][]string {
		prefix := fmt.Sprintf("it-%d-%d", time.Now().UnixNano(), consulPrefixSeq.Add(1))
		out := make([][]string, len(nodes))
		for i := range nodes {
			out[i] = []string{
				"--coordination.backend=consul",
				"--coordination.consul.addresses=" + addr(i),
				"--coordination.consul.prefix=" + prefix,
				"--coordination.heartbeat_interval_ms=1000",
				"--coordination.liveness_ttl_ms=10000",
			}
		}
		return out
	}
}

func sameAgent(a *consultest.Agent) func(int) string { return func(int) string { return a.Addr } }

// privatelyOwned declares orders with parts partitions through the public
// broker and returns a partition a private broker owns, and the owners.
func privatelyOwned(t *testing.T, pc *privateCluster, c *client.Client, parts int) (uint32, map[uint32]string) {
	t.Helper()
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: uint32(parts)}); err != nil {
		t.Fatal(err)
	}
	owners := pc.placed(pc.nodes[0], "orders", parts)
	for p := range uint32(parts) {
		if owners[p] != "node-1" {
			return p, owners
		}
	}
	t.Fatalf("the private brokers own nothing of %v; the test proves nothing", owners)
	return 0, nil
}

// The scenario table of the raft cluster, on Consul: placement across a
// public and two private brokers, publishing and consuming through the
// public one (forwarded to the private owner), the owner killed (kill -9)
// and the partition failed over, then the Consul agent restarted while
// traffic runs. Every confirmed message is delivered.
func TestConsulClusterScenario(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{Persistent: true})
	pc := startPrivateClusterOn(t, consulBackend(sameAgent(agent)), "tcp")
	c := pc.client(t)
	part, owners := privatelyOwned(t, pc, c, 3)
	t.Logf("placement on Consul: %v", owners)

	tr := startTraffic(t, c, []uint32{part}, 2*time.Second, 4*time.Minute)
	tr.progress(t, 200, "200 confirmed publishes through the gateway to the private owner")

	victim := pc.node(owners[part])
	killed := time.Now()
	victim.kill()
	tr.progress(t, 100, "100 confirmed publishes after the owner was killed")
	now := pc.ownerOf(pc.nodes[0], "orders", part)
	t.Logf("failover on Consul: %s → %s; 100 confirms %v after the kill", victim.id, now, time.Since(killed).Round(time.Millisecond))
	if now == victim.id {
		t.Fatalf("the partition took confirmed publishes while still assigned to the dead %s", victim.id)
	}
	pc.restart(victim)
	pc.awaitInSync(t, "orders", part, victim.id)

	restarted := time.Now()
	agent.Restart()
	t.Logf("Consul agent restarted in %v", time.Since(restarted).Round(time.Millisecond))
	tr.progress(t, 200, "200 confirmed publishes after the Consul restart")
	for _, nd := range pc.nodes {
		testkit.Eventually(t, 2*waitTimeout, nd.id+" ready after the Consul restart", func() bool {
			code, _ := httpGet(t, nd.Admin, "/readyz", nil)
			return code == 200
		})
	}
	n, missing, dups, extra := tr.finish(t)
	t.Logf("confirmed %d, failed publishes %d, lost %d, duplicates %d, delivered without a confirm %d", n, tr.failed, missing, dups, extra)
}

// A private owner cut off from Consul (its agent connection blackholed)
// must stop serving — its lease is no longer surely valid — before the
// controller gives its partition to another broker.
func TestConsulOwnerCutOffStopsBeforeTakeover(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	proxies := make([]*faultproxy.Proxy, 3)
	for i := range proxies {
		proxies[i] = faultproxy.NewTCP(t, agent.Addr)
	}
	pc := startPrivateClusterOn(t, consulBackend(func(i int) string { return proxies[i].Addr() }), "tcp")
	c := pc.client(t)
	part, owners := privatelyOwned(t, pc, c, 3)
	victim := pc.node(owners[part])
	vi, _ := strconv.Atoi(victim.id[len("node-"):])
	for i := range 50 {
		publish(t, c, "orders", client.Message{Partition: u32(part), Payload: []byte(fmt.Sprint("before-", i))})
	}

	cut := time.Now()
	proxies[vi-1].Set(faultproxy.Faults{Blackhole: true})
	var stopped, taken time.Duration
	var why string
	testkit.Eventually(t, 90*time.Second, "the partition taken over by another broker", func() bool {
		if stopped == 0 {
			if code, body := httpGet(t, victim.Admin, "/readyz", nil); code != 200 {
				stopped, why = time.Since(cut), body
			}
		}
		if taken == 0 {
			if o := pc.ownerOf(pc.nodes[0], "orders", part); o != victim.id {
				taken = time.Since(cut)
			}
		}
		return taken != 0
	})
	t.Logf("cut off from Consul: %s stopped serving after %v; %s taken over after %v",
		victim.id, stopped.Round(time.Millisecond), owners[part], taken.Round(time.Millisecond))
	if stopped == 0 || stopped > taken {
		t.Fatalf("%s was still ready (stopped %v) when its partition was taken over (%v)", victim.id, stopped, taken)
	}
	if !strings.Contains(why, "coordination unreachable: consul agent") {
		t.Fatalf("/readyz of the cut-off broker says %q; want the Consul agent named as the cause", why)
	}
	for i := range 50 {
		publish(t, c, "orders", client.Message{Partition: u32(part), Payload: []byte(fmt.Sprint("after-", i))})
	}
	proxies[vi-1].Set(faultproxy.Faults{})
	healed := time.Now()
	testkit.Eventually(t, 2*waitTimeout, victim.id+" ready again once Consul is back", func() bool {
		code, _ := httpGet(t, victim.Admin, "/readyz", nil)
		return code == 200
	})
	t.Logf("%s ready again %v after the heal", victim.id, time.Since(healed).Round(time.Millisecond))
	sub := subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 64})
	seen := map[string]bool{}
	testkit.Eventually(t, waitTimeout, "all 100 messages delivered", func() bool {
		d, err := sub.Next(ctxT(t, time.Second))
		if err == nil {
			seen[string(d.Payload)] = true
			_ = d.Ack(ctxT(t, time.Second))
		}
		return len(seen) == 100
	})
}

// The Consul backend as the external plugin binary fibril-coord-consul:
// a cluster declares, places, publishes and consumes through it.
func TestConsulExternalPlugin(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	catalog, _ := pluginCatalog(t, "github.com/fibrilgo/fibril/coordination/consul/cmd/fibril-coord-consul", "coordination", "consul-ext")
	rc := startClusterOn(t, consulBackend(sameAgent(agent)), 3, nil, "--coordination.backend=consul-ext", "--plugins.catalog="+catalog)
	for _, nd := range rc.nodes {
		if pluginPID(t, nd.broker) == 0 {
			t.Fatalf("%s runs no fibril-coord-consul plugin process", nd.id)
		}
	}
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	owners := rc.placed(rc.nodes[0], "orders", 3)
	t.Logf("placement through the plugin: %v", owners)
	for p := range uint32(3) {
		publish(t, c, "orders", client.Message{Partition: u32(p), Payload: []byte(fmt.Sprint("m", p))})
	}
	sub := subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 8})
	seen := map[string]bool{}
	testkit.Eventually(t, waitTimeout, "3 messages delivered", func() bool {
		d, err := sub.Next(ctxT(t, time.Second))
		if err == nil {
			seen[string(d.Payload)] = true
			_ = d.Ack(ctxT(t, time.Second))
		}
		return len(seen) == 3
	})
}

// consulEntry is one instance of GET /v1/health/service/<name>.
type consulEntry struct {
	Service struct {
		ID      string
		Address string
		Port    int
		Tags    []string
		Meta    map[string]string
	}
	Checks []struct {
		CheckID string
		Status  string
	}
}

// passing reports whether every check of the entry passes (the node's
// serf check and the broker's /readyz check).
func (e consulEntry) passing() bool {
	for _, c := range e.Checks {
		if c.Status != "passing" {
			return false
		}
	}
	return len(e.Checks) > 0
}

func consulHealth(t *testing.T, a *consultest.Agent, query string) []consulEntry {
	t.Helper()
	var out []consulEntry
	if err := a.Get("/v1/health/service/fibril"+query, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func nodesOf(entries []consulEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Service.Meta["node_id"])
	}
	slices.Sort(out)
	return out
}

// Brokers of a raft cluster register in Consul's catalog: only the public
// one under the public tag (with its client address), the private ones
// under private; a draining broker leaves the passing set, a killed one
// goes critical, an orderly shutdown deregisters.
func TestConsulServiceRegistration(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	pc := startPrivateCluster(t, "tcp", "--consul.register=true", "--coordination.consul.addresses="+agent.Addr, "--consul.check_interval_ms=1000")
	testkit.Eventually(t, waitTimeout, "3 brokers registered and passing", func() bool {
		return len(consulHealth(t, agent, "?passing")) == 3
	})
	public := consulHealth(t, agent, "?tag=public&passing")
	if got := nodesOf(public); !slices.Equal(got, []string{"node-1"}) {
		t.Fatalf("public and passing: %v, want only node-1", got)
	}
	if got := public[0].Service.Address + ":" + strconv.Itoa(public[0].Service.Port); got != pc.nodes[0].Addr {
		t.Fatalf("node-1 registered at %s, its client address is %s", got, pc.nodes[0].Addr)
	}
	for _, e := range consulHealth(t, agent, "?tag=private") {
		if slices.Contains(e.Service.Tags, "public") {
			t.Fatalf("private broker %s carries the public tag: %v", e.Service.ID, e.Service.Tags)
		}
	}
	if got := nodesOf(consulHealth(t, agent, "?tag=private")); !slices.Equal(got, []string{"node-2", "node-3"}) {
		t.Fatalf("private: %v, want node-2 and node-3", got)
	}
	var catalog []struct {
		ServiceID   string
		ServiceTags []string
		ServiceMeta map[string]string
	}
	if err := agent.Get("/v1/catalog/service/fibril", &catalog); err != nil {
		t.Fatal(err)
	}
	if len(catalog) != 3 {
		t.Fatalf("catalog: %d instances of fibril, want 3: %+v", len(catalog), catalog)
	}
	for _, e := range catalog {
		want := "private"
		if e.ServiceMeta["node_id"] == "node-1" {
			want = "public"
		}
		if !slices.Contains(e.ServiceTags, want) || !slices.Contains(e.ServiceTags, "node="+e.ServiceMeta["node_id"]) ||
			e.ServiceID != "fibril-"+e.ServiceMeta["node_id"] {
			t.Fatalf("catalog entry %+v: want id fibril-<node>, tags %s and node=<node>", e, want)
		}
	}

	if code, body := httpPost(t, pc.nodes[1].Admin, "/admin/api/drain", `{"grace_ms": 0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	testkit.Eventually(t, waitTimeout, "the draining node-2 leaves the passing set", func() bool {
		return slices.Equal(nodesOf(consulHealth(t, agent, "?passing")), []string{"node-1", "node-3"})
	})
	pc.nodes[2].kill()
	testkit.Eventually(t, waitTimeout, "the killed node-3 goes critical", func() bool {
		for _, e := range consulHealth(t, agent, "?tag=private") {
			if e.Service.Meta["node_id"] == "node-3" {
				return !e.passing()
			}
		}
		return false
	})
	pc.nodes[0].stop()
	testkit.Eventually(t, waitTimeout, "node-1 deregistered on shutdown", func() bool {
		return !slices.Contains(nodesOf(consulHealth(t, agent, "")), "node-1")
	})
}

// `fibril dev --nodes 3 --coordination consul --consul-addr …` against a
// running agent: the same lines, placement and publishing as on raft.
func TestFibrilDevConsul(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	testFibrilDev(t, 1, "--coordination", "consul", "--consul-addr", agent.Addr)
	var keys []string
	if err := agent.Get("/v1/kv/fibril-dev/?keys", &keys); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "/kv/assign/dev/") }) {
		t.Fatalf("the dev cluster's placement is not in Consul: keys %v", keys)
	}
}
