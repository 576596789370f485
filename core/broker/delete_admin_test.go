package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Deleting a queue on a standalone broker: refused (409) with a message
// in flight unless forced; then its subscribers get
// SUBSCRIPTION_CLOSED(topic_deleted), it is gone from the list, and a
// stream goes the same way with its cursors. A cluster answers 501.
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

func TestDeleteInClusterNotYet(t *testing.T) {
	bs := startMemCluster(t, 1)
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/queues/delete", `{"topic":"jobs"}`); code != 501 || !strings.Contains(body, "standalone broker only") {
		t.Fatalf("delete in a cluster: %d %s", code, body)
	}
}
