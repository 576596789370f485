package broker

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/testkit"
)

// A durable stream in a cluster (S-85, S-86): a client of a non-owner is
// sent to the owner; the followers copy the records and the durable
// cursors; when the owner leaves, an in-sync follower takes the partition,
// publishes are confirmed again with the offsets going on, and a durable
// subscription continues from the cursor committed before the failover.
func TestClusterStreamReplicatesAndFailsOver(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c0 := dialClient(ctx, t, bs[0])
	if _, err := c0.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ref := core.PartitionRef{Topic: "events"}
	owner, followers := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, followers[0])
	pub := c.Publisher("events", client.PublisherOptions{})
	var p0 uint32
	publish := func(ctx context.Context, i int) (uint64, error) {
		return pub.PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte(fmt.Sprint("m", i))})
	}
	for i := range 30 {
		if off, err := publish(ctx, i); err != nil || off != uint64(i) {
			t.Fatalf("publish m%d: offset %d, %v", i, off, err)
		}
	}
	for _, f := range followers {
		testkit.Eventually(t, 10*time.Second, "the follower to hold the 30 records", func() bool {
			rep := f.cluster.followers.replica(ref)
			if rep == nil {
				return false
			}
			_, next := rep.Bounds()
			return next == 30
		})
	}

	sub, err := c.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "billing", Partitions: []uint32{0}, Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(d.Payload), fmt.Sprint("m", i); got != want {
			t.Fatalf("delivery %d = %s, want %s", i, got, want)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The cursor entry (S-74: 'c', next = 10, the name) reaches both
	// followers' state journals through the event feed.
	entry := []byte("c\x0abilling")
	for _, f := range followers {
		testkit.Eventually(t, 10*time.Second, "the follower to hold the cursor at 10", func() bool {
			rep := f.cluster.followers.replica(ref)
			found := false
			if rep != nil {
				_ = rep.ReplayState(func(e []byte) error {
					found = found || bytes.Contains(e, entry)
					return nil
				})
			}
			return found
		})
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}

	before, _ := owner.cluster.cl.Snapshot().Partition(ref)
	if err := owner.Shutdown(); err != nil {
		t.Fatal(err)
	}
	var off uint64
	testkit.Eventually(t, 20*time.Second, "a confirmed stream publish after the owner left", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		var err error
		off, err = publish(pctx, 30)
		return err == nil
	})
	if off != 30 {
		t.Fatalf("the first record after the failover has offset %d, want 30", off)
	}
	p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
	if p.Node == owner.nodeID || p.Epoch <= before.Epoch {
		t.Fatalf("after the failover: owner %s epoch %d (before: %s, epoch %d)", p.Node, p.Epoch, before.Node, before.Epoch)
	}
	c2 := dialClient(ctx, t, followers[1])
	sub, err = c2.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "billing", Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 10; i <= 30; i++ {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(d.Payload), fmt.Sprint("m", i); got != want {
			t.Fatalf("after the failover the durable subscription got %s, want %s (its cursor was at 10)", got, want)
		}
	}
}

// Express tiers stay on their owner (S-85): an ephemeral stream's
// partitions get no followers, while a durable one's declaration can ask
// for fewer than the cluster's target.
func TestClusterStreamFollowersByTier(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "ticks", Partitions: 1, Durability: client.DurabilityEphemeral}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "audit", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	var ticks, audit cluster.Partition
	testkit.Eventually(t, 10*time.Second, "both streams placed, audit with its one follower", func() bool {
		snap := bs[0].cluster.cl.Snapshot()
		var ok1, ok2 bool
		ticks, ok1 = snap.Partition(core.PartitionRef{Topic: "ticks"})
		audit, ok2 = snap.Partition(core.PartitionRef{Topic: "audit"})
		return ok1 && ok2 && ticks.Placed() && audit.Placed() && len(audit.Followers) == 1
	})
	if len(ticks.Followers) != 0 {
		t.Fatalf("the ephemeral stream's partition has followers %v", ticks.Followers)
	}
	testkit.Eventually(t, 5*time.Second, "one replica in the cluster (audit's; none for ticks)", func() bool {
		return bs[0].cluster.followers.count()+bs[1].cluster.followers.count()+bs[2].cluster.followers.count() == 1
	})
}

// A stream partition owned by a private broker, through the public one
// (the seed's full client surface, for streams): publish, a durable
// filtered subscription whose acks commit the owner's cursor, and a
// second subscription that continues from it — over both transports.
func TestStreamThroughTheGateway(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			bs, c := startPrivateCluster(t, 3, transportFlags(t, tr)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 3}); err != nil {
				t.Fatal(err)
			}
			var part uint32
			var owner *Broker
			testkit.Eventually(t, 5*time.Second, "a partition owned by a private broker", func() bool {
				snap := bs[0].cluster.cl.Snapshot()
				for n := range uint32(3) {
					p, ok := snap.Partition(core.PartitionRef{Topic: "events", Partition: n})
					if !ok || !p.Placed() || p.Node == bs[0].nodeID {
						continue
					}
					for _, b := range bs[1:] {
						if b.nodeID == p.Node {
							part, owner = n, b
							return true
						}
					}
				}
				return false
			})
			pub := c.Publisher("events", client.PublisherOptions{})
			for i := range 10 {
				kind := map[bool]string{true: "a", false: "b"}[i%2 == 0]
				off, err := pub.PublishConfirmed(ctx, client.Message{Partition: &part, Headers: map[string]string{"kind": kind},
					Payload: []byte(fmt.Sprint("m", i))})
				if err != nil || off != uint64(i) {
					t.Fatalf("publish m%d: offset %d, %v", i, off, err)
				}
			}
			if sp, err := owner.queues.StreamPartition("events", part); err != nil {
				t.Fatal(err)
			} else if _, next := sp.Bounds(); next != 10 {
				t.Fatalf("the owner holds %d records, want 10", next)
			}
			opts := client.StreamOptions{DurableName: "d", Partitions: []uint32{part}, Prefetch: 2,
				Filter: []client.FilterClause{{Key: "kind", Pattern: "a"}}}
			sub, err := c.SubscribeStream(ctx, "events", opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"m0", "m2"} {
				d, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(d.Payload) != want {
					t.Fatalf("got %s, want %s", d.Payload, want)
				}
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			sp, _ := owner.queues.StreamPartition("events", part)
			testkit.Eventually(t, 5*time.Second, "the owner's cursor at 3", func() bool {
				next, _ := sp.Cursor("d")
				return next == 3
			})
			if err := sub.Close(); err != nil {
				t.Fatal(err)
			}
			sub, err = c.SubscribeStream(ctx, "events", opts)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := sub.Next(ctx); err != nil || string(d.Payload) != "m4" {
				t.Fatalf("the second subscription began with %v (%v), want m4", d, err)
			}
		})
	}
}
