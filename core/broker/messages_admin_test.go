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
	"github.com/fibrilgo/fibril/core/wire"
)

type messagesPage struct {
	Next     uint64 `json:"next"`
	Messages []struct {
		Offset      uint64 `json:"offset"`
		State       string `json:"state"`
		ContentType string `json:"content_type"`
		Payload     []byte `json:"payload"`
		PayloadSize int    `json:"payload_size"`
		Headers     []struct {
			Key, Value string
		} `json:"headers"`
		DLQ *struct {
			SourceTopic string `json:"source_topic"`
			Reason      string `json:"reason"`
		} `json:"dlq"`
	} `json:"messages"`
}

func getMessages(t *testing.T, b *Broker, query string) messagesPage {
	t.Helper()
	code, body := adminDo(t, b, "GET", "/admin/api/messages?"+query, "")
	if code != 200 {
		t.Fatalf("messages?%s: %d %s", query, code, body)
	}
	var p messagesPage
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return p
}

// deadLetter declares orders (dead letters to orders-dlq) and fails n
// messages into the DLQ; it returns once they are there.
func deadLetter(ctx context.Context, t *testing.T, b *Broker, c *client.Client, n int) {
	t.Helper()
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders-dlq"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", DLQ: &client.DLQPolicy{Kind: wire.DLQNamed, Topic: "orders-dlq"}}); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher("orders", client.PublisherOptions{})
	for i := range n {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: fmt.Appendf(nil, "m%d", i), ContentType: "text/plain",
			Headers: map[string]string{"k": fmt.Sprint("v", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	fc := dialClient(ctx, t, b) // its subscription ends with it
	defer fc.Close()
	sub, err := fc.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: uint32(n)})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Fail(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the dead letters arrive", func() bool {
		return len(getMessages(t, b, "topic=orders-dlq").Messages) == n
	})
}

