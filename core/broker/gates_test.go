package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// setReplication changes the cluster's replication settings through b's
// admin API and waits until every broker in bs applied them.
func setReplication(t *testing.T, bs []*Broker, b *Broker, change map[string]any) {
	t.Helper()
	var durability any
	if code, body := editRuntimeSettings(t, b, func(doc map[string]any) {
		rp := doc["replication"].(map[string]any)
		maps.Copy(rp, change)
		durability = rp["durability"]
	}); code != 200 {
		t.Fatalf("put settings: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "every broker applies the settings", func() bool {
		for _, x := range bs {
			if x.settings.Current().Replication.Durability != durability {
				return false
			}
		}
		return true
	})
}

// declareOrders declares the queue orders with one partition through b,
// with a client that stays open for the test.
func declareOrders(ctx context.Context, t *testing.T, b *Broker) *client.Client {
	t.Helper()
	c := dialClient(ctx, t, b)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	return c
}

// placedWithFollowers waits until ref has an owner and two followers and
// returns the owner's broker and the followers' brokers.
func placedWithFollowers(t *testing.T, bs []*Broker, ref core.PartitionRef) (owner *Broker, followers []*Broker) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the partition to get an owner and two followers", func() bool {
		p, ok := bs[0].cluster.cl.Snapshot().Partition(ref)
		if !ok || !p.Placed() || len(p.Followers) != 2 {
			return false
		}
		owner, followers = nil, nil
		for _, b := range bs {
			switch {
			case b.nodeID == p.Node:
				owner = b
			case p.HasFollower(b.nodeID):
				followers = append(followers, b)
			}
		}
		return owner != nil && len(followers) == 2
	})
	return owner, followers
}

// With the default majority_durable and two followers, a confirm means the
// record is durable on the owner and on at least one follower; the owner
// records both followers as in sync, needing one copy among them.
func TestClusterConfirmWaitsForAFollower(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := declareOrders(ctx, t, bs[0])
	ref := core.PartitionRef{Topic: "orders"}
	owner, followers := placedWithFollowers(t, bs, ref)
	pub := c.Publisher("orders", client.PublisherOptions{})
	for i := range 100 {
		off, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		held := 0
		for _, f := range followers {
			if rep := f.cluster.followers.replica(ref); rep != nil {
				if _, next := rep.Bounds(); next > off {
					held++
				}
			}
		}
		if held == 0 {
			t.Fatalf("offset %d was confirmed and no follower holds it", off)
		}
	}
	testkit.EventuallyReport(t, 10*time.Second, func() bool {
		p, _ := owner.cluster.cl.Snapshot().Partition(ref)
		return len(p.InSync) == 2 && p.Acks == 1
	}, func() string {
		p, _ := owner.cluster.cl.Snapshot().Partition(ref)
		return fmt.Sprintf("in-sync set %v acks %d, want both followers and 1", p.InSync, p.Acks)
	})
	if v := counterValue(t, owner, "fibril_replication_in_sync_changes_total"); v < 1 {
		t.Errorf("fibril_replication_in_sync_changes_total = %v on the owner", v)
	}
}

// A policy that needs both followers cannot confirm while one is down: the
// producer gets ERROR 500 naming replication.confirm_timeout_ms (never a
// confirm), the record is not delivered (it is above the replicated
// watermark, S-143), and the dead follower stays in the in-sync set
// (without it fewer members than the policy's two would hold every
// confirmed record).
func TestClusterConfirmTimesOutWithoutItsCopies(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setReplication(t, bs, bs[0], map[string]any{"durability": "replica_durable:3", "confirm_timeout_ms": 400})
	ref := core.PartitionRef{Topic: "orders"}
	declareOrders(ctx, t, bs[0])
	owner, followers := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, owner) // the owner stays up
	pub := c.Publisher("orders", client.PublisherOptions{})
	if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte("both up")}); err != nil {
		t.Fatalf("publish with both followers up: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "both followers in sync", func() bool {
		p, _ := owner.cluster.cl.Snapshot().Partition(ref)
		return len(p.InSync) == 2 && p.Acks == 2
	})
	gone := followers[0]
	if err := gone.Shutdown(); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := sub.Next(ctx); err != nil || string(d.Payload) != "both up" {
		t.Fatalf("first delivery: %v %v", d, err)
	}
	_, err = pub.PublishConfirmed(ctx, client.Message{Payload: []byte("one down")})
	var we *client.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInternal || !strings.Contains(we.Message, "replication.confirm_timeout_ms") {
		t.Fatalf("publish with a follower down: %v, want ERROR 500 naming replication.confirm_timeout_ms", err)
	}
	nctx, ncancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if d, err := sub.Next(nctx); err == nil {
		t.Fatalf("delivered %q, which only the owner and one follower hold", d.Payload)
	}
	ncancel()
	p, _ := owner.cluster.cl.Snapshot().Partition(ref)
	if !slices.Contains(p.InSync, gone.nodeID) {
		t.Fatalf("in-sync set %v lost %s while confirms need it", p.InSync, gone.nodeID)
	}
}

// Under local_durable nothing waits for followers: a publish is confirmed
// on the owner's fsync and delivered at once (S-143), also on a partition
// the engine opened under that policy.
func TestClusterLocalDurableDeliversAtOnce(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setReplication(t, bs, bs[0], map[string]any{"durability": "local_durable"})
	c := declareOrders(ctx, t, bs[0])
	placedWithFollowers(t, bs, core.PartitionRef{Topic: "orders"})
	pub := c.Publisher("orders", client.PublisherOptions{})
	if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	if d, err := sub.Next(dctx); err != nil || string(d.Payload) != "one" {
		t.Fatalf("delivery under local_durable: %v %v", d, err)
	}
}
