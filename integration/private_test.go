package integration

// Private nodes and internal routing with real broker processes
// on embedded raft: one public broker and two private ones. The client
// knows only the public broker; the private brokers' client addresses
// (their listeners and the advertise entries they are told to keep to
// themselves) make the client's dialer fail the test if it ever tries
// them.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// Confirmed publish and consume through privately owned
// partitions, with a client that only ever reaches the public broker; then
// a private owner is killed (its partitions fail over to followers, with
// retryable errors meanwhile) and restarted (nothing confirmed is lost).
// Run over tcp and quic.
func TestPrivateNodesThroughTheGateway(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			pc := startPrivateCluster(t, tr)
			c := pc.client(t)
			const parts = 6
			if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			owners := pc.placed(pc.nodes[0], "orders", parts)
			privateOwned := 0
			for _, o := range owners {
				if o != "node-1" {
					privateOwned++
				}
			}
			if privateOwned == 0 {
				t.Fatal("the private brokers own nothing; the test proves nothing")
			}
			confirmed := map[string]bool{}
			for i := range 3 * parts {
				p := uint32(i % parts)
				payload := fmt.Sprintf("m%d", i)
				publish(t, c, "orders", client.Message{Partition: &p, Payload: []byte(payload)})
				confirmed[payload] = true
			}
			sub := subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 8})
			for len(confirmed) > 0 {
				d := next(t, sub, waitTimeout)
				delete(confirmed, string(d.Payload))
				ack(t, d)
			}
			sub.Close()
			// The wire protocol has no unsubscribe: the subscription ends
			// with its connection, which closes the upstream sessions in
			// order (the owners requeue what they still held).
			c.Close()
			c = pc.client(t)

			// Kill a private owner: its partitions fail over to in-sync
			// followers (the default replication), and every partition
			// takes confirmed publishes through the gateway again; until
			// then errors are retryable (503/504).
			victim := pc.node("node-2")
			victim.kill()
			want := map[string]bool{}
			for p := range uint32(parts) {
				payload := fmt.Sprint("after-kill-", p)
				publishRetrying(t, c, p, payload, 4*testTTL+waitTimeout)
				want[payload] = true
			}
			for p, o := range owners {
				if now := pc.ownerOf(pc.nodes[0], "orders", p); o == "node-2" && now == "node-2" {
					t.Fatalf("partition %d took a confirmed publish while still assigned to the dead node-2", p)
				}
			}
			// Restart it: it rejoins as a follower, and everything
			// confirmed is still there.
			pc.restart(victim)
			for p := range uint32(parts) {
				payload := fmt.Sprint("after-restart-", p)
				publish(t, c, "orders", client.Message{Partition: &p, Payload: []byte(payload)})
				want[payload] = true
			}
			sub = subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 8})
			for len(want) > 0 {
				d := next(t, sub, waitTimeout)
				delete(want, string(d.Payload))
				ack(t, d)
			}
		})
	}
}

// The public broker (the gateway) is killed while its
// client holds unacknowledged deliveries of privately owned partitions. The
// owners release the gateway's upstream sessions — at once where the
// kernel's close is orderly (tcp), else after the transport's idle timeout
// plus the reconnect grace (quic) — so the held messages are delivered
// again; the client reconnects to the restarted gateway, resubscribes, and
// gets every message. Over tcp and quic.
func TestGatewayKilledHeldMessagesRedelivered(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			gatewayRestartRedelivers(t, tr, "held", func(c *client.Client) *client.Subscription {
				return subscribe(t, c, "held", client.SubscribeOptions{Prefetch: 8})
			})
		})
	}
}

