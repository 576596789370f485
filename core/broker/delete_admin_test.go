package broker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// Deleting a queue on a standalone broker: refused (409) with a message
// in flight unless forced; then its subscribers get
// SUBSCRIPTION_CLOSED(topic_deleted), it is gone from the list, and a
// stream goes the same way with its cursors.
func TestDeleteStandalone(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	publishTo(ctx, t, c, "jobs", 0, 3)
	sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := adminDo(t, b, "POST", "/admin/api/queues/delete", `{"topic":"jobs"}`); code != 409 || !strings.Contains(body, "in flight") {
		t.Fatalf("delete with a message in flight: %d %s", code, body)
	}
	code, body := adminDo(t, b, "POST", "/admin/api/queues/delete", `{"topic":"jobs","force":true}`)
	if code != 200 || !strings.Contains(body, `"messages":3`) || !strings.Contains(body, `"subscriptions_closed":1`) {
		t.Fatalf("forced delete: %d %s", code, body)
	}
	_, err = sub.Next(ctx)
	var sc *client.SubscriptionClosedError
	if !errors.As(err, &sc) || sc.Reason != wire.ReasonTopicDeleted {
		t.Fatalf("the subscriber got %v, want SUBSCRIPTION_CLOSED(topic_deleted)", err)
	}
	if q := getQueues(t, b, "/admin/api/queues"); len(q.Queues) != 0 {
		t.Fatalf("queues after the delete: %+v", q)
	}
	if code, _ := adminDo(t, b, "POST", "/admin/api/queues/delete", `{"topic":"jobs"}`); code != 404 {
		t.Fatalf("second delete: %d", code)
	}

	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	publishTo(ctx, t, c, "events", 0, 2)
	ss, err := c.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "audit", Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Next(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ path, body string }{
		{"/admin/api/queues/delete", `{"topic":"events"}`},
		{"/admin/api/streams/delete", `{"topic":"events","force":true}`},
	} {
		if code, body := adminDo(t, b, "POST", bad.path, bad.body); code != 400 {
			t.Errorf("%s %s: %d %s", bad.path, bad.body, code, body)
		}
	}
	code, body = adminDo(t, b, "POST", "/admin/api/streams/delete", `{"topic":"events"}`)
	if code != 200 || !strings.Contains(body, `"records":2`) {
		t.Fatalf("stream delete: %d %s", code, body)
	}
	for i := 0; ; i++ { // the buffered record, then the end
		_, err := ss.Next(ctx)
		if err == nil && i < 2 {
			continue
		}
		if !errors.As(err, &sc) || sc.Reason != wire.ReasonTopicDeleted {
			t.Fatalf("the stream subscriber got %v, want SUBSCRIPTION_CLOSED(topic_deleted)", err)
		}
		break
	}
	if q := getQueues(t, b, "/admin/api/streams"); len(q.Queues) != 0 {
		t.Fatalf("streams after the delete: %+v", q)
	}
}

