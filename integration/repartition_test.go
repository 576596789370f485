package integration

// Repartition (docs/repartition.md) with real broker
// processes: one public and two private brokers on embedded raft, a
// queue whose partition a private broker owns, producers and consumers
// that reach the public broker only. Keyed confirmed messages carry their
// key and the key's sequence number; the consumer acknowledges every
// delivery and checks that each key's messages first arrive in order, and
// at the end that every confirmed message was delivered.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

const repartKeys = 10

// keyLedger is what the producers and the consumers of one queue saw.
type keyLedger struct {
	t     *testing.T
	topic string

	mu        sync.Mutex
	confirmed map[string]bool // payload "k3 17"
	delivered map[string]int  // payload → deliveries
	lastFirst map[string]int  // key → highest sequence delivered for the first time
	perPart   map[uint32]int  // first deliveries per partition
	byPhase   map[string]map[uint32]int
	closed    map[uint32]error  // partitions whose subscription ended for good
	phase     string            // what the test is doing, for violations
	late      map[string]string // payload → phase of its first delivery
	where     map[string]string // payload → partition and offset of its first delivery
	disorder  []string          // "phase: key k: 17 after 18"
	healed    bool              // violations from here on fail the test
	failed    int               // publishes answered with an error (retried)
	dups      int

	slow atomic.Int64 // the consumers' pause per delivery (ns): a backlog builds up

	stop     chan struct{}
	haltOnce sync.Once
	wg       sync.WaitGroup // producers
	consumed sync.WaitGroup
}

func newKeyLedger(t *testing.T, topic string) *keyLedger {
	return &keyLedger{t: t, topic: topic, confirmed: map[string]bool{}, delivered: map[string]int{},
		lastFirst: map[string]int{}, perPart: map[uint32]int{}, byPhase: map[string]map[uint32]int{}, closed: map[uint32]error{},
		late: map[string]string{}, where: map[string]string{}, phase: "start", stop: make(chan struct{})}
}

func (l *keyLedger) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
	l.t.Logf("phase: %s (confirmed %d)", p, l.confirmedCount())
}

// heal marks the point from which a key delivered out of order fails the
// test (before it, in the kill scenarios, it is reported).
func (l *keyLedger) heal() {
	l.mu.Lock()
	l.healed = true
	l.mu.Unlock()
}

func (l *keyLedger) confirmedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.confirmed)
}

func (l *keyLedger) firstDeliveries(p uint32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perPart[p]
}

// firstDeliveriesIn counts the first deliveries of partition p during phase.
func (l *keyLedger) firstDeliveriesIn(phase string, p uint32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byPhase[phase][p]
}

// produce starts one producer per key on c: confirmed publishes, each
// key's next only after the previous one was confirmed (a failed one is
// retried, with the same sequence number, while retryable), paced by
// pause, at most perKey per key and until limit.
func (l *keyLedger) produce(c *client.Client, pause time.Duration, perKey int, limit time.Duration) {
	pub := c.Publisher(l.topic, client.PublisherOptions{})
	l.t.Cleanup(l.halt) // before the clients close (cleanups run last first)
	deadline := time.Now().Add(limit)
	for k := range repartKeys {
		key := fmt.Sprintf("k%d", k)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for seq, attempts := 1, 0; seq <= perKey && attempts < 100_000 && time.Now().Before(deadline); attempts++ {
				select {
				case <-l.stop:
					return
				case <-time.After(pause):
				}
				payload := fmt.Sprintf("%s %d", key, seq)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := pub.PublishConfirmed(ctx, client.Message{Key: []byte(key), Payload: []byte(payload)})
				cancel()
				l.mu.Lock()
				if err == nil {
					l.confirmed[payload] = true
					seq++
				} else {
					l.failed++
				}
				l.mu.Unlock()
				if err != nil && !client.Retryable(err) {
					l.t.Errorf("publish %q: %v, want a retryable error", payload, err)
					return
				}
			}
		}()
	}
}

