package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// queuesAnswer is the part of GET /admin/api/queues the tests read.
type queuesAnswer struct {
	Queues []struct {
		Kind           string  `json:"kind"`
		Topic          string  `json:"topic"`
		PartitionCount uint32  `json:"partition_count"`
		MaxRetries     *uint32 `json:"max_retries"`
		Retention      *struct {
			MaxRecords *uint64 `json:"max_records"`
		} `json:"retention"`
		Totals struct {
			Ready       uint64  `json:"ready"`
			Inflight    uint64  `json:"inflight"`
			Records     uint64  `json:"records"`
			Consumers   int     `json:"consumers"`
			Bytes       int64   `json:"bytes"`
			PublishRate float64 `json:"publish_rate"`
			Unreported  int     `json:"unreported"`
		} `json:"totals"`
		Partitions []struct {
			Partition   uint32 `json:"partition"`
			Owner       string `json:"owner"`
			Unavailable string `json:"unavailable"`
			Queue       *struct {
				Ready     uint64 `json:"ready"`
				Consumers []struct {
					Prefetch  uint32 `json:"prefetch"`
					Unsettled int    `json:"unsettled"`
				} `json:"consumers"`
			} `json:"queue"`
		} `json:"partitions"`
	} `json:"queues"`
}

func getQueues(t *testing.T, b *Broker, path string) queuesAnswer {
	t.Helper()
	code, body := adminDo(t, b, "GET", path, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var a queuesAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	return a
}

func publishTo(ctx context.Context, t *testing.T, c *client.Client, topic string, partition uint32, n int) {
	t.Helper()
	pub := c.Publisher(topic, client.PublisherOptions{})
	for i := range n {
		p := partition
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

// A standalone broker lists its queues and streams with their numbers,
// describes one, and purges a queue: ready messages go, the one in
// flight stays; a stream or an unknown name is refused clearly.
func TestQueuesAdminStandalone(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	retries := uint32(3)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2, MaxRetries: &retries}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1, MaxRecords: 1000}); err != nil {
		t.Fatal(err)
	}
	publishTo(ctx, t, c, "jobs", 0, 5)
	publishTo(ctx, t, c, "jobs", 1, 3)
	publishTo(ctx, t, c, "events", 0, 2)
	sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil { // one in flight, never settled
		t.Fatal(err)
	}

	var a queuesAnswer
	testkit.Eventually(t, 5*time.Second, "the delivery shows as in flight", func() bool {
		a = getQueues(t, b, "/admin/api/queues")
		return len(a.Queues) == 2 && a.Queues[1].Totals.Inflight == 1
	})
	events, jobs := a.Queues[0], a.Queues[1]
	if events.Kind != "stream" || events.Totals.Records != 2 || events.Retention == nil || events.Retention.MaxRecords == nil || *events.Retention.MaxRecords != 1000 {
		t.Errorf("events: %+v", events)
	}
	if jobs.Kind != "queue" || jobs.PartitionCount != 2 || jobs.MaxRetries == nil || *jobs.MaxRetries != 3 ||
		jobs.Totals.Ready != 7 || jobs.Totals.Consumers != 1 || jobs.Totals.Bytes <= 0 || jobs.Totals.Unreported != 0 {
		t.Errorf("jobs: %+v", jobs)
	}
	if p0 := jobs.Partitions[0].Queue; p0 == nil || p0.Ready != 4 || len(p0.Consumers) != 1 || p0.Consumers[0].Prefetch != 1 || p0.Consumers[0].Unsettled != 1 {
		t.Errorf("jobs partition 0: %+v", jobs.Partitions[0])
	}
	if s := getQueues(t, b, "/admin/api/streams"); len(s.Queues) != 1 || s.Queues[0].Topic != "events" {
		t.Errorf("streams: %+v", s)
	}
	if one := getQueues(t, b, "/admin/api/queues/jobs"); len(one.Queues) != 1 || one.Queues[0].Topic != "jobs" {
		t.Errorf("describe jobs: %+v", one)
	}
	if code, body := adminDo(t, b, "GET", "/admin/api/queues/nope", ""); code != 404 || !strings.Contains(body, "nope is not declared") {
		t.Errorf("describe an unknown topic: %d %s", code, body)
	}

	// Rates: two reads more than a second apart, with publishes between.
	publishTo(ctx, t, c, "jobs", 1, 10)
	time.Sleep(1100 * time.Millisecond)
	if r := getQueues(t, b, "/admin/api/queues/jobs").Queues[0].Totals.PublishRate; r <= 0 {
		t.Errorf("publish rate %v after 10 publishes", r)
	}

	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{"topic":"events"}`, 400, "is a stream"},
		{`{"topic":"nope"}`, 404, "not declared"},
		{`{}`, 400, "body must be JSON"},
		{`{"topic":"jobs","extra":1}`, 400, "unknown field"},
	} {
		if code, body := adminDo(t, b, "POST", "/admin/api/queues/purge", c.body); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("purge %s: %d %s, want %d %q", c.body, code, body, c.code, c.want)
		}
	}
	code, body := adminDo(t, b, "POST", "/admin/api/queues/purge", `{"topic":"jobs"}`)
	if code != 200 || !strings.Contains(body, `"purged":17`) {
		t.Fatalf("purge jobs: %d %s", code, body)
	}
	jobs = getQueues(t, b, "/admin/api/queues/jobs").Queues[0]
	if jobs.Totals.Ready != 0 || jobs.Totals.Inflight != 1 {
		t.Errorf("after the purge: %+v", jobs.Totals)
	}
}

// In a cluster every broker shows every partition's numbers, asking the
// owners over the inter-broker transport, and a purge sent to any broker
// reaches every owner.
func TestQueuesAdminCluster(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checkClusterQueues(ctx, t, bs, dialClient(ctx, t, bs[0]))
}

// The public broker reaches its private peers' partitions the same way
// (the operator's admin client could not).
func TestQueuesAdminPrivateOwners(t *testing.T) {
	bs, c := startPrivateCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checkClusterQueues(ctx, t, bs[:1], c)
}

// checkClusterQueues declares a 6-partition queue, publishes 2 messages
// to each partition, reads the numbers from each of bs and purges through
// the last of them.
func checkClusterQueues(ctx context.Context, t *testing.T, bs []*Broker, c *client.Client) {
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "spread", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "spread")
	for p := range uint32(6) {
		publishTo(ctx, t, c, "spread", p, 2)
	}
	owners := map[string]bool{}
	for i, b := range bs {
		a := getQueues(t, b, "/admin/api/queues")
		if len(a.Queues) != 1 {
			t.Fatalf("broker %d: %+v", i, a)
		}
		q := a.Queues[0]
		if q.Totals.Ready != 12 || q.Totals.Unreported != 0 {
			t.Errorf("broker %d totals %+v; partitions %+v", i, q.Totals, q.Partitions)
		}
		for _, p := range q.Partitions {
			owners[p.Owner] = true
			if p.Queue == nil || p.Queue.Ready != 2 {
				t.Errorf("broker %d partition %d: %+v", i, p.Partition, p)
			}
		}
	}
	if len(owners) < 2 {
		t.Logf("partitions landed on %d owners only: the fan-out is exercised less", len(owners))
	}
	code, body := adminDo(t, bs[len(bs)-1], "POST", "/admin/api/queues/purge", `{"topic":"spread"}`)
	if code != 200 || !strings.Contains(body, `"purged":12`) || !strings.Contains(body, `"failed_partitions":0`) {
		t.Fatalf("purge: %d %s", code, body)
	}
	if q := getQueues(t, bs[0], "/admin/api/queues/spread").Queues[0]; q.Totals.Ready != 0 {
		t.Errorf("after the purge: %+v", q.Totals)
	}
}

// Rates: the first read gives 0 and a sample; a read a second or more
// later gives the rate since; reads in between repeat it; a counter that
// went back (the partition reopened) starts over; long-unread samples go.
func TestRateBook(t *testing.T) {
	var rb rateBook
	k := rateKey{"queue", "t", "", 0}
	t0 := time.Unix(1000, 0)
	if p, d := rb.rates(k, t0, 100, 50); p != 0 || d != 0 {
		t.Fatalf("first read %v %v", p, d)
	}
	if p, _ := rb.rates(k, t0.Add(500*time.Millisecond), 150, 50); p != 0 {
		t.Fatalf("read within the window %v", p)
	}
	if p, d := rb.rates(k, t0.Add(2*time.Second), 300, 150); p != 100 || d != 50 {
		t.Fatalf("rates %v %v, want 100 50", p, d)
	}
	if p, _ := rb.rates(k, t0.Add(2500*time.Millisecond), 310, 150); p != 100 {
		t.Fatalf("between samples %v, want the last rate", p)
	}
	if p, _ := rb.rates(k, t0.Add(4*time.Second), 5, 0); p != 0 {
		t.Fatalf("after a reopen %v", p)
	}
	rb.sweep(t0.Add(4*time.Second + rateForget + time.Second))
	if len(rb.m) != 0 {
		t.Fatalf("sweep kept %d samples", len(rb.m))
	}
}
