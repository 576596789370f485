package integration

// Faults on real broker processes over a packet wire
// (harness_wire_test.go): the owner's answers lost on the way to a
// gateway, 1% packet loss on every link between brokers, and 200 ms of
// delay on every link between brokers. The brokers run in network
// namespaces of their own; the test process and its clients reach them
// over unimpaired links, so only traffic between brokers (replication,
// forwarding, coordination) meets the fault.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// startWireCluster starts a raft cluster of n brokers on a packet wire,
// the last `private` of them private (their client address advertised as
// one where nothing listens), each with the flags in extra.
func startWireCluster(t *testing.T, n, private int, tr string, extra ...string) *labCluster {
	t.Helper()
	lab := newWireLab(t, n)
	return startLabClusterWith(t, lab, tr, func(i int) []string {
		if i < n-private {
			return extra
		}
		nowhere := netip.AddrPortFrom(lab.hosts[i].addr, labBrokerPort+1).String()
		return append([]string{"--broker.visibility=private", "--broker.listener.advertise=" + nowhere}, extra...)
	})
}

// gatewayDial is the dialer of a client that knows only gw: any other
// address fails the test (a private broker's bind or advertised address
// among them).
func (lc *labCluster) gatewayDial(t *testing.T, gw *labNode) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != gw.Addr {
			t.Errorf("the client dialled %s: it may reach only the gateway %s", addr, gw.Addr)
			return nil, fmt.Errorf("not the gateway: %s", addr)
		}
		return lc.guard.dial(ctx, network, addr)
	}
}

// awaitOwners waits until every node shows every partition of topic with
// a live owner and returns the owners.
func (lc *labCluster) awaitOwners(t *testing.T, topic string, parts int) map[uint32]string {
	t.Helper()
	owners := map[uint32]string{}
	if !isoWait(2*waitTimeout, func() bool {
		clear(owners)
		v, err := lc.topology(lc.nodes[0])
		if err != nil {
			return false
		}
		for _, p := range v.Partitions {
			if p.Topic == topic && p.Owner != "" && p.OwnerLive {
				owners[p.Partition] = p.Owner
			}
		}
		return len(owners) == parts
	}) {
		t.Fatalf("%s not placed: owners %v", topic, owners)
	}
	return owners
}

// The owner's answers to a gateway are lost, one way: packets from the
// private owner's broker port to the gateway vanish, while everything
// else (the requests the gateway sends, raft, replication to the other
// follower) flows. A client that knows only the gateway publishes with
// confirms, one at a time, on a raw connection (so every answer is seen
// as sent, without the client library's retries):
//
//   - the first publish that does not get its confirm answers 504 (the
//     gateway lost its upstream session with the request sent: the outcome
//     is unknown, and the client must not replay it blindly);
//   - nothing begun after the loss is confirmed until the wire heals, and
//     every answer meanwhile is 504 or 503;
//   - after the heal confirms resume, and every confirmed message is
//     delivered through the gateway; the 504 ones may or may not be.
//
// Over tcp and over quic (where one connection carries every upstream
// session as a stream).
func TestOneWayLossOfOwnerAnswers(t *testing.T) {
	requireNetns(t)
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) { oneWayLoss(t, tr) })
	}
}