// Deleting in a cluster: refused with a message in flight unless forced;
// then the subscriber gets SUBSCRIPTION_CLOSED(topic_deleted), every
// broker drops its copy (owner and followers: no directory is left) and
// confirms, the name is gone everywhere, comes back as a queue only, and
// the new queue starts empty.
func TestDeleteInCluster(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "jobs")
	for p := range uint32(3) {
		publishTo(ctx, t, c, "jobs", p, 2)
	}
	awaitCopies(t, bs, "jobs", 3)
	sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := adminDo(t, bs[1], "POST", "/admin/api/queues/delete", `{"topic":"jobs"}`); code != 409 || !strings.Contains(body, "in flight") {
		t.Fatalf("delete with a message in flight: %d %s", code, body)
	}
	code, body := adminDo(t, bs[2], "POST", "/admin/api/queues/delete", `{"topic":"jobs","force":true}`)
	if code != 200 || !strings.Contains(body, `"complete":true`) || !strings.Contains(body, `"messages":6`) || !strings.Contains(body, `"subscriptions_closed":1`) {
		t.Fatalf("forced delete: %d %s", code, body)
	}
	_, err = sub.Next(ctx)
	var sc *client.SubscriptionClosedError
	if !errors.As(err, &sc) || sc.Reason != wire.ReasonTopicDeleted {
		t.Fatalf("the subscriber got %v, want SUBSCRIPTION_CLOSED(topic_deleted)", err)
	}
	for i, b := range bs {
		if q := getQueues(t, b, "/admin/api/queues"); len(q.Queues) != 0 {
			t.Errorf("broker %d lists %+v after the delete", i, q.Queues)
		}
		if _, err := os.Stat(filepath.Join(b.cfg.Server.DataDir, "queues", "q", "jobs", "@default")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("broker %d kept the queue's directory: %v", i, err)
		}
	}
	p := uint32(0)
	if _, err := c.Publisher("jobs", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte("late")}); err == nil {
		t.Fatal("a publish to the deleted queue was confirmed")
	}
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "jobs", Partitions: 1}); err == nil {
		t.Fatal("the deleted queue's name came back as a stream")
	}
	awaitNoTombstone(t, bs[0], "queue", "jobs")
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatalf("declare again: %v", err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "jobs")
	publishTo(ctx, t, c, "jobs", 0, 1)
	if q := getQueues(t, bs[1], "/admin/api/queues/jobs").Queues[0]; q.PartitionCount != 2 || q.Totals.Ready != 1 {
		t.Fatalf("the queue declared again: %+v", q)
	}
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/queues/delete", `{"topic":"nope"}`); code != 404 {
		t.Fatalf("deleting an unknown queue: %d %s", code, body)
	}
}

// A broker that is down when a queue is deleted holds up a new
// declaration of the name until it comes back, drops its copy and
// confirms; the delete answers at once with it pending.
func TestDeleteInClusterWaitsForADownBroker(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the stream's partitions are placed", func() bool {
		st := bs[0].cluster.cl.Snapshot().Stream("events")
		return st != nil && !slices.ContainsFunc(st.Parts, func(p cluster.Partition) bool { return !p.Placed() })
	})
	down := bs[2]
	cfg := down.cfg
	if err := down.Shutdown(); err != nil {
		t.Fatal(err)
	}
	code, body := adminDo(t, bs[1], "POST", "/admin/api/streams/delete", `{"topic":"events"}`)
	if code != 200 || !strings.Contains(body, `"complete":false`) || !strings.Contains(body, `"pending":["n2"]`) {
		t.Fatalf("delete with a broker down: %d %s", code, body)
	}
	_, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1})
	if core.Code(err) != wire.CodeConflict || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("declaring while n2 has not confirmed: %v", err)
	}
	back, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = back.Shutdown() })
	awaitNoTombstone(t, bs[0], "stream", "events")
	if _, err := os.Stat(filepath.Join(cfg.Server.DataDir, "queues", "s", "events")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the broker that was down kept the stream's directory: %v", err)
	}
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1}); err != nil {
		t.Fatalf("declare again: %v", err)
	}
}

// awaitCopies waits until every broker has opened topic's directory (as
// owner or follower of some partition).
func awaitCopies(t *testing.T, bs []*Broker, topic string, partitions int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "every broker holds a copy of "+topic, func() bool {
		for _, b := range bs {
			names, err := os.ReadDir(filepath.Join(b.cfg.Server.DataDir, "queues", "q", topic, "@default"))
			if err != nil || len(names) == 0 {
				return false
			}
		}
		return true
	})
}

// awaitNoTombstone waits until b's view shows the deletion finished.
func awaitNoTombstone(t *testing.T, b *Broker, kind, topic string) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "the deletion of "+topic+" finishes", func() bool {
		t := b.cluster.cl.Snapshot().Tombstone(kind, topic, "")
		return t != nil && t.Finished
	})
}