// consume acknowledges every delivery of sub until it ends (every
// partition closed for good, or Close).
func (l *keyLedger) consume(sub *client.Subscription) {
	l.consumed.Add(1)
	go func() {
		defer l.consumed.Done()
		for {
			d, err := sub.Next(context.Background())
			var sc *client.SubscriptionClosedError
			switch {
			case errors.As(err, &sc):
				l.mu.Lock()
				if _, ok := l.closed[sc.Partition]; !ok {
					l.closed[sc.Partition] = err
				}
				l.mu.Unlock()
				if sub.Err() != nil {
					return // every partition ended
				}
				continue
			case err != nil:
				return
			}
			l.saw(d)
			if p := time.Duration(l.slow.Load()); p > 0 {
				time.Sleep(p)
			}
			_ = d.Ack(context.Background()) // a lost ack redelivers; counted as a duplicate
		}
	}()
}

func (l *keyLedger) saw(d *client.Delivery) {
	payload := string(d.Payload)
	var key string
	var seq int
	if _, err := fmt.Sscanf(payload, "%s %d", &key, &seq); err != nil {
		l.t.Errorf("payload %q: %v", payload, err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered[payload]++
	if l.delivered[payload] > 1 {
		l.dups++
		return
	}
	l.perPart[d.Partition]++
	if l.byPhase[l.phase] == nil {
		l.byPhase[l.phase] = map[uint32]int{}
	}
	l.byPhase[l.phase][d.Partition]++
	l.late[payload] = l.phase
	l.where[payload] = fmt.Sprintf("partition %d, offset %d", d.Partition, d.Offset)
	if prev := l.lastFirst[key]; seq < prev {
		v := fmt.Sprintf("%s: key %s: %d (%s) after %d (%s)", l.phase, key, seq, l.where[payload], prev, l.where[fmt.Sprintf("%s %d", key, prev)])
		l.disorder = append(l.disorder, v)
		if l.healed {
			l.t.Errorf("out of order: %s", v)
		}
		return
	}
	l.lastFirst[key] = seq
}

// missing lists the confirmed payloads never delivered.
func (l *keyLedger) missing() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for p := range l.confirmed {
		if l.delivered[p] == 0 {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// progress waits until n more publishes are confirmed.
func (l *keyLedger) progress(n int, within time.Duration, what string) {
	l.t.Helper()
	base := l.confirmedCount()
	testkit.Eventually(l.t, within, what, func() bool { return l.confirmedCount() >= base+n })
}

// halt stops the producers and waits for them.
func (l *keyLedger) halt() {
	l.haltOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// finish stops the producers and waits (bounded) until every confirmed
// message was delivered.
func (l *keyLedger) finish(within time.Duration) {
	l.t.Helper()
	l.halt()
	testkit.EventuallyReport(l.t, within, func() bool { return len(l.missing()) == 0 }, func() string {
		m := l.missing()
		return fmt.Sprintf("%d of %d confirmed messages never delivered, e.g. %v", len(m), l.confirmedCount(), m[:min(len(m), 20)])
	})
}

func (l *keyLedger) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("confirmed %d, failed publishes %d (retried), delivered %d distinct, duplicates %d, first deliveries per partition %v, out of order %d",
		len(l.confirmed), l.failed, len(l.delivered), l.dups, l.perPart, len(l.disorder))
}

// ---------------------------------------------------------------------------
// The cluster side

// privateQueue declares single-partition queues name-0, name-1, … through
// the public broker until one lands on a private broker (at most 6), and
// returns its topic and owner.
func privateQueue(t *testing.T, pc *privateCluster, c *client.Client, name string) (topic, owner string) {
	t.Helper()
	for i := range 6 {
		topic = fmt.Sprintf("%s-%d", name, i)
		if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: topic, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if o := pc.placed(pc.nodes[0], topic, 1)[0]; o != "node-1" {
			return topic, o
		}
	}
	t.Fatal("no single-partition queue landed on a private broker in 6 tries")
	return "", ""
}

// repartition asks nd's admin API to change topic's partition count and
// requires the transition to start.
func repartition(t *testing.T, nd *clusterNode, topic string, count int) {
	t.Helper()
	code, body := httpPost(t, nd.Admin, "/admin/api/repartition", fmt.Sprintf(`{"topic":%q,"partition_count":%d}`, topic, count))
	if code != 200 || !strings.Contains(body, `"started"`) {
		t.Fatalf("repartition %s to %d via %s: %d %s", topic, count, nd.id, code, body)
	}
}

// awaitCutover waits until c's topology (fetched from the broker) gives
// topic count partitions; returns the partitioning version.
func awaitCutover(t *testing.T, c *client.Client, topic string, count uint32, within time.Duration) uint64 {
	t.Helper()
	var version uint64
	testkit.Eventually(t, within, fmt.Sprintf("%s cut over to %d partitions", topic, count), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		top, err := c.Topology(ctx, topic)
		if err != nil {
			return false
		}
		for _, q := range top.Queues {
			if q.Topic == topic && q.PartitionCount == count {
				version = q.PartitioningVersion
				return true
			}
		}
		return false
	})
	return version
}

// awaitFinalized waits until the transition of topic to count is over:
// the marker is gone (a request for the same count answers "unchanged",
// which it does only with no transition in progress and the count in
// place) and every live node's topology lists exactly count partitions.
func awaitFinalized(t *testing.T, rc *raftCluster, topic string, count int, within time.Duration) {
	t.Helper()
	body := fmt.Sprintf(`{"topic":%q,"partition_count":%d}`, topic, count)
	var last string
	testkit.EventuallyReport(t, within, func() bool {
		for _, nd := range rc.nodes {
			if nd.exited() {
				continue
			}
			code, got := httpPost(t, nd.Admin, "/admin/api/repartition", body)
			if last = fmt.Sprintf("%s: %d %s", nd.id, code, got); code != 200 || !strings.Contains(got, `"unchanged"`) {
				return false
			}
			n := 0
			for _, p := range rc.topology(nd).Partitions {
				if p.Topic == topic {
					n++
				}
			}
			if last = fmt.Sprintf("%s lists %d partitions of %s", nd.id, n, topic); n != count {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("the transition of %s to %d did not finish: %s", topic, count, last) })
}

// logBuffer is a client logger whose lines the test can search (and
// prints when the test fails).
func logBuffer(t *testing.T, name string) (*lockedBuffer, clientOpt) {
	b := &lockedBuffer{}
	dumpOnFailure(t, "client log "+name, b)
	return b, func(o *client.Options) {
		o.Logger = slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// ---------------------------------------------------------------------------
// The scenarios

// The gateway scenario: a queue of one privately owned
// partition, a producer and a consumer that reach the public broker only,
// keyed confirmed messages all the while. Grow 1 → 3, the consumer then
// also subscribes to the new partitions (forwarded where a private broker
// owns them) and gets their messages; shrink 3 → 1, the subscriptions of
// the retired partitions end with SUBSCRIPTION_CLOSED relayed by the
// gateway. Every key's messages arrive in order, every confirmed message
// is delivered, and nothing is delivered twice (nothing was left unacked).
func TestRepartitionThroughTheGateway(t *testing.T) {
	start := time.Now()
	pc := startPrivateCluster(t, "tcp")
	admin := pc.client(t)
	topic, owner := privateQueue(t, pc, admin, "orders")
	t.Logf("cluster up in %v; %s owned by %s", time.Since(start).Round(time.Millisecond), topic, owner)

	l := newKeyLedger(t, topic)
	l.heal() // no kill here: any key out of order fails
	consLog, withLog := logBuffer(t, "consumer")
	cons := pc.client(t, withLog)
	prod := pc.client(t)
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 16}))
	l.produce(prod, 10*time.Millisecond, 1500, 45*time.Second)
	l.progress(200, waitTimeout, "200 confirmed before the grow")

	l.setPhase("grow 1→3")
	l.slow.Store(int64(5 * time.Millisecond)) // a backlog on the source while it cuts over
	repartition(t, pc.nodes[1], topic, 3)
	awaitCutover(t, cons, topic, 3, waitTimeout)
	owners := pc.placed(pc.nodes[0], topic, 3)
	t.Logf("grow cut over after %v; owners %v", time.Since(start).Round(time.Millisecond), owners)
	newSub := subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{1, 2}, Prefetch: 16})
	l.consume(newSub)
	awaitFinalized(t, pc.raftCluster, topic, 3, 2*waitTimeout)
	l.slow.Store(0)
	l.setPhase("after the grow")
	l.progress(200, waitTimeout, "200 confirmed after the grow finalized")
	forwarded := 0
	for _, p := range []uint32{1, 2} {
		testkit.Eventually(t, waitTimeout, fmt.Sprintf("partition %d (owner %s) delivers", p, owners[p]), func() bool { return l.firstDeliveries(p) > 0 })
		if owners[p] != "node-1" {
			forwarded++
		}
	}
	if forwarded == 0 {
		t.Errorf("the public broker owns both new partitions (%v): no forwarded subscription of a new partition was tried", owners)
	}
	t.Logf("grow finalized after %v; %s", time.Since(start).Round(time.Millisecond), l.report())

	l.setPhase("shrink 3→1")
	l.slow.Store(int64(5 * time.Millisecond))
	repartition(t, pc.nodes[2], topic, 1)
	awaitCutover(t, cons, topic, 1, waitTimeout)
	awaitFinalized(t, pc.raftCluster, topic, 1, 2*waitTimeout)
	l.slow.Store(0)
	l.setPhase("after the shrink")
	testkit.EventuallyReport(t, waitTimeout, func() bool { return newSub.Err() != nil }, func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		return fmt.Sprintf("the subscription of the retired partitions 1 and 2 did not end: closed %v", l.closed)
	})
	l.mu.Lock()
	closed := fmt.Sprint(l.closed)
	l.mu.Unlock()
	t.Logf("retired subscriptions ended: %s", closed)
	if !strings.Contains(consLog.String(), "partition retired") {
		t.Errorf("the consumer never heard a SUBSCRIPTION_CLOSED naming the retired partition through the gateway")
	}
	l.progress(200, waitTimeout, "200 confirmed after the shrink finalized")
	l.finish(2 * waitTimeout)
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dups > 0 {
		t.Errorf("%d duplicate deliveries, with every delivery acknowledged and no connection lost", l.dups)
	}
}

// The scenario Fibril had to disable: a grow while producers and a
// consumer run through the public broker, the consumer's subscription of
// the source partition kept as it was. Messages that land on the source
// partition after the grow keep being delivered to it — in every one of
// several rounds after the transition finished, not once and never again.
func TestRepartitionSourceKeepsDelivering(t *testing.T) {
	start := time.Now()
	pc := startPrivateCluster(t, "tcp")
	topic, owner := privateQueue(t, pc, pc.client(t), "jobs")
	l := newKeyLedger(t, topic)
	l.heal()
	cons, prod := pc.client(t), pc.client(t)
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 16}))
	l.produce(prod, 5*time.Millisecond, 2000, 45*time.Second)
	l.progress(200, waitTimeout, "200 confirmed before the grow")

	l.setPhase("grow 1→2")
	l.slow.Store(int64(5 * time.Millisecond))
	repartition(t, pc.nodes[0], topic, 2)
	awaitCutover(t, cons, topic, 2, waitTimeout)
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{1}, Prefetch: 16}))
	awaitFinalized(t, pc.raftCluster, topic, 2, 2*waitTimeout)
	l.slow.Store(0)
	owners := pc.placed(pc.nodes[0], topic, 2)
	t.Logf("grow finished after %v; owners %v (source owner %s); %s", time.Since(start).Round(time.Millisecond), owners, owner, l.report())
	for round := range 4 {
		phase := fmt.Sprintf("round %d after the grow", round+1)
		l.setPhase(phase)
		testkit.EventuallyReport(t, waitTimeout, func() bool {
			return l.firstDeliveriesIn(phase, 0) >= 50 && l.firstDeliveriesIn(phase, 1) >= 50
		}, func() string {
			return fmt.Sprintf("%s: first deliveries of partition 0: %d, of partition 1: %d; %s",
				phase, l.firstDeliveriesIn(phase, 0), l.firstDeliveriesIn(phase, 1), l.report())
		})
	}
	l.finish(2 * waitTimeout)
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dups > 0 {
		t.Errorf("%d duplicate deliveries, with every delivery acknowledged and no connection lost", l.dups)
	}
}