func oneWayLoss(t *testing.T, tr string) {
	lc := startWireCluster(t, 3, 2, tr)
	gw := lc.nodes[0]
	dial := lc.gatewayDial(t, gw)
	setup := lc.newLabClient(t, dial, gw)
	const parts = 6
	if _, err := setup.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	owners := lc.awaitOwners(t, "orders", parts)
	part, owner := uint32(parts), (*labNode)(nil)
	for p := range uint32(parts) {
		for _, nd := range lc.nodes[1:] {
			if owners[p] == nd.id && part == parts {
				part, owner = p, nd
			}
		}
	}
	if owner == nil {
		t.Fatalf("no partition of orders is privately owned: %v", owners)
	}
	t.Logf("partition %d: owner %s (%s), gateway %s (%s)", part, owner.id, owner.host.addr, gw.id, gw.host.addr)

	conn, err := client.DialConn(ctxT(t, opTimeout), gw.Addr, client.ConnConfig{Username: lc.user, Password: lc.pass, TLS: lc.tls, Dial: dial,
		Logger: testLogger(t, "publisher")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	type answer struct {
		payload      string
		kind         string
		began, ended time.Time
	}
	var (
		mu        sync.Mutex
		answers   []answer
		confirmed = map[string]bool{}
		unknown   = map[string]bool{}
		lossAt    time.Time
		healAt    time.Time
	)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(3 * time.Minute)
		for i := 0; i < 100_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			payload := fmt.Sprintf("m-%d", i)
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			f, err := conn.Do(ctx, wire.OpPublish, &wire.Publish{Topic: "orders", Partition: part, RequireConfirm: true, Payload: []byte(payload)})
			cancel()
			kind, _, ok := answerKind(f, err)
			if strings.HasPrefix(kind, "ERROR 504") {
				kind = "504"
			}
			mu.Lock()
			answers = append(answers, answer{payload, kind, began, time.Now()})
			switch {
			case ok:
				confirmed[payload] = true
			case kind == "504":
				unknown[payload] = true
			}
			mu.Unlock()
			if err != nil && conn.Err() != nil {
				return // the connection to the gateway itself ended: reported below
			}
			if !ok {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	})
	count := func(pred func(a answer) bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range answers {
			if pred(a) {
				n++
			}
		}
		return n
	}
	if !isoWait(waitTimeout, func() bool { return count(func(a answer) bool { return a.kind == "PUBLISH_OK" }) >= 50 }) {
		t.Fatalf("50 confirms through the gateway before the loss: %d", count(func(a answer) bool { return a.kind == "PUBLISH_OK" }))
	}

	// The loss: the owner's broker port answers nothing the gateway hears.
	mu.Lock()
	lossAt = time.Now()
	mu.Unlock()
	lc.lab.wire.set(owner.host.addr, gw.host.addr, wireRule{Loss: 1, SrcPort: labBrokerPort})
	// Until a 504 and a few answers after it (or the bound).
	first504 := func() (answer, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers {
			if a.ended.After(lossAt) && a.kind == "504" {
				return a, true
			}
		}
		return answer{}, false
	}
	if !isoWait(time.Minute, func() bool {
		a, ok := first504()
		return ok && time.Since(a.ended) > 3*time.Second
	}) {
		mu.Lock()
		var tail []string
		for _, a := range answers {
			if a.ended.After(lossAt) {
				tail = append(tail, a.kind)
			}
		}
		mu.Unlock()
		t.Fatalf("no 504 within a minute of the loss; answers since: %v", tail)
	}
	mu.Lock()
	healAt = time.Now()
	mu.Unlock()
	lc.lab.wire.clear()
	if !isoWait(2*waitTimeout, func() bool {
		return count(func(a answer) bool { return a.kind == "PUBLISH_OK" && a.began.After(healAt) }) >= 50
	}) {
		t.Fatalf("confirms did not resume after the heal: %d", count(func(a answer) bool { return a.kind == "PUBLISH_OK" && a.began.After(healAt) }))
	}
	close(stop)
	<-done

	// The answers, as the rules say.
	mu.Lock()
	byKind := map[string]int{}
	var firstErr answer
	for _, a := range answers {
		if !a.ended.After(lossAt) {
			if a.kind != "PUBLISH_OK" {
				t.Errorf("%s before the loss: %s", a.payload, a.kind)
			}
			continue
		}
		duringLoss := a.ended.Before(healAt)
		if duringLoss {
			byKind[a.kind]++
		} else {
			byKind["after heal: "+a.kind]++
		}
		if firstErr.kind == "" && a.kind != "PUBLISH_OK" {
			firstErr = a
		}
		switch {
		case a.kind == "PUBLISH_OK" && duringLoss && a.began.After(lossAt):
			t.Errorf("%s begun %v after the loss was confirmed %v after it, before the heal: the owner's confirm could not have arrived",
				a.payload, a.began.Sub(lossAt).Round(time.Millisecond), a.ended.Sub(lossAt).Round(time.Millisecond))
		case a.kind != "PUBLISH_OK" && a.kind != "504" && a.kind != "503":
			t.Errorf("%s: answered %s, want a confirm, 504 or 503", a.payload, a.kind)
		}
	}
	mu.Unlock()
	if firstErr.kind != "504" {
		t.Errorf("the first publish without a confirm after the loss answered %q, want 504 (the request reached the owner)", firstErr.kind)
	}

	// Everything confirmed is delivered through the gateway.
	cc := lc.newLabClient(t, dial, gw)
	delivered := consumeConfirmed(t, cc, "orders", confirmed)
	lost, unknownIn := 0, 0
	for p := range confirmed {
		if delivered[p] == 0 {
			lost++
		}
	}
	for p := range unknown {
		if delivered[p] > 0 {
			unknownIn++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d confirmed messages were not delivered", lost, len(confirmed))
	}
	dups := 0
	for _, n := range delivered {
		dups += n - 1
	}
	t.Logf("over %s, one-way loss of %s's answers to the gateway %s for %v: answers %v; first error %s %v after the loss (publish begun %v after it); confirmed %d, delivered %d distinct, lost %d, duplicates %d; 504 (outcome unknown) %d, of which delivered %d",
		tr, owner.id, gw.id, healAt.Sub(lossAt).Round(time.Millisecond), byKind, firstErr.kind,
		firstErr.ended.Sub(lossAt).Round(time.Millisecond), firstErr.began.Sub(lossAt).Round(time.Millisecond),
		len(confirmed), len(delivered), lost, dups, len(unknown), unknownIn)
}

// consumeConfirmed consumes topic through c until every payload of want
// was delivered and two quiet seconds passed, or the bound; it returns the
// deliveries by payload (acknowledging each).
func consumeConfirmed(t *testing.T, c *client.Client, topic string, want map[string]bool) map[string]int {
	t.Helper()
	sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 256})
	defer sub.Close()
	got := map[string]int{}
	missing := len(want)
	until := time.Now().Add(3 * waitTimeout)
	for i := 0; i < 10_000_000 && time.Now().Before(until); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("consuming %s: %v", topic, err)
			}
			if missing == 0 {
				break
			}
			continue
		}
		p := string(d.Payload)
		got[p]++
		if got[p] == 1 && want[p] {
			missing--
		}
		_ = d.Ack(context.Background())
	}
	return got
}

