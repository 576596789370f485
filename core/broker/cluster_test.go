package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// Three brokers, one client that knows only the first: it declares there,
// publishes to every partition and consumes everything, following the
// topology and REDIRECTs to the owners (S-114, S-116).
func TestClusterRoutesClientsToOwners(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	// Wait until every partition has an owner in the topology.
	var topo *client.Topology
	var err error
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
	consumeDistinct(ctx, t, sub, total)
	if st := c.Stats(); st.PrefetchViolations != 0 {
		t.Fatalf("prefetch violations: %d", st.PrefetchViolations)
	}
	// S-138: each broker loaded only the partitions it owns.
	for _, b := range bs {
		snap := b.cluster.cl.Snapshot()
		for _, d := range b.queues.Depths() {
			p, _ := snap.Partition(core.PartitionRef{Topic: d.Key.Topic, Partition: d.Partition})
			if p.Node != b.nodeID {
				t.Errorf("%s loaded %s#%d, owned by %s", b.nodeID, d.Key, d.Partition, p.Node)
			}
		}
	}
}

// Nothing is auto-created in coordinated mode; an undeclared
// queue answers 404 (docs/protocol.md#answers).
func TestClusterDoesNotAutoCreate(t *testing.T) {
	bs := startMemCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	_, err := c.Publisher("nope", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Payload: []byte("x")})
	var be *client.Error
	if !errors.As(err, &be) || be.Code != 404 {
		t.Fatalf("publish to an undeclared queue: %v, want 404", err)
	}
}

// The user store is replicated (S-144); a user added at one
// broker authenticates at another.
func TestClusterUsersAreShared(t *testing.T) {
	bs := startMemCluster(t, 2)
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/users", `{"username":"alice","password":"correct horse battery"}`); code != 201 {
		t.Fatalf("add user: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for range 100 {
		var c *client.Client
		c, err = client.Dial(ctx, client.Options{Addrs: []string{bs[1].BrokerAddr().String()},
			Username: "alice", Password: "correct horse battery", Dial: loopbackOnly(t)})
		if err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("alice cannot log in at the other broker: %v", err)
	}
	_, body := adminDo(t, bs[1], "GET", "/admin/api/users", "")
	if !strings.Contains(body, "alice") {
		t.Fatalf("other broker lists %s", body)
	}
}

// S-162/S-173: one runtime settings document for the cluster, changed at
// one broker and applied at all without a restart; a stale version is 409.
func TestClusterRuntimeSettingsAreShared(t *testing.T) {
	bs := startMemCluster(t, 2)
	if code, body := editRuntimeSettings(t, bs[0], func(doc map[string]any) {
		doc["connection"].(map[string]any)["reconnect_grace_ms"] = 1234
	}); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "the other broker applies the change", func() bool {
		return bs[1].settings.Current().Connection.ReconnectGraceMS == 1234
	})
	version, doc := runtimeSettings(t, bs[1])
	stale, _ := json.Marshal(map[string]any{"expected_version": version - 1, "settings": doc})
	if code, body := adminDo(t, bs[1], "PUT", "/admin/api/runtime-settings", string(stale)); code != 409 || !strings.Contains(body, "1234") {
		t.Fatalf("stale put: %d %s, want 409 with the current settings", code, body)
	}
	if code, _ := editRuntimeSettings(t, bs[1], func(doc map[string]any) {
		doc["partitioning"].(map[string]any)["default_partition_count"] = 0
	}); code != 400 {
		t.Fatalf("invalid put: %d, want 400", code)
	}
}

// runtimeSettings reads the runtime settings document through b's admin
// API: its version and contents.
func runtimeSettings(t testing.TB, b *Broker) (uint64, map[string]any) {
	t.Helper()
	code, body := adminDo(t, b, "GET", "/admin/api/runtime-settings", "")
	if code != 200 {
		t.Fatalf("get runtime settings: %d %s", code, body)
	}
	var view struct {
		Version  uint64          `json:"version"`
		Settings json.RawMessage `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(view.Settings, &doc); err != nil {
		t.Fatal(err)
	}
	return view.Version, doc
}

// editRuntimeSettings reads the document, lets edit change it and puts it
// back at the version read; it returns the PUT's answer.
func editRuntimeSettings(t testing.TB, b *Broker, edit func(doc map[string]any)) (int, string) {
	t.Helper()
	version, doc := runtimeSettings(t, b)
	edit(doc)
	nb, _ := json.Marshal(map[string]any{"expected_version": version, "settings": doc})
	return adminDo(t, b, "PUT", "/admin/api/runtime-settings", string(nb))
}

// S-128: a drained node gets no new partitions and reports not ready; the
// admin topology shows the flag.
func TestClusterDrain(t *testing.T) {
	bs := startMemCluster(t, 2)
	code, body := adminDo(t, bs[1], "POST", "/admin/api/drain", `{"grace_ms": 1000}`)
	if code != 200 || !strings.Contains(body, "connections_notified") {
		t.Fatalf("drain: %d %s", code, body)
	}
	if code, _ := adminDo(t, bs[1], "GET", "/readyz", ""); code != 503 {
		t.Fatalf("readyz of a draining node: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	testkit.Eventually(t, 5*time.Second, "the draining flag is visible", func() bool {
		_, body := adminDo(t, bs[0], "GET", "/admin/api/topology", "")
		return strings.Contains(body, `"draining":true`)
	})
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "after", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the new queue is placed", func() bool {
		_, body := adminDo(t, bs[0], "GET", "/admin/api/topology", "")
		var v struct {
			Partitions []struct {
				Owner string `json:"owner"`
			} `json:"partitions"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		placed := 0
		for _, p := range v.Partitions {
			if p.Owner == "n1" {
				t.Fatalf("partition placed on the draining node: %s", body)
			}
			if p.Owner != "" {
				placed++
			}
		}
		return placed == 4
	})
}

