package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
)

// In a cluster of three, each partition's two followers hold its owner's
// records and settlements: published and acknowledged through any broker,
// replicated over the brokers' own @node connections.
func TestClusterFollowersReplicateTheOwner(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ref := core.PartitionRef{Topic: "orders"}
	var owner *Broker
	testkit.Eventually(t, 10*time.Second, "the partition to get an owner and two followers", func() bool {
		p, ok := bs[0].cluster.cl.Snapshot().Partition(ref)
		if !ok || !p.Placed() || len(p.Followers) != 2 {
			return false
		}
		for _, b := range bs {
			if b.nodeID == p.Node {
				owner = b
			}
		}
		return owner != nil
	})
	pub := c.Publisher("orders", client.PublisherOptions{})
	const total = 200
	for i := range total {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for acked < 50 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	sub.Close()
	qp, err := owner.queues.Partition(queue.Key{Topic: "orders"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	olog, err := qp.ReplicationLog()
	if err != nil {
		t.Fatal(err)
	}
	if h := olog.Epochs(); len(h) == 0 || h[0].Start != 0 {
		t.Fatalf("the owner's epoch history %v: the first publish recorded no epoch", h)
	}
	for _, b := range bs {
		if b == owner {
			continue
		}
		testkit.EventuallyReport(t, 20*time.Second, func() bool {
			rep := b.cluster.followers.replica(ref)
			if rep == nil {
				return false
			}
			_, next := rep.Bounds()
			if next != total {
				return false
			}
			for off := range uint64(total) {
				if rep.IsSettled(off) != olog.IsSettled(off) {
					return false
				}
			}
			return true
		}, func() string {
			rep := b.cluster.followers.replica(ref)
			if rep == nil {
				return fmt.Sprintf("%s runs no replica of %s", b.nodeID, ref)
			}
			_, next := rep.Bounds()
			return fmt.Sprintf("%s's replica holds %d of %d records; settled frontier %d, owner's %d", b.nodeID, next, total, rep.SettledFrontier(), olog.SettledFrontier())
		})
	}
}
