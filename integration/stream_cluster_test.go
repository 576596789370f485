package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// The seed's fourth scenario, on real processes: replicated streams
// declared through the public broker are stored as streams on every node
// (each holds every partition, as owner or follower); each partition is
// published to and read through the public broker whoever owns it; then
// the private owner of one is killed, an in-sync follower takes it, and
// through the public broker again the partition takes confirmed publishes
// with its offsets going on, and a durable name continues from the cursor
// it committed before the failover (S-85, S-86). Over both transports.
func TestReplicatedStreamsThroughTheGateway(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			pc := startPrivateCluster(t, tr)
			c := pc.client(t)
			const parts = 3
			if _, err := c.DeclareStream(ctxT(t, opTimeout), client.StreamSpec{Topic: "events", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			owners := pc.placed(pc.nodes[0], "events", parts)
			testkit.EventuallyReport(t, waitTimeout, func() bool {
				for p := range uint32(parts) {
					if rs := replicaSetsOf(t, pc.nodes[0], "events")[p]; len(rs.Followers) != 2 {
						return false
					}
				}
				return true
			}, func() string {
				return fmt.Sprintf("two followers per partition: %+v", replicaSetsOf(t, pc.nodes[0], "events"))
			})
			pub := c.Publisher("events", client.PublisherOptions{})
			publish := func(p uint32, i int) (uint64, error) {
				return pub.PublishConfirmed(ctxT(t, 3*time.Second), client.Message{Partition: &p, Payload: []byte(fmt.Sprintf("p%d-m%d", p, i))})
			}
			const first = 20
			for p := range uint32(parts) {
				for i := range first {
					if off, err := publish(p, i); err != nil || off != uint64(i) {
						t.Fatalf("publish to events#%d (owner %s) m%d: offset %d, %v", p, owners[p], i, off, err)
					}
				}
			}
			// Every node stores every partition as a stream: its own log
			// as owner, a replica as follower.
			for _, nd := range pc.nodes {
				for p := range uint32(parts) {
					dir := filepath.Join(nd.DataDir, "queues", "s", "events", strconv.Itoa(int(p)))
					testkit.Eventually(t, waitTimeout, nd.id+" storing "+dir, func() bool {
						logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
						if len(logs) == 0 {
							return false
						}
						st, err := os.Stat(logs[0])
						return err == nil && st.Size() > 0
					})
				}
			}
			// Read each partition through the public broker with a durable
			// name; acknowledge the first half.
			var victimPart uint32 = parts
			for p := range uint32(parts) {
				sub, err := c.SubscribeStream(ctxT(t, opTimeout), "events", client.StreamOptions{DurableName: "audit", Partitions: []uint32{p}})
				if err != nil {
					t.Fatal(err)
				}
				for i := range first {
					d, err := sub.Next(ctxT(t, waitTimeout))
					if err != nil {
						t.Fatalf("events#%d delivery %d: %v", p, i, err)
					}
					if want := fmt.Sprintf("p%d-m%d", p, i); string(d.Payload) != want {
						t.Fatalf("events#%d delivery %d = %s, want %s", p, i, d.Payload, want)
					}
					if i < first/2 {
						if err := d.Ack(ctxT(t, opTimeout)); err != nil {
							t.Fatal(err)
						}
					}
				}
				_ = sub.Close()
				if owners[p] != pc.nodes[0].id && victimPart == parts {
					victimPart = p
				}
			}
			if victimPart == parts {
				t.Fatalf("no partition is owned by a private broker: %v", owners)
			}
			// The cursor the acks committed (S-74: 'c', next = 10, the name)
			// reaches the followers' state journals with the records.
			entry := []byte("c\x0aaudit")
			for _, f := range replicaSetsOf(t, pc.nodes[0], "events")[victimPart].Followers {
				nd := pc.node(f.Node)
				dir := filepath.Join(nd.DataDir, "queues", "s", "events", strconv.Itoa(int(victimPart)))
				testkit.Eventually(t, waitTimeout, nd.id+" holding the cursor", func() bool {
					journals, _ := filepath.Glob(filepath.Join(dir, "state.*.jnl"))
					for _, j := range journals {
						if b, err := os.ReadFile(j); err == nil && bytes.Contains(b, entry) {
							return true
						}
					}
					return false
				})
			}
			victim := pc.node(owners[victimPart])
			t.Logf("killing %s, the owner of events#%d", victim.id, victimPart)
			victim.kill()
			var off uint64
			testkit.Eventually(t, waitTimeout, "a confirmed publish to the failed-over partition", func() bool {
				var err error
				off, err = publish(victimPart, first)
				return err == nil
			})
			if off != first {
				t.Fatalf("the first record after the failover has offset %d, want %d", off, first)
			}
			if now := pc.ownerOf(pc.nodes[0], "events", victimPart); now == victim.id || now == "" {
				t.Fatalf("events#%d still owned by %q after the kill", victimPart, now)
			}
			sub, err := c.SubscribeStream(ctxT(t, opTimeout), "events", client.StreamOptions{DurableName: "audit", Partitions: []uint32{victimPart}})
			if err != nil {
				t.Fatal(err)
			}
			for i := first / 2; i <= first; i++ {
				d, err := sub.Next(ctxT(t, waitTimeout))
				if err != nil {
					t.Fatalf("after the failover, delivery of m%d: %v", i, err)
				}
				if want := fmt.Sprintf("p%d-m%d", victimPart, i); string(d.Payload) != want {
					t.Fatalf("after the failover the durable name got %s, want %s (its cursor was at %d)", d.Payload, want, first/2)
				}
			}
		})
	}
}