// docs/protocol.md#topology, S-118, with a synthetic version bump (repartition is a later
// capability): a PUBLISH carrying an older partitioning version gets a
// REDIRECT with the newer version — even to this broker's own address —
// and nothing is stored; the current version passes. A connection that
// has the topology gets a TOPOLOGY_UPDATE for the change (S-119).
func TestClusterVersionFenceAndPush(t *testing.T) {
	bs := startMemCluster(t, 1)
	b := bs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pushes := make(chan client.Frame, 8)
	conn, err := client.DialConn(ctx, b.BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril",
		Dial: loopbackOnly(t), OnPush: func(_ *client.Conn, f client.Frame) {
			if f.Op == wire.OpTopologyUpdate {
				pushes <- f
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if f, err := conn.Do(ctx, wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "fenced", PartitionCount: wire.Some(uint32(1))}); err != nil || f.Op != wire.OpDeclareQueueOK {
		t.Fatalf("declare: %v %v", f.Op, err)
	}
	testkit.Eventually(t, 5*time.Second, "the queue is placed", func() bool {
		q := b.cluster.cl.Snapshot().Queue("fenced", "")
		return q != nil && q.Parts[0].Placed()
	})
	// Bump the partitioning version as a repartition would.
	m := memMember(t)
	kv, err := m.Get(ctx, "queues/fenced/@default")
	if err != nil || kv.Version == 0 {
		t.Fatalf("catalog entry: %+v %v", kv, err)
	}
	info, err := queue.DecodeQueueInfo(kv.Value)
	if err != nil {
		t.Fatal(err)
	}
	info.PartitioningVersion = 1
	nb, _ := queue.EncodeQueueInfo(info)
	if _, err := m.CompareAndSet(ctx, kv.Key, nb, kv.Version); err != nil {
		t.Fatal(err)
	}
	// A push of an earlier change (the placement) may still come first:
	// wait for the one that carries the new version.
	var f client.Frame
	var up wire.TopologyUpdate
	for waitUntil := time.After(5 * time.Second); ; {
		select {
		case f = <-pushes:
		case <-waitUntil:
			t.Fatal("no TOPOLOGY_UPDATE with the new partitioning version after a routing change")
		}
		if err := up.Decode(f.Body); err != nil {
			t.Fatal(err)
		}
		if len(up.Queues) != 1 {
			t.Fatalf("pushed topology %+v", up.Topology)
		}
		if up.Queues[0].PartitioningVersion == 1 {
			break
		}
	}
	{
		// The client acknowledges; the node publishes its adoption level
		// with the heartbeat and the cluster floor follows (S-120).
		if err := conn.Send(wire.OpTopologyUpdateAck, f.RequestID, &wire.TopologyUpdateAck{Generation: up.Generation}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`"adoption_floor":%d`, up.Generation)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, body := adminDo(t, b, "GET", "/admin/api/topology", ""); strings.Contains(body, want) {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("admin topology never showed %s: %s", want, body)
			}
		}
	}
	f, err = conn.Do(ctx, wire.OpPublish, &wire.Publish{Topic: "fenced", Partition: 0, RequireConfirm: true,
		PartitioningVersion: 0, Payload: []byte("stale")})
	if err != nil {
		t.Fatal(err)
	}
	if f.Op != wire.OpRedirect {
		t.Fatalf("stale publish answered %v, want REDIRECT", f.Op)
	}
	var r wire.Redirect
	if err := r.Decode(f.Body); err != nil {
		t.Fatal(err)
	}
	if r.PartitioningVersion != 1 || len(r.Owners) != 1 || r.Owners[0].String() != b.BrokerAddr().String() {
		t.Fatalf("redirect %+v: want version 1 to this broker's own address", r)
	}
	f, err = conn.Do(ctx, wire.OpPublish, &wire.Publish{Topic: "fenced", Partition: 0, RequireConfirm: true,
		PartitioningVersion: 1, Payload: []byte("current")})
	if err != nil || f.Op != wire.OpPublishOK {
		t.Fatalf("current-version publish: %v %v", f.Op, err)
	}
	var ok wire.PublishOK
	if err := ok.Decode(f.Body); err != nil || ok.Offset != 0 {
		t.Fatalf("offset %d (%v): the fenced publish must not have been stored", ok.Offset, err)
	}
}

// Dead-lettering in a cluster: the dead letter is appended where the
// message died, so it goes to a partition of the target that this broker
// owns; consumers of the target, routed to its owners, get every one.
func TestClusterDeadLetters(t *testing.T) {
	bs := startMemCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "dead", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	zero := uint32(0)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "work", Partitions: 2, MaxRetries: &zero,
		DLQ: &client.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"}}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 5*time.Second, "dead", "work")
	if _, err := c.Topology(ctx, ""); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher("work", client.PublisherOptions{})
	for p := range uint32(2) {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint("msg-", p))}); err != nil {
			t.Fatal(err)
		}
	}
	work, err := c.Subscribe(ctx, "work", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d, err := work.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Fail(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := c.Subscribe(ctx, "dead", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 2 {
		d, err := dead.Next(ctx)
		if err != nil {
			t.Fatalf("after %d dead letters: %v", len(got), err)
		}
		if d.Headers["stroma.dlq.source_topic"] != "work" {
			t.Fatalf("dead letter without its source: %+v", d.Headers)
		}
		got[string(d.Payload)] = true
		_ = d.Ack(ctx)
	}
}

// Reconcile (S-108, S-109) restores a subscription only on the broker that
// serves its partition: on another broker the entry is answered "missing"
// (the client re-subscribes through routing) instead of subscribing to a
// local copy nobody writes to.
func TestClusterReconcileDoesNotRestoreElsewhere(t *testing.T) {
	bs := startMemCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "rq", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	var mine, theirs *uint32
	deadline := time.Now().Add(5 * time.Second)
	for mine == nil || theirs == nil {
		if time.Now().After(deadline) {
			t.Fatal("not placed on both nodes")
		}
		time.Sleep(10 * time.Millisecond)
		q := bs[0].cluster.cl.Snapshot().Queue("rq", "")
		if q == nil {
			continue
		}
		mine, theirs = nil, nil
		for _, p := range q.Parts {
			n := p.Ref.Partition
			switch p.Node {
			case "n0":
				mine = &n
			case "n1":
				theirs = &n
			}
		}
	}
	sub := func(p uint32) wire.ReconcileSub {
		return wire.ReconcileSub{SubID: 1 + uint64(p), Topic: "rq", Partition: p, Prefetch: 4}
	}
	conn, err := client.DialConn(ctx, bs[0].BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril",
		Dial: loopbackOnly(t), Reconcile: &wire.ReconcileClient{Policy: wire.ReconcileRestore,
			Subscriptions: []wire.ReconcileSub{sub(*mine), sub(*theirs)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res := conn.Handshake().Reconcile
	if res == nil || len(res.Entries) != 2 {
		t.Fatalf("reconcile result %+v", res)
	}
	for _, e := range res.Entries {
		p := e.Client.Value.Partition
		switch {
		case p == *mine && e.Code != wire.ReasonServerRestored:
			t.Errorf("own partition %d: %v, want restored", p, e.Code)
		case p == *theirs && (e.Code != wire.ReasonServerMissing || e.Server.Present):
			t.Errorf("partition %d owned by the other broker: %v (server %v), want missing", p, e.Code, e.Server.Present)
		}
	}
}

// The admin topology shows each partition's followers and their liveness,
// the follower target and the under-replicated count; the target comes
// from the cluster's runtime settings and a change applies without a
// restart (docs/cluster.md#replication).
func TestClusterTopologyShowsFollowers(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "copies", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Replication struct {
			TargetFollowers int `json:"target_followers"`
			UnderReplicated int `json:"under_replicated"`
		} `json:"replication"`
		Partitions []struct {
			Topic     string `json:"topic"`
			Owner     string `json:"owner"`
			Followers []struct {
				Node string `json:"node"`
				Live bool   `json:"live"`
			} `json:"followers"`
		} `json:"partitions"`
	}
	read := func() view {
		_, body := adminDo(t, bs[1], "GET", "/admin/api/topology", "")
		var v view
		_ = json.Unmarshal([]byte(body), &v)
		return v
	}
	followers := func(want int) func() bool {
		return func() bool {
			v := read()
			n := 0
			for _, p := range v.Partitions {
				if p.Topic != "copies" {
					continue
				}
				n++
				if len(p.Followers) != want {
					return false
				}
				for _, f := range p.Followers {
					if !f.Live || f.Node == p.Owner {
						return false
					}
				}
			}
			return n == 3 && v.Replication.TargetFollowers == want && v.Replication.UnderReplicated == 0
		}
	}
	testkit.Eventually(t, 5*time.Second, "two live followers per partition", followers(2))

	_, body := adminDo(t, bs[2], "GET", "/admin/api/runtime-settings", "")
	var cur struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Settings["replication"].(map[string]any)["target_followers"] = 1
	nb, _ := json.Marshal(map[string]any{"expected_version": cur.Version, "settings": cur.Settings})
	if code, body := adminDo(t, bs[2], "PUT", "/admin/api/runtime-settings", string(nb)); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "one follower per partition", followers(1))
}