// kill -9 in the middle of a transition, one broker at a time: the owner
// of the source partition right after the cutover (it fails over to an
// in-sync follower, replication being on by default, then comes back),
// and the placement controller right after the marker was written (the
// next controller goes on; the killed one comes back). The transition
// completes, nothing confirmed is lost, and the keys' messages delivered
// after the heal come in order. Before it, a key can come out of order
// without any repartition fault: deliveries a killed gateway had in
// transit stay leased to its upstream session on the owner until that
// session's reconnect grace runs out, and reach the consumer after newer
// ones (they are below the source's cutover, so the transition cannot
// finish before they are settled).
func TestRepartitionSurvivesKill(t *testing.T) {
	t.Run("source-owner", func(t *testing.T) {
		repartitionKill(t, func(t *testing.T, pc *privateCluster, topic, owner string) *clusterNode {
			return pc.node(owner)
		}, true)
	})
	t.Run("retiring-owner", repartitionKillRetiring)
	t.Run("controller", func(t *testing.T) {
		repartitionKill(t, func(t *testing.T, pc *privateCluster, topic, owner string) *clusterNode {
			return controller(t, pc.raftCluster)
		}, false)
	})
}

// repartitionKill grows a privately owned single-partition queue 1 → 3
// under load and kills victim's pick with SIGKILL right after the cutover
// (afterCutover) or right after the marker was written, restarts it, and
// checks that the transition completes without a confirmed message lost.
func repartitionKill(t *testing.T, victim func(*testing.T, *privateCluster, string, string) *clusterNode, afterCutover bool) {
	start := time.Now()
	pc := startPrivateCluster(t, "tcp")
	topic, owner := privateQueue(t, pc, pc.client(t), "orders")
	pc.awaitInSync(t, topic, 0, otherPrivate(owner))
	l := newKeyLedger(t, topic)
	cons, prod := pc.client(t), pc.client(t)
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 16}))
	l.produce(prod, 5*time.Millisecond, 2000, 50*time.Second)
	l.slow.Store(int64(5 * time.Millisecond)) // a backlog on the source when the kill comes
	l.progress(300, waitTimeout, "300 confirmed before the grow")

	v := victim(t, pc, topic, owner)
	l.setPhase("grow 1→3")
	repartition(t, pc.nodes[1], topic, 3)
	if afterCutover {
		awaitCutover(t, cons, topic, 3, waitTimeout)
	}
	v.kill()
	killed := time.Now()
	l.setPhase("after the kill of " + v.id)
	t.Logf("killed %s (owner of the source: %s) %v after the start, cut over: %v", v.id, owner, time.Since(start).Round(time.Millisecond), afterCutover)
	if v.id == "node-1" {
		pc.restart(v) // the clients' only way in: back at once
	} else {
		l.progress(100, 4*testTTL+waitTimeout, "100 confirmed after the kill")
		pc.restart(v)
	}
	t.Logf("%s back after %v", v.id, time.Since(killed).Round(time.Millisecond))
	if !afterCutover {
		awaitCutover(t, cons, topic, 3, 2*waitTimeout)
	}
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{1, 2}, Prefetch: 16}))
	l.slow.Store(0)
	awaitFinalized(t, pc.raftCluster, topic, 3, 3*waitTimeout)
	t.Logf("transition finished %v after the kill; owners %v; %s", time.Since(killed).Round(time.Millisecond),
		pc.placed(pc.nodes[0], topic, 3), l.report())
	l.heal()
	l.setPhase("healed")
	l.progress(300, waitTimeout, "300 confirmed after the heal")
	for p := range uint32(3) {
		testkit.Eventually(t, waitTimeout, fmt.Sprintf("partition %d delivers after the heal", p), func() bool { return l.firstDeliveriesIn("healed", p) > 0 })
	}
	l.finish(2 * waitTimeout)
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.disorder) > 0 {
		t.Logf("out of order before the heal (reported, not failed): %v", l.disorder)
	}
}

