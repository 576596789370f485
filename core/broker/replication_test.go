package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	c := declareOrders(ctx, t, bs[0])
	ref := core.PartitionRef{Topic: "orders"}
	owner, _ := placedWithFollowers(t, bs, ref)
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
	// The owner's admin API shows each follower's durable progress; each
	// follower counts its replica.
	testkit.EventuallyReport(t, 10*time.Second, func() bool {
		return followerLags(t, owner) == "0,0"
	}, func() string { return "follower lags on the owner: " + followerLags(t, owner) })
	for _, b := range bs {
		want := 1.0
		if b == owner {
			want = 0
		}
		if v := counterValue(t, b, "fibril_replication_replicas"); v != want {
			t.Errorf("%s: fibril_replication_replicas %v, want %v", b.nodeID, v, want)
		}
		if b == owner {
			continue
		}
		if v := counterValue(t, b, "fibril_replication_checkpoint_installs_total"); v < 1 {
			t.Errorf("%s: fibril_replication_checkpoint_installs_total %v, want at least the first checkpoint", b.nodeID, v)
		}
		copied := counterValue(t, b, "fibril_replication_catchup_bytes_total") + counterValue(t, b, "fibril_replication_streamed_bytes_total")
		if copied < total {
			t.Errorf("%s: %v record bytes copied for %d records", b.nodeID, copied, total)
		}
	}
	for _, m := range []string{"fibril_replication_max_lag_records", "fibril_replication_max_lag_bytes"} {
		if v := counterValue(t, owner, m); v != 0 {
			t.Errorf("owner: %s %v, want 0", m, v)
		}
	}
}

// followerLags is the lag_records of the followers of orders#0 in b's
// admin topology, comma-separated ("?" for a follower without one).
func followerLags(t *testing.T, b *Broker) string {
	code, body := adminDo(t, b, "GET", "/admin/api/topology", "")
	if code != 200 {
		t.Fatalf("topology: %d %s", code, body)
	}
	var topo struct {
		Partitions []struct {
			Topic     string `json:"topic"`
			Followers []struct {
				LagRecords  *uint64 `json:"lag_records"`
				DurableNext *uint64 `json:"durable_next"`
			} `json:"followers"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(body), &topo); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range topo.Partitions {
		if p.Topic != "orders" {
			continue
		}
		for _, f := range p.Followers {
			if f.LagRecords == nil {
				out = append(out, "?")
			} else {
				out = append(out, fmt.Sprint(*f.LagRecords))
			}
		}
	}
	return strings.Join(out, ",")
}

// setTargetFollowers sets replication.target_followers through b and waits
// until every broker in bs applied it.
func setTargetFollowers(t testing.TB, bs []*Broker, b *Broker, n int) {
	t.Helper()
	if code, body := editRuntimeSettings(t, b, func(doc map[string]any) {
		doc["replication"].(map[string]any)["target_followers"] = n
	}); code != 200 {
		t.Fatalf("put settings: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "every broker applies target_followers", func() bool {
		for _, x := range bs {
			if int(x.settings.Current().Replication.TargetFollowers) != n {
				return false
			}
		}
		return true
	})
}

// Followers added to a partition whose owner's retention already deleted
// its settled head start their copy at the owner's first record (they
// cannot copy what is gone), catch up, and hold everything a new owner
// needs: after the owner leaves, every unacknowledged message is delivered.
func TestClusterNewFollowersStartAtTheOwnersFirstRecord(t *testing.T) {
	bs := startMemClusterWith(t, 3, func(int) []string { return []string{"--storage.segment_max_bytes=16384"} })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setTargetFollowers(t, bs, bs[0], 0)
	c := declareOrders(ctx, t, bs[0])
	ref := core.PartitionRef{Topic: "orders"}
	var owner *Broker
	testkit.Eventually(t, 10*time.Second, "orders placed", func() bool {
		p, ok := bs[0].cluster.cl.Snapshot().Partition(ref)
		for _, b := range bs {
			if ok && p.Placed() && b.nodeID == p.Node {
				owner = b
			}
		}
		return owner != nil
	})
	pub := c.Publisher("orders", client.PublisherOptions{})
	const total, acks = 300, 250
	payload := func(i int) []byte { return fmt.Appendf(bytes.Repeat([]byte{'x'}, 1000), "%d", i) }
	for i := range total {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: payload(i)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	for range acks {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
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
	testkit.Eventually(t, 10*time.Second, "the owner's retention to delete settled segments", func() bool {
		_ = olog.EnforceRetention()
		first, _ := olog.Bounds()
		return first > 0
	})
	first, _ := olog.Bounds()
	setTargetFollowers(t, bs, bs[0], 2)
	_, followers := placedWithFollowers(t, bs, ref)
	for _, f := range followers {
		testkit.EventuallyReport(t, 20*time.Second, func() bool {
			rep := f.cluster.followers.replica(ref)
			if rep == nil {
				return false
			}
			// Acks settle on, so the owner's retention may have moved its
			// first record further by the time the follower asked.
			rfirst, next := rep.Bounds()
			return rfirst >= first && next == total
		}, func() string {
			rep := f.cluster.followers.replica(ref)
			if rep == nil {
				return string(f.nodeID) + " runs no replica"
			}
			rfirst, next := rep.Bounds()
			ofirst, onext := olog.Bounds()
			return fmt.Sprintf("%s's replica holds [%d,%d); the owner's log is [%d,%d) (first %d when the followers were added)", f.nodeID, rfirst, next, ofirst, onext, first)
		})
	}
	testkit.EventuallyReport(t, 10*time.Second, func() bool {
		return followerLags(t, owner) == "0,0"
	}, func() string { return "follower lags on the owner: " + followerLags(t, owner) })
	if err := owner.Shutdown(); err != nil {
		t.Fatal(err)
	}
	rest := map[string]bool{}
	for i := acks; i < total; i++ {
		rest[string(payload(i))] = true
	}
	consumeConfirmed(ctx, t, dialClient(ctx, t, followers[0]), "orders", client.SubscribeOptions{Prefetch: 64}, rest)
}
