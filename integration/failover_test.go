package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// streamLedger is what a failover scenario's client saw: payloads
// confirmed, delivered (and how often), and publishes whose outcome it
// does not know.
type streamLedger struct {
	mu        sync.Mutex
	confirmed map[string]bool
	delivered map[string]int
	failed    int // publishes answered with an error (the message may be stored)
}

func newLedger() *streamLedger {
	return &streamLedger{confirmed: map[string]bool{}, delivered: map[string]int{}}
}

func (l *streamLedger) counts() (confirmed, missing, duplicates, unconfirmedDelivered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.confirmed {
		if l.delivered[p] == 0 {
			missing++
		}
	}
	for p, n := range l.delivered {
		duplicates += n - 1
		if !l.confirmed[p] {
			unconfirmedDelivered++
		}
	}
	return len(l.confirmed), missing, duplicates, unconfirmedDelivered
}

// The seed note's scenario: one public and two private brokers; a client
// of the public broker publishes with confirms to a privately owned
// partition and consumes all the while. The private owner is killed
// (kill -9) mid-stream: the partition fails over to another broker and
// the client keeps publishing with confirms and consuming through the
// public one. The killed broker is restarted and waited for until it is
// an in-sync follower again; then, while a private broker owns the
// partition, its owner is killed again (at most four kills; one broker
// down at a time, so the three voters keep a quorum). Which broker takes
// the partition is the controller's choice (the highest tail, then the
// lightest load); the public broker, the client's only way in, is never
// killed, so the scenario ends when it owns the partition. Every message the client saw confirmed is
// delivered; duplicates (redeliveries of unsettled messages) are counted
// apart. Over tcp and quic.
func TestPrivateOwnerFailsOverMidStream(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			pc := startPrivateCluster(t, tr)
			c := pc.client(t)
			const parts = 3
			if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			owners := pc.placed(pc.nodes[0], "orders", parts)
			part := uint32(parts)
			for p, o := range owners {
				if o != "node-1" && (part == parts || p < part) {
					part = p
				}
			}
			if part == parts {
				t.Fatal("the private brokers own nothing; the test proves nothing")
			}
			led := newLedger()
			stop := make(chan struct{})
			produced := make(chan struct{})
			go func() { // the producer: bounded in count and time
				defer close(produced)
				pub := c.Publisher("orders", client.PublisherOptions{})
				deadline := time.Now().Add(3 * time.Minute)
				for i := 0; i < 200000 && time.Now().Before(deadline); i++ {
					select {
					case <-stop:
						return
					default:
					}
					payload := fmt.Sprint("m", i)
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := pub.PublishConfirmed(ctx, client.Message{Partition: &part, Payload: []byte(payload)})
					cancel()
					led.mu.Lock()
					if err == nil {
						led.confirmed[payload] = true
					} else {
						led.failed++
					}
					led.mu.Unlock()
					if err != nil {
						if !client.Retryable(err) {
							t.Errorf("publish %s: %v, want a retryable error", payload, err)
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}()
			sub := subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 32})
			consumed := make(chan struct{})
			go func() { // the consumer: until the subscription is closed
				defer close(consumed)
				for {
					d, err := sub.Next(context.Background())
					if err != nil {
						return
					}
					led.mu.Lock()
					led.delivered[string(d.Payload)]++
					led.mu.Unlock()
					_ = d.Ack(context.Background()) // fire-and-forget; a lost ack redelivers
				}
			}()
			confirmedAfter := func(n int, what string) {
				t.Helper()
				led.mu.Lock()
				base := len(led.confirmed)
				led.mu.Unlock()
				testkit.Eventually(t, 4*testTTL+2*waitTimeout, what, func() bool {
					led.mu.Lock()
					defer led.mu.Unlock()
					return len(led.confirmed) >= base+n
				})
			}
			confirmedAfter(200, "200 confirmed publishes before the first kill")
			seen := map[string]bool{owners[part]: true}
			for kill := 1; kill <= 4 && !(seen["node-1"] && len(seen) == 3); kill++ {
				owner := pc.ownerOf(pc.nodes[0], "orders", part)
				if owner == "node-1" {
					break // the public broker is the client's way in; the scenario ends with it owning
				}
				victim := pc.node(owner)
				killed := time.Now()
				victim.kill()
				confirmedAfter(100, fmt.Sprintf("100 confirmed publishes after kill %d (of %s)", kill, owner))
				now := pc.ownerOf(pc.nodes[0], "orders", part)
				t.Logf("kill %d: %s → %s; 100 confirms %v after the kill", kill, owner, now, time.Since(killed).Round(time.Millisecond))
				if now == owner {
					t.Fatalf("the partition took confirmed publishes while still assigned to the dead %s", owner)
				}
				seen[now] = true
				pc.restart(victim)
				testkit.Eventually(t, 2*waitTimeout, victim.id+" in sync again", func() bool {
					for _, p := range pc.topology(pc.nodes[0]).Partitions {
						if p.Topic == "orders" && p.Partition == part {
							return slices.Contains(p.InSync, victim.id)
						}
					}
					return false
				})
				confirmedAfter(50, "50 confirmed publishes with "+victim.id+" back")
			}
			close(stop)
			<-produced
			// Everything confirmed is delivered (within a bounded wait).
			testkit.EventuallyReport(t, 2*waitTimeout, func() bool {
				_, missing, _, _ := led.counts()
				return missing == 0
			}, func() string {
				n, missing, _, _ := led.counts()
				return fmt.Sprintf("%d of %d confirmed messages not delivered", missing, n)
			})
			sub.Close()
			<-consumed
			n, missing, dups, extra := led.counts()
			t.Logf("owners %v; confirmed %d, failed publishes %d, delivered %d distinct, lost %d, duplicates %d, delivered without a confirm %d",
				keys(seen), n, led.failed, len(led.delivered), missing, dups, extra)
			if missing > 0 {
				t.Errorf("%d confirmed messages lost", missing)
			}
			if len(seen) < 2 {
				t.Errorf("the partition never failed over: owners %v", keys(seen))
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