// repartitionKillRetiring grows a privately owned queue 1 → 3, then
// shrinks it 3 → 1 under load and kills (SIGKILL) the private owner of a
// partition the shrink retires right after the cutover, with a backlog on
// it: the partition fails over, drains on its new owner, and is retired;
// its subscription ends, nothing confirmed is lost, and every key's first
// deliveries come in order, also between the kill and the heal (S-124).
// That part once failed in 3 runs of 4: with views held up by the kill, the
// survivor's owner stored messages of the new layout before it adopted it,
// and counted them as its old backlog; the engine's cutover now stops at
// the first of them (core/queue/fence.go). Without that, 5 runs of 6 fail.
func repartitionKillRetiring(t *testing.T) {
	start := time.Now()
	pc := startPrivateCluster(t, "tcp")
	topic, _ := privateQueue(t, pc, pc.client(t), "orders")
	l := newKeyLedger(t, topic)
	cons, prod := pc.client(t), pc.client(t)
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 16}))
	l.produce(prod, 5*time.Millisecond, 2000, 50*time.Second)
	l.progress(100, waitTimeout, "100 confirmed before the grow")
	repartition(t, pc.nodes[0], topic, 3)
	awaitCutover(t, cons, topic, 3, waitTimeout)
	retiring := subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{1, 2}, Prefetch: 16})
	l.consume(retiring)
	awaitFinalized(t, pc.raftCluster, topic, 3, 2*waitTimeout)
	owners := pc.placed(pc.nodes[0], topic, 3)
	var part uint32
	for _, p := range []uint32{1, 2} {
		if owners[p] != "node-1" {
			part = p
		}
	}
	if part == 0 {
		t.Fatalf("the public broker owns both partitions the shrink retires (%v)", owners)
	}
	v := pc.node(owners[part])
	pc.awaitInSync(t, topic, part, otherPrivate(v.id))
	l.slow.Store(int64(5 * time.Millisecond)) // a backlog on the retiring partitions
	l.progress(300, waitTimeout, "300 confirmed over three partitions")

	l.setPhase("shrink 3→1")
	repartition(t, pc.nodes[1], topic, 1)
	awaitCutover(t, cons, topic, 1, waitTimeout)
	v.kill()
	// The consumer catches up at once: with its buffer still full when the
	// re-subscribe's deliveries come, core/client counts the old
	// subscription's buffered deliveries against the new one's prefetch
	// (a PrefetchViolation; a client-side accounting issue, not the
	// broker's).
	l.slow.Store(0)
	killed := time.Now()
	l.setPhase("after the kill of " + v.id)
	t.Logf("killed %s (owner of retiring partition %d; owners %v) %v after the start", v.id, part, owners, time.Since(start).Round(time.Millisecond))
	l.progress(100, 4*testTTL+waitTimeout, "100 confirmed after the kill")
	pc.restart(v)
	awaitFinalized(t, pc.raftCluster, topic, 1, 3*waitTimeout)
	t.Logf("shrink finished %v after the kill; %s", time.Since(killed).Round(time.Millisecond), l.report())
	testkit.Eventually(t, waitTimeout, "the retired partitions' subscription ends", func() bool { return retiring.Err() != nil })
	l.heal()
	l.setPhase("healed")
	l.progress(300, waitTimeout, "300 confirmed after the heal")
	testkit.Eventually(t, waitTimeout, "partition 0 delivers after the heal", func() bool { return l.firstDeliveriesIn("healed", 0) > 0 })
	l.finish(2 * waitTimeout)
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.disorder) > 0 {
		t.Errorf("out of order before the heal: %v", l.disorder)
	}
}

// controller finds the placement controller: each node's topology marks
// only itself, and only while it is the controller.
func controller(t *testing.T, rc *raftCluster) *clusterNode {
	t.Helper()
	var ctl *clusterNode
	testkit.Eventually(t, waitTimeout, "a controller", func() bool {
		for _, nd := range rc.nodes {
			for _, n := range rc.topology(nd).Nodes {
				if n.Controller && n.ID == nd.id {
					ctl = nd
					return true
				}
			}
		}
		return false
	})
	return ctl
}

// otherPrivate is the private broker that is not id (a follower of id's
// partitions in the three-node private cluster).
func otherPrivate(id string) string {
	if id == "node-2" {
		return "node-3"
	}
	return "node-2"
}