// Inspection shows a DLQ's messages with their origin and reason; replay
// copies them back (payload, content type, user headers), once by offset
// leaving the dead letter, then all of them removing them.
func TestMessagesAndReplayStandalone(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	deadLetter(ctx, t, b, c, 3)

	p := getMessages(t, b, "topic=orders-dlq&limit=2")
	if len(p.Messages) != 2 || p.Next != 2 {
		t.Fatalf("first page: %+v", p)
	}
	m := p.Messages[0]
	if m.State != "ready" || string(m.Payload) != "m0" || m.ContentType != "text/plain" || m.DLQ == nil ||
		m.DLQ.SourceTopic != "orders" || m.DLQ.Reason != "terminal_nack" {
		t.Fatalf("dead letter 0: %+v", m)
	}
	if p := getMessages(t, b, "topic=orders-dlq&from=2&include_payload=false"); len(p.Messages) != 1 || p.Messages[0].Payload != nil || p.Messages[0].PayloadSize != 2 {
		t.Fatalf("second page: %+v", p)
	}
	testkit.Eventually(t, 5*time.Second, "the origin's messages are settled once their dead letters are durable", func() bool {
		return len(getMessages(t, b, "topic=orders&include_settled=true&status=settled").Messages) == 3
	})
	for _, q := range []struct {
		query string
		code  int
		want  string
	}{
		{"", 400, "topic is required"},
		{"topic=orders-dlq&limit=5001", 400, "limit"},
		{"topic=orders-dlq&status=lost", 400, `lost`},
		{"topic=nope", 404, "not declared"},
		{"topic=orders-dlq&partition=x", 400, "partition"},
	} {
		if code, body := adminDo(t, b, "GET", "/admin/api/messages?"+q.query, ""); code != q.code || !strings.Contains(body, q.want) {
			t.Errorf("messages?%s: %d %s, want %d %q", q.query, code, body, q.code, q.want)
		}
	}

	code, body := adminDo(t, b, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"orders-dlq","offsets":[1,99]}`)
	if code != 200 || !strings.Contains(body, `"replayed_count":1`) || !strings.Contains(body, `"reason":"missing"`) {
		t.Fatalf("replay by offset: %d %s", code, body)
	}
	sub, err := dialClient(ctx, t, b).Subscribe(ctx, "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Payload) != "m1" || d.Headers["k"] != "v1" || d.ContentType != "text/plain" {
		t.Fatalf("the replayed copy: %+v", d)
	}
	for k := range d.Headers {
		if strings.HasPrefix(k, "stroma.") {
			t.Errorf("the copy kept the system header %s", k)
		}
	}
	_ = d.Ack(ctx)
	if p := getMessages(t, b, "topic=orders-dlq"); len(p.Messages) != 3 {
		t.Fatalf("a replay without settle removed dead letters: %+v", p)
	}

	code, body = adminDo(t, b, "POST", "/admin/api/dlq/replay", `{"dlq_topic":"orders-dlq","all":true,"settle":true}`)
	if code != 200 || !strings.Contains(body, `"replayed_count":3`) || strings.Contains(body, `"settled":false`) {
		t.Fatalf("replay all: %d %s", code, body)
	}
	if p := getMessages(t, b, "topic=orders-dlq"); len(p.Messages) != 0 {
		t.Fatalf("after replay all with settle: %+v", p)
	}
	got := map[string]bool{}
	for range 3 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[string(d.Payload)] = true
		_ = d.Ack(ctx)
	}
	if len(got) != 3 {
		t.Fatalf("replayed copies %v", got)
	}
	for _, c := range []struct{ body, want string }{
		{`{"dlq_topic":"orders-dlq","all":true,"offsets":[1]}`, "not both"},
		{`{"dlq_topic":"orders-dlq"}`, "give offsets"},
		{`{"dlq_topic":"orders-dlq","offsets":[` + strings.Repeat("1,", 100) + `1]}`, "at most 100"},
		{`{"dlq_topic":"orders-dlq","offsets":[1],"partition":3}`, "no partition 3"},
		{`{"offsets":[1]}`, "dlq_topic"},
	} {
		if code, body := adminDo(t, b, "POST", "/admin/api/dlq/replay", c.body); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("replay %s: %d %s, want 400 %q", c.body, code, body, c.want)
		}
	}
}

// In a cluster, dead letters reach a DLQ partition on another broker,
// and inspection and replay work from any broker: the DLQ's owner reads,
// the origin partitions' owners take the copies.
func TestMessagesAndReplayCluster(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	// One DLQ partition, on one broker: the owners of the other origin
	// partitions send their dead letters there (RemoteDeadLetter).
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders-dlq"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 3, DLQ: &client.DLQPolicy{Kind: wire.DLQNamed, Topic: "orders-dlq"}}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "orders", "orders-dlq")
	snap := bs[0].cluster.cl.Snapshot()
	dlqOwner, remote := snap.Queue("orders-dlq", "").Parts[0].Node, 0
	for _, p := range snap.Queue("orders", "").Parts {
		if p.Node != dlqOwner {
			remote++
		}
	}
	if remote == 0 {
		t.Fatalf("every origin partition is on the DLQ's owner %s: nothing crosses brokers", dlqOwner)
	}
	// Dead letters from every origin partition: one consumer fails all.
	for p := range uint32(3) {
		publishTo(ctx, t, c, "orders", p, 2)
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Fail(ctx)
	}
	dlqCount := func(b *Broker) int {
		n := 0
		for p := range 1 {
			n += len(getMessages(t, b, fmt.Sprintf("topic=orders-dlq&partition=%d", p)).Messages)
		}
		return n
	}
	for _, b := range bs {
		testkit.Eventually(t, 10*time.Second, "every broker sees the 6 dead letters", func() bool { return dlqCount(b) == 6 })
	}
	code, body := adminDo(t, bs[1], "POST", "/admin/api/dlq/replay", `{"dlq_topic":"orders-dlq","all":true,"settle":true}`)
	if code != 200 || !strings.Contains(body, `"replayed_count":6`) || !strings.Contains(body, `"skipped_count":0`) {
		t.Fatalf("replay all: %d %s", code, body)
	}
	var ans struct {
		Replayed []struct {
			TargetPartition uint32 `json:"target_partition"`
			Settled         bool   `json:"settled"`
		} `json:"replayed"`
	}
	_ = json.Unmarshal([]byte(body), &ans)
	spread := map[uint32]int{}
	for _, r := range ans.Replayed {
		spread[r.TargetPartition]++
		if !r.Settled {
			t.Errorf("a replayed dead letter was not removed: %s", body)
		}
	}
	if len(spread) != 3 {
		t.Errorf("copies went to partitions %v, want all 3", spread)
	}
	got := 0
	for got < 6 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d copies: %v", got, err)
		}
		got++
		_ = d.Ack(ctx)
	}
	if n := dlqCount(bs[2]); n != 0 {
		t.Fatalf("the DLQ after replay all with settle holds %d", n)
	}
}
