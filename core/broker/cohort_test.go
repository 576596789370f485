package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// An exclusive consumer group through the gateway, with the Go client,
// over privately owned partitions (S-87 … S-98): every partition delivers
// to one member at a time, a member that joins takes its share, and when
// it leaves the other takes everything again — over both transports.
func TestExclusiveGroupThroughTheGateway(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			bs, c := startPrivateCluster(t, 3, transportFlags(t, tr)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const parts = 3
			if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			notices := map[string]int{}
			note := func(who string) func(client.Assignment) {
				return func(a client.Assignment) {
					mu.Lock()
					notices[who]++
					mu.Unlock()
				}
			}
			subA, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{ConsumerGroup: "g", Prefetch: 16, OnAssignment: note("a")})
			if err != nil {
				t.Fatal(err)
			}
			pub := c.Publisher("jobs", client.PublisherOptions{})
			send := func(n int, tag string) {
				t.Helper()
				for i := range n {
					p := uint32(i % parts)
					if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(fmt.Sprint(tag, i))}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// take reads n deliveries from the subscriptions, acking each,
			// and returns which partitions each member got.
			take := func(n int, subs map[string]*client.Subscription) map[string]map[uint32]bool {
				t.Helper()
				got := map[string]map[uint32]bool{}
				ch := make(chan [2]any, n)
				sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
				defer scancel()
				var wg sync.WaitGroup
				for who, s := range subs {
					wg.Go(func() {
						for {
							d, err := s.Next(sctx)
							if err != nil {
								return
							}
							_ = d.Ack(sctx)
							ch <- [2]any{who, d.Partition}
						}
					})
				}
				for range n {
					select {
					case x := <-ch:
						who, p := x[0].(string), x[1].(uint32)
						if got[who] == nil {
							got[who] = map[uint32]bool{}
						}
						got[who][p] = true
					case <-sctx.Done():
						t.Fatalf("only some of %d deliveries came: %v", n, got)
					}
				}
				scancel()
				wg.Wait()
				return got
			}
			send(9, "a-only-")
			if got := take(9, map[string]*client.Subscription{"a": subA}); len(got["a"]) != parts {
				t.Fatalf("the only member got partitions %v", got)
			}

			c2 := dialClient(ctx, t, bs[0])
			subB, err := c2.Subscribe(ctx, "jobs", client.SubscribeOptions{ConsumerGroup: "g", Prefetch: 16, OnAssignment: note("b")})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "both members told their assignments", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return notices["a"] > 0 && notices["b"] > 0
			})
			send(30, "both-")
			got := take(30, map[string]*client.Subscription{"a": subA, "b": subB})
			if len(got["a"]) == 0 || len(got["b"]) == 0 || len(got["a"])+len(got["b"]) != parts {
				t.Fatalf("with two members, partitions by member: %v (each partition to exactly one, both busy)", got)
			}
			c2.Close() // b leaves: its upstream sessions end, and with them its membership
			send(9, "a-again-")
			if got := take(9, map[string]*client.Subscription{"a": subA}); len(got["a"]) != parts {
				t.Fatalf("after b left, a got partitions %v", got)
			}
		})
	}
}