// gatewayRestartRedelivers is the gateway-restart scenario over transport
// tr: a queue topic whose privately owned partitions get two messages
// each, a subscription made by sub holding one delivery unacknowledged,
// the public broker killed and restarted; every message — the held one
// too — must then be delivered through the restarted gateway.
func gatewayRestartRedelivers(t *testing.T, tr, topic string, sub func(c *client.Client) *client.Subscription) {
	t.Helper()
	pc := startPrivateCluster(t, tr, "--transport.quic.max_idle_timeout_ms=2000",
		"--runtime_seed.connection.reconnect_grace_ms=2000")
	c := pc.client(t)
	const parts = 6
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	owners := pc.placed(pc.nodes[0], topic, parts)
	want := map[string]bool{}
	for i := range 2 * parts {
		p := uint32(i % parts)
		if owners[p] == "node-1" {
			continue // only privately owned partitions: the gateway holds nothing of its own
		}
		payload := fmt.Sprintf("%s-%d", topic, i)
		publish(t, c, topic, client.Message{Partition: &p, Payload: []byte(payload)})
		want[payload] = true
	}
	if len(want) == 0 {
		t.Fatal("the private brokers own nothing; the test proves nothing")
	}
	s := sub(c)
	held := next(t, s, waitTimeout) // delivered, never acknowledged
	pc.nodes[0].kill()
	pc.restart(pc.nodes[0])
	deadline := time.Now().Add(2 * waitTimeout)
	for len(want) > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		d, err := s.Next(ctx)
		cancel()
		if err != nil {
			continue // the supervisor is reconnecting and resubscribing
		}
		delete(want, string(d.Payload))
		_ = d.Ack(ctxT(t, opTimeout)) // a stale delivery of the old connection fails here; fine
	}
	if len(want) > 0 {
		t.Fatalf("never delivered after the gateway restart: %v (held before the kill: %s)", want, held.Payload)
	}
}

// A slow consumer holds its prefetch of a privately owned
// partition through the gateway for 60 s without acknowledging, while
// other sessions keep publishing and consuming through the same gateway.
// Its upstream session stays up the whole time (heartbeats flow while
// nothing else does), it never gets more than its prefetch, and once it
// acknowledges, its deliveries resume. Over tcp and quic, in parallel.
func TestSlowConsumerThroughTheGateway(t *testing.T) {
	const hold = 60 * time.Second
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			// Leases longer than the hold: what is held stays held.
			pc := startPrivateCluster(t, tr, "--runtime_seed.delivery.inflight_ttl_ms=180000")
			setup := pc.client(t)
			var slowP, fastP uint32
			for _, q := range []string{"slow", "fast"} {
				if _, err := setup.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: q, Partitions: 3}); err != nil {
					t.Fatal(err)
				}
			}
			// A privately owned partition of each queue.
			pick := func(topic string) uint32 {
				for p, o := range pc.placed(pc.nodes[0], topic, 3) {
					if o != "node-1" {
						return p
					}
				}
				t.Fatalf("no privately owned partition of %s", topic)
				return 0
			}
			slowP, fastP = pick("slow"), pick("fast")
			for i := range 12 {
				publish(t, setup, "slow", client.Message{Partition: &slowP, Payload: []byte(fmt.Sprint("s", i))})
			}
			slow := pc.client(t)
			ssub := subscribe(t, slow, "slow", client.SubscribeOptions{Prefetch: 4})
			var held []*client.Delivery
			for range 4 {
				held = append(held, next(t, ssub, waitTimeout))
			}
			// Flow elsewhere while it holds: publish and consume "fast".
			fast := pc.client(t)
			fsub := subscribe(t, fast, "fast", client.SubscribeOptions{Prefetch: 16})
			end := time.Now().Add(hold)
			sent := 0
			for round := 0; time.Now().Before(end) && round < 1000; round++ {
				for range 10 {
					publish(t, setup, "fast", client.Message{Partition: &fastP, Payload: []byte(fmt.Sprint("f", sent))})
					sent++
				}
				for range 10 {
					ack(t, next(t, fsub, waitTimeout))
				}
				expectNone(t, ssub, 10*time.Millisecond) // never beyond its prefetch
				time.Sleep(2 * time.Second)
			}
			if sent < 100 {
				t.Fatalf("only %d messages flowed next to the slow consumer", sent)
			}
			// The slow consumer acknowledges: the rest of its messages come.
			for _, d := range held {
				ack(t, d)
			}
			for range 8 {
				ack(t, next(t, ssub, waitTimeout))
			}
		})
	}
}

// publishRetrying publishes payload to partition p of orders with a
// confirm until it is confirmed, within limit; every failure on the way
// must be retryable.
func publishRetrying(t *testing.T, c *client.Client, p uint32, payload string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Publisher("orders", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(payload)})
		cancel()
		if err == nil {
			return
		}
		if !client.Retryable(err) {
			t.Fatalf("publish to partition %d: %v, want a retryable error", p, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d took no confirmed publish within %v: %v", p, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
