package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/client"
)

// The first thing a user does: start a broker, publish with confirms and
// consume with the Go SDK (built-in fibril/fibril login from loopback,
// S-146), then see it in the metrics.
func TestPublishConsumeEndToEnd(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{b.BrokerAddr().String()},
		Username: "fibril", Password: "fibril", Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pub := c.Publisher("orders", client.PublisherOptions{})
	for i := 0; i < 10; i++ {
		off, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if off != uint64(i) {
			t.Fatalf("offset %d, want %d", off, i)
		}
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Payload) != fmt.Sprint(i) {
			t.Fatalf("delivery %d = %q", i, d.Payload)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.PrefetchViolations != 0 || st.ProtocolViolations != 0 || st.UncorrelatedErrors != 0 {
		t.Fatalf("client saw broker misbehaviour: %+v", st)
	}
	// ACK is fire-and-forget: the last one may still be on its way when
	// Ack returns, so the scrape is retried (bounded) until it shows.
	want := []string{"fibril_broker_published_total 10", "fibril_broker_acked_total 10", "fibril_tcp_connections_open 1"}
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		body = scrape(t, b)
		missing := false
		for _, w := range want {
			missing = missing || !strings.Contains(body, w)
		}
		if !missing || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
}

// S-164: with admin.metrics_per_channel (the default) every loaded queue
// partition has fibril_queue_ready and fibril_queue_inflight series
// {topic,group,partition}; with it off there are none.
func TestPerChannelMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, on := range []bool{true, false} {
		b := startBroker(t, fmt.Sprintf("--admin.metrics_per_channel=%v", on))
		c, err := client.Dial(ctx, client.Options{Addrs: []string{b.BrokerAddr().String()},
			Username: "fibril", Password: "fibril", Dial: loopbackOnly(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Group: "eu", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
		pub := c.Publisher("jobs", client.PublisherOptions{Group: "eu"})
		part := uint32(1)
		for i := range 5 {
			if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &part, Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Group: "eu", Partitions: []uint32{1}, Prefetch: 2})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := sub.Next(ctx); err != nil { // held, not acked: in flight
				t.Fatal(err)
			}
		}
		want := []string{
			`fibril_queue_ready{group="eu",partition="1",topic="jobs"} 3`,
			`fibril_queue_inflight{group="eu",partition="1",topic="jobs"} 2`,
			`fibril_queue_ready{group="eu",partition="0",topic="jobs"} 0`,
		}
		body := scrape(t, b)
		for _, w := range want {
			if strings.Contains(body, w) != on {
				t.Errorf("metrics_per_channel=%v: series %q present: %v", on, w, !on)
			}
		}
		if !on && strings.Contains(body, "fibril_queue_") {
			t.Errorf("metrics_per_channel=false still exports per-queue series")
		}
		c.Close()
	}
}

// docs/metrics.md lists exactly the fibril_* series the broker exports.
func TestMetricsDocumented(t *testing.T) {
	// Coordinated mode exports every series a standalone broker does, and
	// the cluster's; quic exports the shared transport series and its own.
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	b := startMemClusterWith(t, 1, func(int) []string { return append(tlsFlags(ca), "--transport.backend=quic") })[0]
	exported := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range b.registry.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fqName.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], "fibril_") {
				exported[m[1]] = true
			}
		}
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(fibril_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for name := range exported {
		if !documented[name] {
			t.Errorf("%s is exported but not listed in docs/metrics.md", name)
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("docs/metrics.md lists %s, which the broker does not export", name)
		}
	}
}
