package broker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
)

// keyOrder records, per key, the sequence numbers in the order the
// consumers received them, and fails on a key whose messages came out of
// order or twice.
type keyOrder struct {
	mu   sync.Mutex
	last map[string]int
	got  int
	// paused holds the consumers (Lock) between deliveries; unacked
	// deliveries stay with them, the rest waits on the broker.
	paused sync.RWMutex
}

func (k *keyOrder) saw(t *testing.T, payload string) {
	var key string
	var seq int
	if _, err := fmt.Sscanf(payload, "%s %d", &key, &seq); err != nil {
		t.Errorf("payload %q: %v", payload, err)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if prev, ok := k.last[key]; ok && seq <= prev {
		t.Errorf("key %s: message %d after %d", key, seq, prev)
	}
	k.last[key] = seq
	k.got++
}

func (k *keyOrder) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.got
}

// consume acknowledges every delivery of sub and records it in order.
func (k *keyOrder) consume(ctx context.Context, t *testing.T, sub *client.Subscription, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			d, err := sub.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					t.Logf("consumer ends: %v", err)
				}
				return
			}
			k.paused.RLock()
			k.saw(t, string(d.Payload))
			if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("ack: %v", err)
			}
			k.paused.RUnlock()
		}
	}()
}

// publishKeyed publishes n confirmed messages over 10 keys, numbering each
// key's messages on from next[key].
func publishKeyed(ctx context.Context, t *testing.T, p *client.Publisher, next map[string]int, n int) {
	t.Helper()
	for i := range n {
		key := fmt.Sprintf("k%d", i%10)
		next[key]++
		if _, err := p.PublishConfirmed(ctx, client.Message{Key: []byte(key), Payload: fmt.Appendf(nil, "%s %d", key, next[key])}); err != nil {
			t.Fatalf("publish %s %d: %v", key, next[key], err)
		}
	}
}

func repartitionDone(b *Broker, count uint32) func() bool {
	return func() bool {
		q := b.cluster.cl.Snapshot().Queue("jobs", "")
		return q != nil && q.Repartition == nil && q.Info.PartitionCount == count && len(q.Parts) == int(count)
	}
}

// A grow 2 → 4 and a shrink 4 → 2 with a backlog on every partition:
// producers are fenced and re-route, the new partitions (and, in the
// shrink, the survivors' new messages) wait until their sources drained,
// every key's messages arrive in order, nothing is lost, and the
// transition finalizes.
func TestRepartitionKeepsKeyOrder(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "jobs")
	// A client connection that acknowledged an older topology holds the
	// adoption floor; finalize then waits this long (S-125).
	if code, body := editRuntimeSettings(t, bs[0], func(doc map[string]any) {
		doc["routing"].(map[string]any)["repartition_adoption_timeout_ms"] = 500
	}); code != http.StatusOK {
		t.Fatalf("setting routing.repartition_adoption_timeout_ms: %d %s", code, body)
	}
	pub := c.Publisher("jobs", client.PublisherOptions{})
	next := map[string]int{}
	publishKeyed(ctx, t, pub, next, 100) // the backlog under the old layout

	code, body := adminDo(t, bs[1], "POST", "/admin/api/repartition", `{"topic":"jobs","partition_count":4}`)
	if code != http.StatusOK || !strings.Contains(body, `"started"`) {
		t.Fatalf("grow: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, "cut over", func() bool {
		return bs[0].cluster.cl.Snapshot().Queue("jobs", "").Info.PartitioningVersion == 1
	})
	publishKeyed(ctx, t, pub, next, 100) // fenced, re-routed to 4 partitions

	order := &keyOrder{last: map[string]int{}}
	var wg sync.WaitGroup
	c1 := dialClient(ctx, t, bs[0])
	sub, err := c1.Subscribe(ctx, "jobs", client.SubscribeOptions{Prefetch: 8}) // every partition, following the count (S-126)
	if err != nil {
		t.Fatal(err)
	}
	order.consume(ctx, t, sub, &wg)
	testkit.Eventually(t, 20*time.Second, "every message delivered", func() bool { return order.count() == 200 })
	testkit.Eventually(t, 20*time.Second, "the grow finalized", repartitionDone(bs[0], 4))

	// The same consumer stays through the shrink (a consumer that goes away
	// with deliveries in hand has them redelivered later, out of order by
	// nature); paused, so that every partition has a backlog at the cutover.
	order.paused.Lock()
	publishKeyed(ctx, t, pub, next, 100)
	code, body = adminDo(t, bs[2], "POST", "/admin/api/repartition", `{"topic":"jobs","partition_count":2}`)
	if code != http.StatusOK || !strings.Contains(body, `"started"`) {
		t.Fatalf("shrink: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, "cut over", func() bool {
		return bs[0].cluster.cl.Snapshot().Queue("jobs", "").Info.PartitioningVersion == 2
	})
	publishKeyed(ctx, t, pub, next, 100)
	order.paused.Unlock()
	for deadline := time.Now().Add(20 * time.Second); order.count() < 400; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			dumpRepartition(t, bs)
			t.Fatalf("%d of 400 delivered", order.count())
		}
	}
	for deadline, done := time.Now().Add(20*time.Second), repartitionDone(bs[0], 2); !done(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			dumpRepartition(t, bs)
			t.Fatal("the shrink did not finalize")
		}
	}
	_ = c1.Close()
	wg.Wait()
}