// loadResult is what windowedLoad saw.
type loadResult struct {
	confirmed map[string]bool
	failed    map[string]int // by kind
	latencies []time.Duration
	elapsed   time.Duration
}

func (r loadResult) String() string {
	ls := slices.Clone(r.latencies)
	slices.Sort(ls)
	q := func(f float64) time.Duration {
		if len(ls) == 0 {
			return 0
		}
		return ls[min(len(ls)-1, int(f*float64(len(ls))))].Round(100 * time.Microsecond)
	}
	rate := float64(len(r.confirmed)) / r.elapsed.Seconds()
	return fmt.Sprintf("%d confirmed in %v (%.0f msgs/s), confirm latency min %v p50 %v p99 %v max %v, failures %v",
		len(r.confirmed), r.elapsed.Round(time.Millisecond), rate, q(0), q(0.5), q(0.99), q(1), r.failed)
}

// windowedLoad publishes with confirms through c, spread over the topic's
// parts partitions, keeping window publishes in flight, for dur or n
// messages, whichever comes first. Failed publishes are counted by kind
// and not retried.
func windowedLoad(c *client.Client, topic string, parts, window int, dur time.Duration, n int, prefix string) loadResult {
	pub := c.Publisher(topic, client.PublisherOptions{})
	res := loadResult{confirmed: map[string]bool{}, failed: map[string]int{}}
	var mu sync.Mutex
	sem := make(chan struct{}, window)
	start := time.Now()
	until := start.Add(dur)
	for i := 0; i < n && time.Now().Before(until); i++ {
		sem <- struct{}{}
		payload := fmt.Sprintf("%s-%d", prefix, i)
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := pub.PublishAsync(ctx, client.Message{Partition: u32(uint32(i % parts)), Payload: []byte(payload)}, func(_ uint64, err error) {
			cancel()
			mu.Lock()
			if err == nil {
				res.confirmed[payload] = true
				res.latencies = append(res.latencies, time.Since(began))
			} else {
				res.failed[errKind(err)]++
			}
			mu.Unlock()
			<-sem
		})
		if err != nil {
			cancel()
			mu.Lock()
			res.failed[errKind(err)]++
			mu.Unlock()
			<-sem
		}
	}
	for range window { // every callback has run
		sem <- struct{}{}
	}
	res.elapsed = time.Since(start)
	return res
}

// impairPeers sets rule on every direction between two brokers of the
// lab (the test process's links stay unimpaired).
func impairPeers(lab *netLab, r wireRule) {
	for _, a := range lab.hosts {
		for _, b := range lab.hosts {
			if a != b {
				lab.wire.set(a.addr, b.addr, r)
			}
		}
	}
}

