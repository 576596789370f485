package broker

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/metricstest"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/transport/faultproxy"
)

// gatewayBehindProxy starts a public broker (n0) and a private one (n1)
// over TCP, n1's peer address a fault proxy in front of its listener: the
// gateway's upstream sessions to n1 run through the proxy, which the test
// can reset.
func gatewayBehindProxy(t *testing.T) ([]*Broker, *faultproxy.Proxy) {
	return gatewayBehindProxyOver(t, "tcp")
}

// gatewayBehindProxyOver is gatewayBehindProxy over transport tr (quic: a
// UDP proxy, TLS, and QUIC connections that die after 1 s of silence).
func gatewayBehindProxyOver(t *testing.T, tr string) ([]*Broker, *faultproxy.Proxy) {
	t.Helper()
	proxy := faultproxy.NewTCP
	flags := transportFlags(t, tr)
	if tr == "quic" {
		proxy = faultproxy.NewUDP
		flags = append(flags, "--transport.quic.max_idle_timeout_ms=1000")
	}
	p := proxy(t, "") // its target is n1's listener, once n1 has bound one
	bs := startMemClusterWith(t, 2, func(i int) []string {
		if i == 1 {
			return append([]string{"--broker.visibility=private", "--broker.peer_advertise=" + p.Addr()}, flags...)
		}
		return flags
	})
	p.SetTarget(bs[1].BrokerAddr().String())
	return bs, p
}

// privatePartition declares topic with two partitions and returns the one
// the private broker n1 owns.
func privatePartition(ctx context.Context, t *testing.T, c *client.Client, bs []*Broker, topic string) uint32 {
	t.Helper()
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	var part uint32
	testkit.Eventually(t, 5*time.Second, "a partition owned by the private broker", func() bool {
		for n := range uint32(2) {
			if p, ok := bs[0].cluster.cl.Snapshot().Partition(core.PartitionRef{Topic: topic, Partition: n}); ok && p.Node == bs[1].nodeID {
				part = n
				return true
			}
		}
		return false
	})
	return part
}