// The requests the admin API refuses, and standalone's answer.
func TestRepartitionRequestsOverAdmin(t *testing.T) {
	b := startBroker(t)
	if code, body := adminDo(t, b, "POST", "/admin/api/repartition", `{"topic":"jobs","partition_count":2}`); code != http.StatusNotFound ||
		!strings.Contains(body, "only in a cluster") {
		t.Fatalf("standalone: %d %s", code, body)
	}
	bs := startMemCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]int{
		`{"topic":"jobs"}`:                               http.StatusBadRequest,
		`{"topic":"jobs","partition_count":0}`:           http.StatusBadRequest,
		`{"topic":"jobs","partition_count":3}`:           http.StatusBadRequest,
		`{"topic":"nope","partition_count":2}`:           http.StatusNotFound,
		`{"topic":"jobs","partition_count":2}`:           http.StatusOK,
		`{"topic":"jobs","partition_count":2,"extra":1}`: http.StatusBadRequest,
	} {
		if code, got := adminDo(t, bs[0], "POST", "/admin/api/repartition", body); code != want {
			t.Errorf("%s: %d %s, want %d", body, code, got, want)
		}
	}
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/repartition", `{"topic":"jobs","partition_count":4}`); code != http.StatusOK {
		t.Fatalf("grow: %d %s", code, body)
	}
	if code, body := adminDo(t, bs[0], "GET", "/admin/api/topology", ""); code != http.StatusOK ||
		!strings.Contains(body, `"repartitions":[{"topic":"jobs","from":2,"to":4,`) {
		t.Fatalf("the transition in the topology view: %d %s", code, body)
	}
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/repartition", `{"topic":"jobs","partition_count":8}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "still being repartitioned") {
		t.Fatalf("a second transition: %d %s", code, body)
	}
}

func dumpRepartition(t *testing.T, bs []*Broker) {
	for _, b := range bs {
		q := b.cluster.cl.Snapshot().Queue("jobs", "")
		t.Logf("%s: count %d version %d marker %+v", b.nodeID, q.Info.PartitionCount, q.Info.PartitioningVersion, q.Repartition)
		for _, p := range q.Parts {
			if p.Node != b.nodeID {
				continue
			}
			part, err := b.queues.Partition(q.Info.Key, p.Ref.Partition)
			if err != nil {
				t.Logf("  %d: %v", p.Ref.Partition, err)
				continue
			}
			from, held := part.Hold()
			t.Logf("  %d: end %d hold %d %v settled<end %v", p.Ref.Partition, part.End(), from, held, part.SettledBelow(part.End()))
		}
	}
}