// 1% of the packets on every link between brokers lost, both ways, over
// tcp and quic, with one private broker so that forwarded sessions cross
// the lossy links too: a client of the two public brokers publishes with
// confirms (a window of 64 over 6 partitions) and consumes; every
// confirmed message is delivered. Throughput and confirm latency with and
// without the loss, in the same run, are logged.
func TestPeerLinkLoss(t *testing.T) {
	requireNetns(t)
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			lc := startWireCluster(t, 3, 1, tr)
			publicNodes := lc.nodes[:2]
			c := lc.newLabClient(t, lc.guard.dial, publicNodes...)
			const parts = 6
			if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			owners := lc.awaitOwners(t, "orders", parts)
			base := windowedLoad(c, "orders", parts, 64, 3*time.Second, 20_000, "base")
			impairPeers(lc.lab, wireRule{Loss: 0.01})
			lossy := windowedLoad(c, "orders", parts, 64, 10*time.Second, 50_000, "lossy")
			dropped := lc.lab.wire.dropped.Load()
			lc.lab.wire.clear()
			if len(lossy.confirmed) == 0 {
				t.Fatalf("nothing confirmed with 1%% loss on the peer links: %v", lossy)
			}
			if dropped == 0 {
				t.Fatal("the wire dropped nothing: the test proved nothing")
			}
			want := map[string]bool{}
			for p := range base.confirmed {
				want[p] = true
			}
			for p := range lossy.confirmed {
				want[p] = true
			}
			impairPeers(lc.lab, wireRule{Loss: 0.01}) // consume under loss as well
			got := consumeConfirmed(t, c, "orders", want)
			var lost []string
			for p := range want {
				if got[p] == 0 {
					lost = append(lost, p)
				}
			}
			sort.Strings(lost)
			if len(lost) > 0 {
				t.Errorf("%d of %d confirmed messages lost, e.g. %v", len(lost), len(want), lost[:min(len(lost), 10)])
			}
			dups := 0
			for _, n := range got {
				dups += n - 1
			}
			ratio := 0.0
			if b := float64(len(base.confirmed)) / base.elapsed.Seconds(); b > 0 {
				ratio = float64(len(lossy.confirmed)) / lossy.elapsed.Seconds() / b
			}
			t.Logf("peer links over %s, owners %v (node-3 private)\n  no loss: %v\n  1%% loss: %v\n  throughput ratio %.2f; %d packets dropped by the wire while publishing; delivered %d distinct, lost %d, duplicates %d",
				tr, owners, base, lossy, ratio, dropped, len(got), len(lost), dups)
		})
	}
}

// 200 ms of delay each way on every link between brokers (raft,
// replication and forwarding; the clients' links are direct): the
// cluster stays up, a confirm waits for a follower's copy (so it takes at
// least the 400 ms round trip), and nothing confirmed is lost.
// Throughput and confirm latency beside the same run without the delay
// are logged.
func TestPeerLinkLatency(t *testing.T) {
	requireNetns(t)
	const delay = 200 * time.Millisecond
	// The coordination timings of a real deployment (fibril.example.toml),
	// not the tests' short ones: a 250 ms heartbeat cannot outlast a
	// 400 ms round trip.
	lc := startWireCluster(t, 3, 0, "tcp", "--coordination.heartbeat_interval_ms=1000", "--coordination.liveness_ttl_ms=4000")
	c := lc.newLabClient(t, lc.guard.dial, lc.nodes...)
	const parts = 3
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	lc.awaitOwners(t, "orders", parts)
	base := windowedLoad(c, "orders", parts, 256, 3*time.Second, 50_000, "base")
	impairPeers(lc.lab, wireRule{Delay: delay})
	// With the same window throughput is window / round trip (Little's
	// law); a window 16 times as large shows whether the brokers keep the
	// longer pipe full.
	slow := windowedLoad(c, "orders", parts, 256, 8*time.Second, 100_000, "slow")
	wide := windowedLoad(c, "orders", parts, 4096, 8*time.Second, 200_000, "wide")
	want := map[string]bool{}
	for _, r := range []loadResult{slow, wide} {
		if len(r.confirmed) == 0 {
			t.Fatalf("nothing confirmed with %v of delay between brokers: %v", delay, r)
		}
		if m := slices.Min(r.latencies); m < 2*delay {
			t.Errorf("a confirm took %v with %v each way between brokers: it cannot have waited for a follower's copy", m, delay)
		}
		for p := range r.confirmed {
			want[p] = true
		}
	}
	// Everything confirmed is there, consumed with the delay still on.
	for p := range base.confirmed {
		want[p] = true
	}
	got := consumeConfirmed(t, c, "orders", want)
	lost := 0
	for p := range want {
		if got[p] == 0 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d confirmed messages lost", lost, len(want))
	}
	// The cluster stayed whole: every node live in every node's view.
	for _, nd := range lc.nodes {
		v, err := lc.topology(nd)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range v.Nodes {
			if !n.Live {
				t.Errorf("%s shows %s not live with %v of delay", nd.id, n.ID, delay)
			}
		}
	}
	rate := func(r loadResult) float64 { return float64(len(r.confirmed)) / r.elapsed.Seconds() }
	t.Logf("%v each way between brokers (tcp, 3 partitions)\n  no delay, window 256:   %v\n  delayed, window 256:    %v\n  delayed, window 4096:   %v\n  throughput ratios to no delay %.2f and %.2f; delivered %d distinct, lost %d",
		delay, base, slow, wide, rate(slow)/rate(base), rate(wide)/rate(base), len(got), lost)
}