// Upstream resume, kept (core/forward/README.md#resume): the link between
// the gateway and a private owner drops while a forwarded subscription
// holds two unacknowledged deliveries. The gateway resumes the upstream
// session within the owner's grace: nothing is closed towards the client,
// the held deliveries are still settled by the client's acks (the owner
// ends with nothing in flight and redelivers nothing), and the
// subscription goes on delivering.
func TestUpstreamResumeKeepsTheSession(t *testing.T) {
	bs, proxy := gatewayBehindProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	part, send, sub := subscribeHeld(ctx, t, bs)
	send("m0")
	send("m1")
	var held []*client.Delivery
	for range 2 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	proxy.Reset() // the link drops; both brokers live on
	waitResumed(t, bs[0])
	for _, d := range held {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	send("m2")
	d, err := sub.Next(ctx)
	if err != nil || string(d.Payload) != "m2" {
		t.Fatalf("after the resume the subscription delivered %v (%v), want m2 (the held ones settled, not redelivered)", d, err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	ownerSettled(t, bs[1], "held", part)
	for _, outcome := range []string{"partly_lost", "lost"} {
		if v, _ := resumes(t, bs[0], outcome); v != 0 {
			t.Errorf("resumes with outcome %s: %v", outcome, v)
		}
	}
}

// Upstream resume, lost: an outage longer than the reconnect grace (300
// ms here, the cluster's one setting): the owner ends the session and
// requeues what it held, the gateway gives up resuming and closes the
// forwarded subscription towards the client (OwnerMoved), the client
// subscribes again, and the message the lost session held is delivered
// again.
func TestUpstreamResumeLostSession(t *testing.T) {
	bs, proxy := gatewayBehindProxy(t)
	if code, body := editRuntimeSettings(t, bs[0], func(doc map[string]any) {
		doc["connection"].(map[string]any)["reconnect_grace_ms"] = 300
		doc["routing"].(map[string]any)["upstream_connect_timeout_ms"] = 500 // a dial into the outage fails soon
	}); code != 200 {
		t.Fatalf("put settings: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "both brokers apply the grace", func() bool {
		return bs[0].settings.Current().Connection.ReconnectGraceMS == 300 && bs[1].settings.Current().Connection.ReconnectGraceMS == 300
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, send, sub := subscribeHeld(ctx, t, bs)
	send("m0")
	if d, err := sub.Next(ctx); err != nil || string(d.Payload) != "m0" {
		t.Fatalf("first delivery %v, %v", d, err)
	}
	// An outage past the owner's grace: the owner ends the session
	// meanwhile.
	proxy.Set(faultproxy.Faults{Blackhole: true})
	proxy.Reset()
	time.Sleep(time.Second) // the outage itself, not a wait for a result
	proxy.Set(faultproxy.Faults{})
	d, err := sub.Next(ctx)
	if err != nil || string(d.Payload) != "m0" {
		t.Fatalf("after the lost session: %v (%v), want m0 again", d, err)
	}
	lost, _ := resumes(t, bs[0], "lost")
	resumed, _ := resumes(t, bs[0], "resumed")
	if lost != 1 || resumed != 0 {
		t.Fatalf("fibril_forward_upstream_resumes_total: lost %v, resumed %v; want 1 and 0", lost, resumed)
	}
}

// The link between the gateway and a private owner drops twice while a
// client publishes with confirms through the gateway: publishes in flight
// at a drop fail (504 or 503), the others keep being confirmed across the
// resumes, and every publish the client saw confirmed is on the owner —
// never a confirm without the owner's.
func TestUpstreamResumeUnderConfirmedPublishing(t *testing.T) {
	bs, proxy := gatewayBehindProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	part := privatePartition(ctx, t, c, bs, "busy")
	pub := c.Publisher("busy", client.PublisherOptions{})
	var mu sync.Mutex
	confirmed := map[string]bool{}
	failed := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 { // several publishes in flight at each drop
		wg.Go(func() {
			for i := 0; i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := fmt.Sprintf("w%d-m%d", w, i)
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := pub.PublishConfirmed(pctx, client.Message{Partition: &part, Payload: []byte(m)})
				pcancel()
				mu.Lock()
				if err != nil {
					failed++
				} else {
					confirmed[m] = true
				}
				mu.Unlock()
			}
		})
	}
	for range 4 {
		time.Sleep(250 * time.Millisecond) // publishing goes on meanwhile
		proxy.Reset()
	}
	time.Sleep(250 * time.Millisecond)
	close(stop)
	wg.Wait()
	resumed, _ := resumes(t, bs[0], "resumed")
	t.Logf("%d confirmed, %d failed, %v resumes", len(confirmed), failed, resumed)
	if resumed < 2 || len(confirmed) < 100 {
		t.Fatalf("%v resumes, %d confirmed: the publishing did not go on across the drops", resumed, len(confirmed))
	}
	consumeConfirmed(ctx, t, c, "busy", client.SubscribeOptions{Partitions: []uint32{part}, Prefetch: 64}, confirmed)
}

// Upstream resume over QUIC: the path between the gateway and the owner
// goes silent for longer than QUIC's idle timeout, so the QUIC connection
// (and the upstream stream on it) dies at both ends. Once the path is back,
// within the owner's grace, the gateway resumes the session on a new QUIC
// connection: the held delivery is settled by the client's ack after it,
// and the subscription goes on.
func TestUpstreamResumeOverQUIC(t *testing.T) {
	bs, proxy := gatewayBehindProxyOver(t, "quic")
	// No followers: otherwise n1 dials n0 directly to follow n0's
	// partition, and the two brokers' one QUIC connection may be that
	// one, which does not pass the proxy.
	setTargetFollowers(t, bs, bs[0], 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	part, send, sub := subscribeHeld(ctx, t, bs)
	send("m0")
	held, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Set(faultproxy.Faults{Blackhole: true})
	time.Sleep(2 * time.Second) // the outage: past QUIC's 1 s idle timeout, within the 5 s grace
	proxy.Set(faultproxy.Faults{})
	waitResumed(t, bs[0])
	if err := held.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	send("m1")
	deliverAcked(ctx, t, sub, "m1") // m0 settled, not redelivered
	ownerSettled(t, bs[1], "held", part)
}

// A resume through a path that lost the gateway's connection but left the
// owner's end open (a relay that keeps its upstream socket): the owner
// sees the resumed connection while it still holds the old one, which
// only its idle timeout ends, 15 s later. The resumed session works at
// once, and the old connection's end leaves it alone: after it, the
// subscription still delivers and settles.
func TestUpstreamResumeWhileTheOwnerHoldsTheOldConnection(t *testing.T) {
	bs, proxy := gatewayBehindProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	part, send, sub := subscribeHeld(ctx, t, bs)
	send("m0")
	held, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idle0, _ := metricstest.Lookup(t, bs[1].registry, "fibril_tcp_errors_total", map[string]string{"reason": "idle_timeout"})
	proxy.ResetAOnly()
	waitResumed(t, bs[0])
	if err := held.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	send("m1")
	deliverAcked(ctx, t, sub, "m1")
	testkit.Eventually(t, 30*time.Second, "the owner's idle timeout ending the old connection", func() bool {
		v, _ := metricstest.Lookup(t, bs[1].registry, "fibril_tcp_errors_total", map[string]string{"reason": "idle_timeout"})
		return v > idle0
	})
	send("m2")
	deliverAcked(ctx, t, sub, "m2")
	ownerSettled(t, bs[1], "held", part)
	if v, _ := resumes(t, bs[0], "resumed"); v != 1 {
		t.Fatalf("%v resumes: the old connection's end disturbed the resumed session", v)
	}
}

// A client that resumes its own session on the gateway keeps its
// forwarded subscription (core/forward/README.md#client-resume): the
// client's connection to the gateway is reset while it holds a delivery
// from a privately owned partition; the Go client resumes its session,
// the forwarded subscription is kept (no second SUBSCRIBE goes up), the
// held delivery's ACK settles it on the owner, and what was published
// meanwhile is delivered.
func TestClientResumeOnTheGatewayKeepsForwardedSubscriptions(t *testing.T) {
	// The gateway advertises the proxy, so the client reaches it for the
	// private partition through the proxy only (its peers reach it so too).
	proxy := faultproxy.NewTCP(t, "")
	bs := startMemClusterWith(t, 2, func(i int) []string {
		if i == 1 {
			return []string{"--broker.visibility=private"}
		}
		return []string{"--broker.listener.advertise=" + proxy.Addr()}
	})
	proxy.SetTarget(bs[0].BrokerAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := dialClient(ctx, t, bs[0])
	part := privatePartition(ctx, t, admin, bs, "held")
	c, err := client.Dial(ctx, client.Options{Addrs: []string{proxy.Addr()}, Username: "fibril", Password: "fibril", Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
		if a != proxy.Addr() {
			t.Errorf("the client dialled %s, not the proxy", a)
		}
		return loopbackOnly(t)(ctx, network, a)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pub := admin.Publisher("held", client.PublisherOptions{})
	send := confirmedTo(ctx, t, pub, part)
	sub, err := c.Subscribe(ctx, "held", client.SubscribeOptions{Partitions: []uint32{part}, Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	send("m0")
	held, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subscribes := func() float64 {
		v, _ := metricstest.Lookup(t, bs[0].registry, "fibril_forward_requests_total", map[string]string{"op": "SUBSCRIBE", "outcome": "ok"})
		return v
	}
	before := subscribes()
	if before != 1 {
		t.Fatalf("forwarded SUBSCRIBEs counted: %v, want 1", before)
	}
	resumed0, _ := metricstest.Lookup(t, bs[0].registry, "fibril_tcp_resume_accepted_total", nil)
	proxy.Reset()
	send("m1") // while the client is away
	d, err := sub.Next(ctx)
	if err != nil || string(d.Payload) != "m1" {
		t.Fatalf("after the resume: %v (%v), want m1", d, err)
	}
	if err := held.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	ownerSettled(t, bs[1], "held", part)
	if after := subscribes(); after != before {
		t.Fatalf("%v forwarded SUBSCRIBEs after the resume: the subscription was not kept", after-before)
	}
	if v, _ := metricstest.Lookup(t, bs[0].registry, "fibril_tcp_resume_accepted_total", nil); v <= resumed0 {
		t.Fatal("the client did not resume its session on the gateway: the test proves nothing")
	}
}

// subscribeHeld declares queue "held" through the gateway n0 and
// subscribes a client of n0 to its partition the private broker n1 owns;
// send publishes a payload there with a confirm.
func subscribeHeld(ctx context.Context, t *testing.T, bs []*Broker) (part uint32, send func(string), sub *client.Subscription) {
	t.Helper()
	c := dialClient(ctx, t, bs[0])
	part = privatePartition(ctx, t, c, bs, "held")
	send = confirmedTo(ctx, t, c.Publisher("held", client.PublisherOptions{}), part)
	sub, err := c.Subscribe(ctx, "held", client.SubscribeOptions{Partitions: []uint32{part}, Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	return part, send, sub
}

// confirmedTo returns a function that publishes a payload with a confirm
// to partition part through pub, failing the test on an error.
func confirmedTo(ctx context.Context, t *testing.T, pub *client.Publisher, part uint32) func(string) {
	return func(m string) {
		t.Helper()
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &part, Payload: []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
}

// ownerSettled waits until partition part of topic on b has nothing ready
// and nothing in flight: every message was delivered and settled.
func ownerSettled(t *testing.T, b *Broker, topic string, part uint32) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "nothing in flight on the owner", func() bool {
		for _, pd := range b.queues.Depths() {
			if pd.Key == (queue.Key{Topic: topic}) && pd.Partition == part {
				return pd.Inflight == 0 && pd.Ready == 0
			}
		}
		return false
	})
}

// resumes is fibril_forward_upstream_resumes_total{outcome} on b.
func resumes(t *testing.T, b *Broker, outcome string) (float64, bool) {
	return metricstest.Lookup(t, b.registry, "fibril_forward_upstream_resumes_total", map[string]string{"outcome": outcome})
}

// waitResumed waits until b, the gateway, resumed one upstream session.
func waitResumed(t *testing.T, b *Broker) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the upstream session resumed", func() bool {
		v, _ := resumes(t, b, "resumed")
		return v == 1
	})
}

// deliverAcked takes sub's next delivery, which must be want, and acks it.
func deliverAcked(ctx context.Context, t *testing.T, sub *client.Subscription, want string) {
	t.Helper()
	d, err := sub.Next(ctx)
	if err != nil || string(d.Payload) != want {
		t.Fatalf("delivered %v (%v), want %s", d, err, want)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}
