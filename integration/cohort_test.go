package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// The seed's second scenario on real processes: an exclusive consumer
// group through the public broker over privately owned partitions. The
// public broker is killed and restarted; the client reconnects, subscribes
// again as the same member, and the message its old session held — never
// acknowledged — is delivered again, with every other message. Over tcp
// and quic.
func TestExclusiveGroupSurvivesAGatewayRestart(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			pc := startPrivateCluster(t, tr, "--transport.quic.max_idle_timeout_ms=2000",
				"--runtime_seed.connection.reconnect_grace_ms=2000")
			c := pc.client(t)
			const parts = 6
			if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "jobs", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			owners := pc.placed(pc.nodes[0], "jobs", parts)
			want := map[string]bool{}
			for i := range 2 * parts {
				p := uint32(i % parts)
				if owners[p] == "node-1" {
					continue // only privately owned partitions
				}
				payload := fmt.Sprintf("j%d", i)
				publish(t, c, "jobs", client.Message{Partition: &p, Payload: []byte(payload)})
				want[payload] = true
			}
			if len(want) == 0 {
				t.Fatal("the private brokers own nothing; the test proves nothing")
			}
			assigned := make(chan client.Assignment, 64)
			sub := subscribe(t, c, "jobs", client.SubscribeOptions{Prefetch: 8, ConsumerGroup: "workers",
				OnAssignment: func(a client.Assignment) {
					select {
					case assigned <- a:
					default:
					}
				}})
			select {
			case <-assigned:
			case <-time.After(waitTimeout):
				t.Fatal("no ASSIGNMENT_CHANGED after joining the group")
			}
			held := next(t, sub, waitTimeout) // delivered, never acknowledged
			pc.nodes[0].kill()
			pc.restart(pc.nodes[0])
			deadline := time.Now().Add(2 * waitTimeout)
			heldAgain := false
			for len(want) > 0 && time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				d, err := sub.Next(ctx)
				cancel()
				if err != nil {
					continue // the supervisor is reconnecting and resubscribing
				}
				if string(d.Payload) == string(held.Payload) {
					heldAgain = true
				}
				delete(want, string(d.Payload))
				_ = d.Ack(ctxT(t, opTimeout)) // a stale delivery of the old connection fails here; fine
			}
			if len(want) > 0 || !heldAgain {
				t.Fatalf("after the gateway restart: never delivered %v; the held %s delivered again: %v", want, held.Payload, heldAgain)
			}
		})
	}
}
