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
	"encoding/json"
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
	closed    map[uint32]error         // partitions whose subscription ended for good
	phase     string                   // what the test is doing, for violations
	late      map[string]string        // payload → phase of its first delivery
	where     map[string]firstDelivery // payload → where it was first delivered
	disorder  []string                 // "phase: key k: 17 after 18"
	healed    bool                     // violations from here on fail the test
	failed    int                      // publishes answered with an error (retried)
	dups      int

	slow atomic.Int64 // the consumers' pause per delivery (ns): a backlog builds up

	stop     chan struct{}
	haltOnce sync.Once
	wg       sync.WaitGroup // producers
	consumed sync.WaitGroup
}

// firstDelivery is where a payload was first delivered from.
type firstDelivery struct {
	part uint32
	off  uint64
}

func (f firstDelivery) String() string { return fmt.Sprintf("partition %d, offset %d", f.part, f.off) }

func newKeyLedger(t *testing.T, topic string) *keyLedger {
	return &keyLedger{t: t, topic: topic, confirmed: map[string]bool{}, delivered: map[string]int{},
		lastFirst: map[string]int{}, perPart: map[uint32]int{}, byPhase: map[string]map[uint32]int{}, closed: map[uint32]error{},
		late: map[string]string{}, where: map[string]firstDelivery{}, phase: "start", stop: make(chan struct{})}
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
	l.where[payload] = firstDelivery{d.Partition, d.Offset}
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

// confirmedSoFar is the payloads confirmed until now.
func (l *keyLedger) confirmedSoFar() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.confirmed))
	for p := range l.confirmed {
		out[p] = true
	}
	return out
}

