package integration

import (
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
			gatewayRestartRedelivers(t, tr, "jobs", func(c *client.Client) *client.Subscription {
				assigned := make(chan client.Assignment, 64)
				s := subscribe(t, c, "jobs", client.SubscribeOptions{Prefetch: 8, ConsumerGroup: "workers",
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
				return s
			})
		})
	}
}
