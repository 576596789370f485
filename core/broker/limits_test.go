package broker

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// A disk below storage.min_free_bytes: publishes are refused with a
// retryable error naming the setting, /readyz says why and the gauge is
// 1; acks go on; once 10% more than the minimum is free, everything is
// back without a restart.
func TestDiskGuard(t *testing.T) {
	var free atomic.Uint64
	free.Store(5000)
	oldFree, oldInterval := diskFree, diskCheckInterval
	diskFree = func(string) (uint64, error) { return free.Load(), nil }
	diskCheckInterval = 10 * time.Millisecond
	b := startBroker(t, "--storage.min_free_bytes=1000")
	diskFree, diskCheckInterval = oldFree, oldInterval

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	pub := c.Publisher("jobs", client.PublisherOptions{})
	if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}

	free.Store(500)
	testkit.Eventually(t, 5*time.Second, "readyz reports the full disk", func() bool {
		code, body := adminDo(t, b, "GET", "/readyz", "")
		return code == 503 && strings.Contains(body, "storage.min_free_bytes")
	})
	// 503 is retryable: the Go client re-sends until its deadline, so a
	// producer waits for space. A short deadline shows the refusal.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = pub.PublishConfirmed(short, client.Message{Payload: []byte("b")})
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "disk is nearly full") {
		t.Fatalf("publish on a full disk: %v", err)
	}
	if !strings.Contains(scrape(t, b), "fibril_storage_writes_refused 1\n") {
		t.Error("fibril_storage_writes_refused is not 1")
	}
	if err := d.Ack(ctx); err != nil { // acks go on
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the ack is applied", func() bool {
		return strings.Contains(queuesBody(t, b), `"inflight":0`)
	})

	free.Store(1050) // above the minimum, below the 10% margin: still refused
	time.Sleep(50 * time.Millisecond)
	if code, _ := adminDo(t, b, "GET", "/readyz", ""); code != 503 {
		t.Fatalf("readyz %d inside the margin", code)
	}
	free.Store(2000)
	testkit.Eventually(t, 5*time.Second, "ready again", func() bool {
		code, _ := adminDo(t, b, "GET", "/readyz", "")
		return code == 200
	})
	if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte("c")}); err != nil {
		t.Fatalf("publish after space returned: %v", err)
	}
	if !strings.Contains(scrape(t, b), "fibril_storage_free_bytes 2000\n") {
		t.Error("fibril_storage_free_bytes does not show the last reading")
	}
}

func queuesBody(t *testing.T, b *Broker) string {
	t.Helper()
	_, body := adminDo(t, b, "GET", "/admin/api/queues", "")
	return body
}

// Limits from the runtime settings apply at once: reject_publish refuses
// the publish past the limit, drop_oldest makes room, and removing the
// limit lifts it.
func TestQueueLimitsFromSettings(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	// The engine applies a settings change right after the PUT answers:
	// wait until the queues API shows the limit in force.
	setLimits := func(limits, want string) {
		t.Helper()
		code, body := editRuntimeSettings(t, b, func(doc map[string]any) {
			var l any
			_ = json.Unmarshal([]byte(limits), &l)
			doc["limits"] = l
		})
		if code != 200 {
			t.Fatalf("settings: %d %s", code, body)
		}
		testkit.Eventually(t, 5*time.Second, "the limit applies: "+want, func() bool {
			_, body := adminDo(t, b, "GET", "/admin/api/queues/capped", "")
			return strings.Contains(body, want)
		})
	}
	pub := c.Publisher("capped", client.PublisherOptions{})
	publish := func(p string) error {
		// A refusal (503) is re-sent until the deadline: keep it short.
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := pub.PublishConfirmed(short, client.Message{Payload: []byte(p)})
		return err
	}
	for _, p := range []string{"a", "b"} {
		if err := publish(p); err != nil {
			t.Fatal(err)
		}
	}
	setLimits(`{"queues":[{"topic":"capped","max_messages_per_partition":2,"overflow":"reject_publish"}]}`, `"overflow":"reject_publish"`)
	if err := publish("c"); err == nil || !strings.Contains(err.Error(), "is full") {
		t.Fatalf("publish past the limit: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the refused publish's last re-send is answered
	setLimits(`{"queues":[{"topic":"capped","max_messages_per_partition":2,"overflow":"drop_oldest"}]}`, `"overflow":"drop_oldest"`)
	if err := publish("d"); err != nil {
		t.Fatalf("drop_oldest: %v", err)
	}
	if code, body := editRuntimeSettings(t, b, func(doc map[string]any) {
		doc["limits"] = map[string]any{"queues": []any{map[string]any{"topic": "capped", "max_messages_per_partition": 0, "overflow": "drop_oldest"}}}
	}); code != 400 || !strings.Contains(body, "limits.queues[0].max_messages_per_partition") {
		t.Fatalf("an invalid limit: %d %s", code, body)
	}
	code, body := editRuntimeSettings(t, b, func(doc map[string]any) { doc["limits"] = map[string]any{"queues": []any{}} })
	if code != 200 {
		t.Fatalf("settings: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "the limit is lifted", func() bool {
		_, body := adminDo(t, b, "GET", "/admin/api/queues/capped", "")
		return strings.Contains(body, `"topic":"capped"`) && !strings.Contains(body, `"limit"`)
	})
	if err := publish("e"); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "capped", client.SubscribeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(d.Payload))
	}
	if strings.Join(got, "") != "bde" {
		t.Fatalf("delivered %v, want b d e (a was dropped, c refused)", got)
	}
	m := scrape(t, b)
	for _, want := range []string{"fibril_broker_overflow_dropped_total 1", "fibril_broker_overflow_rejected_total"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The latency histograms fill: fsyncs under storage.fsync = always, and
// a first delivery.
func TestLatencyHistograms(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	publishTo(ctx, t, c, "lat", 0, 3)
	sub, err := c.Subscribe(ctx, "lat", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m := scrape(t, b)
	for _, re := range []string{`(?m)^fibril_broker_publish_to_deliver_seconds_count 3$`, `(?m)^fibril_storage_fsync_seconds_count [1-9]`,
		`(?m)^fibril_broker_publish_to_deliver_seconds_bucket\{le="0.001"\}`} {
		if !regexp.MustCompile(re).MatchString(m) {
			t.Errorf("metrics lack %s", re)
		}
	}
}