// A node whose last acknowledging client connection went away publishes
// no adoption level any more (S-120): a stale one held the cluster's
// floor at an old generation, so that every finalize waited out
// routing.repartition_adoption_timeout_ms.
func TestAdoptionLevelGoesWithTheLastClient(t *testing.T) {
	bs := startMemCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	floor := func() (uint64, bool) { return bs[1].cluster.cl.Snapshot().AdoptionFloor() }
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "jobs")
	testkit.Eventually(t, 10*time.Second, "node 1 publishes its client's adoption level", func() bool {
		_, ok := floor()
		return ok
	})
	c.Close()
	testkit.Eventually(t, 10*time.Second, "node 1's adoption level withdrawn", func() bool {
		_, ok := floor()
		return !ok
	})
}

// A shrink's survivor whose owner lags behind the cluster: producers that
// learned the new layout elsewhere publish by it to the survivor before
// its owner applied the transition. Those messages are stored and
// confirmed but held (not delivered ahead of the merge source's older
// messages of their keys); once the owner catches up, every key's
// messages arrive in order and the shrink finalizes.
func TestRepartitionLaggingSurvivorOwner(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := bs[0]
	c := dialClient(ctx, t, admin)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, admin, 10*time.Second, "jobs")
	if code, body := editRuntimeSettings(t, admin, func(doc map[string]any) {
		doc["routing"].(map[string]any)["repartition_adoption_timeout_ms"] = 500
	}); code != http.StatusOK {
		t.Fatalf("setting routing.repartition_adoption_timeout_ms: %d %s", code, body)
	}
	q := admin.cluster.cl.Snapshot().Queue("jobs", "")
	var lagger *Broker
	for _, b := range bs {
		if b.nodeID == q.Parts[0].Node {
			lagger = b
		}
	}
	if lagger == nil {
		t.Fatalf("no broker owns partition 0 (%s)", q.Parts[0].Node)
	}

	order := &keyOrder{last: map[string]int{}}
	var wg sync.WaitGroup
	c1 := dialClient(ctx, t, admin)
	sub, err := c1.Subscribe(ctx, "jobs", client.SubscribeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	order.consume(ctx, t, sub, &wg)
	order.paused.Lock() // a backlog on both partitions at the cutover
	pub := c.Publisher("jobs", client.PublisherOptions{})
	next := map[string]int{}
	publishKeyed(ctx, t, pub, next, 100)

	lagger.cluster.lagging.Store(true)
	code, body := adminDo(t, admin, "POST", "/admin/api/repartition", `{"topic":"jobs","partition_count":1}`)
	if code != http.StatusOK || !strings.Contains(body, `"started"`) {
		t.Fatalf("shrink: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, "cut over", func() bool {
		return admin.cluster.cl.Snapshot().Queue("jobs", "").Info.PartitioningVersion == 1
	})
	survivor, err := lagger.queues.Partition(q.Info.Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := survivor.End()
	if _, err := c.Topology(ctx, "jobs"); err != nil { // the new layout, from a broker that has it
		t.Fatal(err)
	}
	publishKeyed(ctx, t, pub, next, 100) // every key to partition 0 now, on the lagging owner
	if survivor.End()-before < 50 {
		t.Fatalf("only %d messages reached the survivor by the new layout", survivor.End()-before)
	}
	msgs, _, err := survivor.Browse(queue.BrowseOptions{From: before, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.State != queue.StateHeld {
			t.Fatalf("offset %d on the lagging survivor, routed by the new layout: %s, want %s", m.Offset, m.State, queue.StateHeld)
		}
	}

	lagger.cluster.lagging.Store(false)
	order.paused.Unlock()
	for deadline := time.Now().Add(20 * time.Second); order.count() < 200; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			dumpRepartition(t, bs)
			t.Fatalf("%d of 200 delivered", order.count())
		}
	}
	for deadline, done := time.Now().Add(20*time.Second), repartitionDone(admin, 1); !done(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			dumpRepartition(t, bs)
			t.Fatal("the shrink did not finalize")
		}
	}
	_ = c1.Close()
	wg.Wait()
}
