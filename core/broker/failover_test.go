package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/core/testkit"
)

// When the owner of a written partition leaves, an in-sync follower takes
// the partition with a new epoch: publishes are confirmed again through
// the other brokers, and every message confirmed before is delivered,
// with the rest of what was published.
func TestClusterFailoverToAnInSyncFollower(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := core.PartitionRef{Topic: "orders"}
	declareOrders(ctx, t, bs[0])
	owner, followers := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, followers[0])
	pub := c.Publisher("orders", client.PublisherOptions{})
	confirmed := map[string]bool{}
	for i := range 50 {
		msg := fmt.Sprint("before-", i)
		if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte(msg)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		confirmed[msg] = true
	}
	before, _ := owner.cluster.cl.Snapshot().Partition(ref)
	if err := owner.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Publish until the partition takes confirms again.
	var after int
	testkit.Eventually(t, 20*time.Second, "a confirmed publish after the owner left", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		msg := fmt.Sprint("after-", after)
		if _, err := pub.PublishConfirmed(pctx, client.Message{Payload: []byte(msg)}); err != nil {
			return false
		}
		confirmed[msg] = true
		after++
		return true
	})
	p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
	if p.Node == owner.nodeID || p.Epoch <= before.Epoch || !p.Written {
		t.Fatalf("after the failover: owner %s epoch %d written %v (before: %s, epoch %d)", p.Node, p.Epoch, p.Written, before.Node, before.Epoch)
	}
	if v := sumCounter(t, followers, "fibril_cluster_promotions_total"); v != 1 {
		t.Errorf("fibril_cluster_promotions_total over the survivors = %v, want 1", v)
	}
	consumeConfirmed(ctx, t, c, "orders", client.SubscribeOptions{Prefetch: 64}, confirmed)
}

// consumeConfirmed subscribes to topic through c and takes (and acks)
// deliveries until every payload in confirmed was delivered.
func consumeConfirmed(ctx context.Context, t *testing.T, c *client.Client, topic string, opts client.SubscribeOptions, confirmed map[string]bool) {
	t.Helper()
	sub, err := c.Subscribe(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	awaitConfirmed(ctx, t, sub, confirmed)
}

// awaitConfirmed takes (and acks) deliveries of sub until every payload in
// confirmed was delivered. A delivery made under a broker session that
// was not resumed (its owner stopped) cannot be acked: it comes again from
// the partition's new owner, so that is no failure here.
func awaitConfirmed(ctx context.Context, t *testing.T, sub *client.Subscription, confirmed map[string]bool) {
	t.Helper()
	for len(confirmed) > 0 {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := sub.Next(dctx)
		dcancel()
		if err != nil {
			t.Fatalf("%d confirmed messages not delivered (e.g. %v): %v", len(confirmed), firstKey(confirmed), err)
		}
		delete(confirmed, string(d.Payload))
		if err := d.Ack(ctx); err != nil && !errors.Is(err, client.ErrStaleDelivery) {
			t.Fatal(err)
		}
	}
}

// sumCounter adds up a metric over brokers.
func sumCounter(t *testing.T, bs []*Broker, name string) float64 {
	var v float64
	for _, b := range bs {
		v += counterValue(t, b, name)
	}
	return v
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// A drained owner hands its partition to an in-sync follower (S-128)
// while publishing goes on: the new owner takes confirmed publishes, and
// every message confirmed before, during and after is delivered.
func TestClusterDrainHandsPartitionsOver(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := core.PartitionRef{Topic: "orders"}
	declareOrders(ctx, t, bs[0])
	owner, followers := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, followers[0])
	pub := c.Publisher("orders", client.PublisherOptions{})
	confirmed := map[string]bool{}
	publish := func(msg string) error {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		_, err := pub.PublishConfirmed(pctx, client.Message{Payload: []byte(msg)})
		if err == nil {
			confirmed[msg] = true
		}
		return err
	}
	for i := range 50 {
		if err := publish(fmt.Sprint("before-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := adminDo(t, owner, "POST", "/admin/api/drain", `{"grace_ms":0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	i := 0
	testkit.Eventually(t, 20*time.Second, "the partition handed to a follower", func() bool {
		_ = publish(fmt.Sprint("during-", i)) // may fail retryably while it moves
		i++
		p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
		return p.Node != owner.nodeID
	})
	p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
	if !p.Written || p.HasFollower(p.Node) {
		t.Fatalf("after the handoff: %+v", p.Assignment)
	}
	testkit.Eventually(t, 5*time.Second, "the drained owner counts its demotion", func() bool {
		return counterValue(t, owner, "fibril_replication_demotions_total") == 1
	})
	testkit.Eventually(t, 20*time.Second, "a confirmed publish on the new owner", func() bool {
		return publish(fmt.Sprint("after-", i)) == nil
	})
	consumeConfirmed(ctx, t, c, "orders", client.SubscribeOptions{Prefetch: 64}, confirmed)
}

// memStore is the in-memory coordination store of t's memtest cluster.
func memStore(t *testing.T) *memcoord.Store {
	t.Helper()
	memStores.Lock()
	defer memStores.Unlock()
	st := memStores.m[memStores.names[t]]
	if st == nil {
		t.Fatal("no memtest store for this test")
	}
	return st
}

// An owner cut off from coordination (its coordination plugin died, or its
// link to the quorum) keeps its partition only while its lease is surely
// valid; then an in-sync follower takes the partition with a new epoch and
// publishing goes on there. When the owner reaches coordination again it
// finds the newer epoch and becomes a follower, and every message a client
// saw confirmed, before, during and after, is delivered.
func TestClusterOwnerCutFromCoordinationIsReplaced(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := core.PartitionRef{Topic: "orders"}
	declareOrders(ctx, t, bs[0])
	owner, followers := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, followers[0])
	pub := c.Publisher("orders", client.PublisherOptions{})
	confirmed := map[string]bool{}
	publish := func(msg string) error {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		_, err := pub.PublishConfirmed(pctx, client.Message{Payload: []byte(msg)})
		if err == nil {
			confirmed[msg] = true
		}
		return err
	}
	for i := range 50 {
		if err := publish(fmt.Sprint("before-", i)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
	st := memStore(t)
	st.PauseMember(string(owner.nodeID))
	i := 0
	testkit.Eventually(t, 20*time.Second, "a follower takes the partition and confirms", func() bool {
		err := publish(fmt.Sprint("during-", i)) // fails retryably while it moves
		i++
		p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
		return err == nil && p.Node != owner.nodeID
	})
	p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
	if p.Epoch <= before.Epoch || !p.Written || (p.Node != followers[0].nodeID && p.Node != followers[1].nodeID) {
		t.Fatalf("after the cut: %+v (before: %+v)", p.Assignment, before.Assignment)
	}
	if owner.cluster.cl.LeaseValid() {
		t.Error("the cut-off owner still counts its lease as valid")
	}
	st.ResumeMember(string(owner.nodeID))
	testkit.EventuallyReport(t, 20*time.Second, func() bool {
		p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
		return p.HasFollower(owner.nodeID) && slices.Contains(p.InSync, owner.nodeID)
	}, func() string {
		p, _ := followers[0].cluster.cl.Snapshot().Partition(ref)
		return fmt.Sprintf("the former owner %s is not an in-sync follower again: %+v", owner.nodeID, p.Assignment)
	})
	for j := range 20 {
		if err := publish(fmt.Sprint("after-", j)); err != nil {
			t.Fatal(err)
		}
	}
	consumeConfirmed(ctx, t, c, "orders", client.SubscribeOptions{Prefetch: 64}, confirmed)
}