// checkCutovers fails the test where a source partition's cutover
// recorded in m is not above every message of it confirmed before the
// transition was requested (old): those were all routed by the old
// layout, which everything below the cutover is and nothing from it on.
// Call it once they were delivered (where they were stored is where they
// were first delivered from).
func (l *keyLedger) checkCutovers(old map[string]bool, m markerView) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var bad []string
	for payload := range old {
		at, ok := l.where[payload]
		if !ok {
			continue // never delivered: finish reports it
		}
		if src, ok := m.Sources[at.part]; ok && at.off >= src.Cutover {
			bad = append(bad, fmt.Sprintf("%q at %s (cutover %d)", payload, at, src.Cutover))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		l.t.Errorf("%d messages confirmed before the transition was requested lie at or above their partition's recorded cutover, so they count as routed by the new layout, e.g. %v; the marker: %s",
			len(bad), bad[:min(len(bad), 10)], m.raw)
	}
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

// finishWithoutDuplicates is finish for a run where no connection was
// lost and every delivery was acknowledged, so that nothing may come
// twice; it logs the ledger and the time since start.
func (l *keyLedger) finishWithoutDuplicates(start time.Time) {
	l.t.Helper()
	l.finish(2 * waitTimeout)
	l.t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dups > 0 {
		l.t.Errorf("%d duplicate deliveries, with every delivery acknowledged and no connection lost", l.dups)
	}
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
	return privateQueueAvoiding(t, pc, c, name, "")
}

// privateQueueAvoiding is privateQueue for a queue that must land on a
// private broker other than avoid.
func privateQueueAvoiding(t *testing.T, pc *privateCluster, c *client.Client, name, avoid string) (topic, owner string) {
	t.Helper()
	for i := range 6 {
		topic = fmt.Sprintf("%s-%d", name, i)
		if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: topic, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if o := pc.placed(pc.nodes[0], topic, 1)[0]; o != "node-1" && o != avoid {
			return topic, o
		}
	}
	t.Fatalf("no single-partition queue landed on a private broker other than %q in 6 tries", avoid)
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

// markerView is a repartition marker as GET /admin/api/topology shows it.
type markerView struct {
	raw     string // as shown, for the log; "none" without a transition
	CutOver bool   `json:"cut_over"`
	Sources map[uint32]struct {
		Cutover uint64 `json:"cutover"`
		Drained bool   `json:"drained"`
	} `json:"sources"`
}

// marker is topic's repartition marker as nd's topology shows it.
func marker(t *testing.T, nd *clusterNode, topic string) markerView {
	t.Helper()
	code, body := httpGet(t, nd.Admin, "/admin/api/topology", nil)
	if code != 200 {
		t.Fatalf("%s topology: %d %s", nd.id, code, body)
	}
	var v struct {
		Repartitions []json.RawMessage `json:"repartitions"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("topology: %v", err)
	}
	for _, r := range v.Repartitions {
		var m struct {
			Topic string `json:"topic"`
		}
		if json.Unmarshal(r, &m) == nil && m.Topic == topic {
			mv := markerView{raw: string(r)}
			if err := json.Unmarshal(r, &mv); err != nil {
				t.Fatalf("marker: %v: %s", err, r)
			}
			return mv
		}
	}
	return markerView{raw: "none"}
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
	l.finishWithoutDuplicates(start)
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
	l.finishWithoutDuplicates(start)
}

// kill -9 in the middle of a transition, one broker at a time, under keyed
// confirmed load through the public broker:
//   - source-owner: the owner of a grow's source partition, right after
//     the cutover;
//   - retiring-owner: the private owner of a partition a shrink retires,
//     right after the cutover;
//   - shrink-survivor-owner: the private owner of the partition a shrink
//     keeps (partition 0, the one the retired partitions drain into),
//     right after the cutover, once every source recorded its cutover
//     offset: the next owner inherits the offset and holds back what lies
//     above it until the retiring partitions drained (in the runs so far
//     they had not yet when the kill came; the log shows the marker);
//   - controller: the placement controller, right after a grow's marker
//     was written (the next controller goes on);
//   - private-controller: the same, with a private broker as the placement
//     controller and the raft leader at once (privateController), and the
//     queue's partition on the other private broker.
//
// A killed owner's partitions fail over to in-sync followers (replication
// is on by default); every killed broker comes back. The transition
// completes, nothing confirmed is lost, every source's cutover recorded
// before the kill lies above all of its messages confirmed before the
// transition was requested, and the keys' first deliveries come in
// order. Where the killed broker is the public one (the
// controller subtest, when the public broker happens to lead), a key out
// of order before the heal is reported and not failed: deliveries a
// killed gateway had in transit stay leased to its upstream session on the
// owner until that session's reconnect grace runs out, and reach the
// consumer after newer ones (they are below the source's cutover, so the
// transition cannot finish before they are settled). Nowhere else can a
// key come out of order, so there it fails the test from the start.
func TestRepartitionSurvivesKill(t *testing.T) {
	t.Run("source-owner", func(t *testing.T) {
		repartitionKill(t, growKill{afterCutover: true, victim: func(t *testing.T, pc *privateCluster, owner string) *clusterNode {
			return pc.node(owner)
		}})
	})
	t.Run("retiring-owner", func(t *testing.T) {
		repartitionKillShrink(t, shrinkKill{pick: func(t *testing.T, owners map[uint32]string) uint32 {
			var part uint32
			for _, p := range []uint32{1, 2} {
				if owners[p] != "node-1" {
					part = p
				}
			}
			if part == 0 {
				t.Fatalf("the public broker owns both partitions the shrink retires (%v)", owners)
			}
			return part
		}})
	})
	t.Run("shrink-survivor-owner", func(t *testing.T) {
		repartitionKillShrink(t, shrinkKill{recorded: true, pick: func(t *testing.T, owners map[uint32]string) uint32 {
			if owners[0] == "node-1" {
				t.Fatalf("the public broker owns the surviving partition 0 after the grow (%v)", owners)
			}
			return 0
		}})
	})
	t.Run("controller", func(t *testing.T) {
		repartitionKill(t, growKill{victim: func(t *testing.T, pc *privateCluster, _ string) *clusterNode {
			return controller(t, pc.raftCluster)
		}})
	})
	t.Run("private-controller", func(t *testing.T) {
		var ctl *clusterNode
		repartitionKill(t, growKill{
			arrange: func(t *testing.T, pc *privateCluster) string {
				ctl = privateController(t, pc)
				return ctl.id // the queue's partition on the other private broker: a kill of the controller only
			},
			victim: func(t *testing.T, pc *privateCluster, _ string) *clusterNode {
				if now, leader := controller(t, pc.raftCluster), raftLeader(t, ctl); now != ctl || leader != ctl.id {
					t.Fatalf("the placement controller (%s) and the raft leader (%s) are no longer %s", now.id, leader, ctl.id)
				}
				return ctl
			},
		})
	})
}

// growKill says whom repartitionKill kills, and when.
type growKill struct {
	// arrange, when set, runs once the cluster is up, before the queue is
	// declared, and names a private broker the queue's partition must not
	// land on ("" for none).
	arrange func(t *testing.T, pc *privateCluster) (avoid string)
	// victim picks the broker to kill, given the source partition's owner,
	// right before the transition starts.
	victim       func(t *testing.T, pc *privateCluster, owner string) *clusterNode
	afterCutover bool // kill right after the cutover, else right after the marker was written
}

// repartitionKill grows a privately owned single-partition queue 1 → 3
// under load and kills k's victim with SIGKILL right after the cutover
// or right after the marker was written, restarts it, and checks that the
// transition completes without a confirmed message lost and, unless the
// victim is the public broker, without a key out of order.
func repartitionKill(t *testing.T, k growKill) {
	start := time.Now()
	pc := startPrivateCluster(t, "tcp")
	var avoid string
	if k.arrange != nil {
		avoid = k.arrange(t, pc)
	}
	topic, owner := privateQueueAvoiding(t, pc, pc.client(t), "orders", avoid)
	pc.awaitInSync(t, topic, 0, otherPrivate(owner))
	l := newKeyLedger(t, topic)
	cons, prod := pc.client(t), pc.client(t)
	l.consume(subscribe(t, cons, topic, client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 16}))
	l.produce(prod, 5*time.Millisecond, 2000, 50*time.Second)
	l.slow.Store(int64(5 * time.Millisecond)) // a backlog on the source when the kill comes
	l.progress(300, waitTimeout, "300 confirmed before the grow")

	v := k.victim(t, pc, owner)
	strict := v.id != "node-1" // see TestRepartitionSurvivesKill
	if strict {
		l.heal()
	}
	l.setPhase("grow 1→3")
	old := l.confirmedSoFar()
	repartition(t, pc.nodes[1], topic, 3)
	if k.afterCutover {
		awaitCutover(t, cons, topic, 3, waitTimeout)
	}
	before := marker(t, pc.nodes[0], topic)
	v.kill()
	killed := time.Now()
	l.setPhase("after the kill of " + v.id)
	t.Logf("killed %s (owner of the source: %s) %v after the start, cut over: %v; the marker just before: %s", v.id, owner, time.Since(start).Round(time.Millisecond), k.afterCutover, before.raw)
	if v.id == "node-1" {
		pc.restart(v) // the clients' only way in: back at once
	} else {
		l.progress(100, 4*testTTL+waitTimeout, "100 confirmed after the kill")
		pc.restart(v)
	}
	t.Logf("%s back after %v", v.id, time.Since(killed).Round(time.Millisecond))
	if !k.afterCutover {
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
	l.checkCutovers(old, before)
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.disorder) > 0 && !strict {
		t.Logf("out of order before the heal (the public broker was killed: reported, not failed): %v", l.disorder)
	}
}

// shrinkKill says whom repartitionKillShrink kills, and when.
type shrinkKill struct {
	// pick chooses the partition whose owner is killed, given the owners
	// after the grow.
	pick func(t *testing.T, owners map[uint32]string) uint32
	// recorded: kill once the marker shows every source's cutover
	// recorded (the killed owner's successor inherits its), else as soon
	// as the client sees the cutover.
	recorded bool
}

// repartitionKillShrink grows a privately owned queue 1 → 3, then shrinks
// it 3 → 1 under load and kills (SIGKILL) the private owner of the
// partition pick chooses right after the shrink's cutover, with a backlog
// on every partition: the partition fails over to an in-sync follower and
// the killed broker comes back. The shrink finishes, the retired
// partitions' subscription ends, nothing confirmed is lost, and every
// key's first deliveries come in order, also between the kill and the
// heal (S-124).
//
// With a retiring partition's owner killed, that part once failed in 3
// runs of 4: with views held up by the kill, the survivor's owner stored
// messages of the new layout before it adopted it, and counted them as its
// old backlog; the engine's cutover now stops at the first of them
// (core/queue/fence.go). Without that, 5 runs of 6 fail.
//
// With the survivor's owner killed, the check of the recorded cutovers
// failed in 1 run of 14: partition 2, new in the grow, recorded 0 as its
// shrink cutover, though it held 167 messages confirmed before the shrink
// was requested, and counted as drained at once. The engine had kept its
// note of a message a producer routed by the grow's layout ahead of its
// owner (no cutover of the grow asks a new partition), and took it for a
// note of the shrink; a note is now kept by version.
func repartitionKillShrink(t *testing.T, k shrinkKill) {
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
	part := k.pick(t, owners)
	v := pc.node(owners[part])
	pc.awaitInSync(t, topic, part, otherPrivate(v.id))
	l.slow.Store(int64(5 * time.Millisecond)) // a backlog on every partition
	l.progress(300, waitTimeout, "300 confirmed over three partitions")

	l.setPhase("shrink 3→1")
	old := l.confirmedSoFar()
	repartition(t, pc.nodes[1], topic, 1)
	awaitCutover(t, cons, topic, 1, waitTimeout)
	before := marker(t, pc.nodes[0], topic)
	if k.recorded {
		testkit.EventuallyReport(t, waitTimeout, func() bool {
			before = marker(t, pc.nodes[0], topic)
			return len(before.Sources) == 3
		}, func() string { return "the sources' cutovers not all recorded: " + before.raw })
	}
	v.kill()
	// The consumer catches up at once: with its buffer still full when the
	// re-subscribe's deliveries come, core/client counts the old
	// subscription's buffered deliveries against the new one's prefetch
	// (a PrefetchViolation; a client-side accounting issue, not the
	// broker's).
	l.slow.Store(0)
	killed := time.Now()
	l.setPhase("after the kill of " + v.id)
	t.Logf("killed %s (owner of partition %d; owners %v) %v after the start; the marker just before: %s", v.id, part, owners, time.Since(start).Round(time.Millisecond), before.raw)
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
	l.checkCutovers(old, before)
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), l.report())
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.disorder) > 0 {
		t.Errorf("out of order before the heal: %v", l.disorder)
	}
}

// raftMember is one member of GET /admin/api/raft/members.
type raftMember struct {
	ID     string `json:"id"`
	Voter  bool   `json:"voter"`
	Leader bool   `json:"leader"`
}

// raftMembers lists the raft group through nd's admin API (nil while it
// has no leader to answer).
func raftMembers(t *testing.T, nd *clusterNode) []raftMember {
	t.Helper()
	code, body := httpGet(t, nd.Admin, "/admin/api/raft/members", nil)
	if code != 200 {
		return nil
	}
	var v struct {
		Members []raftMember `json:"members"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("raft members: %v: %s", err, body)
	}
	return v.Members
}

// raftLeader is the raft group's leader as nd's admin API shows it ("" for
// none).
func raftLeader(t *testing.T, nd *clusterNode) string {
	t.Helper()
	for _, m := range raftMembers(t, nd) {
		if m.Leader {
			return m.ID
		}
	}
	return ""
}

// raftChange makes a change of the raft group's members (demote,
// add-voter) through nd's admin API, asking again (bounded) while the
// group has no leader to make it.
func raftChange(t *testing.T, nd *clusterNode, change, node string) {
	t.Helper()
	var last string
	testkit.EventuallyReport(t, waitTimeout, func() bool {
		code, body := httpPost(t, nd.Admin, "/admin/api/raft/"+change, fmt.Sprintf(`{"node":%q}`, node))
		last = fmt.Sprintf("%d %s", code, body)
		return code == 200
	}, func() string { return fmt.Sprintf("raft %s %s via %s: %s", change, node, nd.id, last) })
}

// privateController makes one private broker the placement controller and
// the raft leader at once, and returns it; run before any queue exists, so
// that no partition moves. The placement election is handed on only by a
// resignation: if the public broker leads it, it is stopped (SIGTERM: it
// resigns, and the private brokers campaign while it is down) and started
// again. Raft leadership goes to the controller by demoting the other two
// voters (the one voter left leads) and promoting them back. At most 3
// rounds.
func privateController(t *testing.T, pc *privateCluster) *clusterNode {
	t.Helper()
	for round := range 3 {
		ctl := controller(t, pc.raftCluster)
		if ctl.id == "node-1" {
			t.Logf("round %d: the public broker is the placement controller; restarting it", round+1)
			ctl.stop()
			pc.restart(ctl)
			continue
		}
		if leader := raftLeader(t, ctl); leader != ctl.id {
			t.Logf("round %d: the placement controller is %s, the raft leader %q; demoting the others", round+1, ctl.id, leader)
			for _, nd := range pc.nodes {
				if nd != ctl {
					raftChange(t, ctl, "demote", nd.id)
				}
			}
			testkit.Eventually(t, waitTimeout, ctl.id+" leads the raft group", func() bool { return raftLeader(t, ctl) == ctl.id })
			for _, nd := range pc.nodes {
				if nd != ctl {
					raftChange(t, ctl, "add-voter", nd.id)
				}
			}
		}
		voters, leader := 0, ""
		for _, m := range raftMembers(t, ctl) {
			if m.Voter {
				voters++
			}
			if m.Leader {
				leader = m.ID
			}
		}
		if now := controller(t, pc.raftCluster); now == ctl && leader == ctl.id && voters == len(pc.nodes) {
			t.Logf("%s is the placement controller and the raft leader, %d voters", ctl.id, voters)
			return ctl
		}
	}
	t.Fatal("no private broker became the placement controller and the raft leader in 3 rounds")
	return nil
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
