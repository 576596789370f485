package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// The memory one idle forwarded client session costs
// through a QUIC gateway. N raw client connections subscribe to a partition
// the public broker owns (no upstream), then N others to one a private
// broker owns (one upstream session each, all on one QUIC connection per
// broker pair); the difference per session bounds what an idle upstream
// session costs (gateway side, the owner's session and both QUIC stream
// ends together). A measurement, not a pass/fail test: it runs only with
// FIBRIL_MEASURE=1 and logs its numbers.
//
//	FIBRIL_MEASURE=1 go test -run TestMeasureIdleUpstreams -v ./core/broker
func TestMeasureIdleUpstreams(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") != "1" {
		t.Skip("a measurement: set FIBRIL_MEASURE=1 to run it")
	}
	const n = 1000
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	bs := startMemClusterWith(t, 2, func(i int) []string {
		flags := append(tlsFlags(ca), "--transport.backend=quic")
		if i == 1 {
			flags = append(flags, "--broker.visibility=private")
		}
		return flags
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test brokers have their own CAs
	admin, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()}, Username: "fibril", Password: "fibril", TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.DeclareQueue(ctx, client.QueueSpec{Topic: "idle", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	var local, remote = -1, -1
	testkit.Eventually(t, 5*time.Second, "placement", func() bool {
		q := bs[0].cluster.cl.Snapshot().Queue("idle", "")
		for _, p := range q.Parts {
			if p.Node == "n0" {
				local = int(p.Ref.Partition)
			} else if p.Node == "n1" {
				remote = int(p.Ref.Partition)
			}
		}
		return local >= 0 && remote >= 0
	})
	open := func(partition int) []*client.Conn {
		conns := make([]*client.Conn, 0, n)
		for range n {
			c, err := client.DialConn(ctx, bs[0].BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril", TLS: tc})
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.Do(ctx, wire.OpSubscribe, &wire.Subscribe{Topic: "idle", Partition: uint32(partition), Prefetch: 1})
			if err != nil || f.Op != wire.OpSubscribeOK {
				t.Fatalf("subscribe: %v %v", f.Op, err)
			}
			conns = append(conns, c)
		}
		return conns
	}
	base := heap()
	direct := open(local)
	afterDirect := heap()
	g0 := runtime.NumGoroutine()
	forwarded := open(remote)
	afterForwarded := heap()
	g1 := runtime.NumGoroutine()
	up, _ := bs[0].sessions.ForwardingCounts()
	perDirect := float64(afterDirect-base) / n
	perForwarded := float64(afterForwarded-afterDirect) / n
	t.Logf("%d upstream sessions on the gateway; QUIC connections: one per broker pair", up)
	t.Logf("per direct client session (client + broker session): %.1f KiB", perDirect/1024)
	t.Logf("per forwarded client session (client + gateway session + upstream + owner session + QUIC stream ends): %.1f KiB", perForwarded/1024)
	t.Logf("per upstream session (the difference): %.1f KiB; goroutines per forwarded session: %.1f", (perForwarded-perDirect)/1024, float64(g1-g0)/n)
	for _, c := range append(direct, forwarded...) {
		c.Close()
	}
}

// The memory one idle stream subscription costs on the broker side: n raw
// connections each subscribe to a queue partition (nothing to read), then
// n others each to a stream partition (a durable name, a reader goroutine
// waiting for records); the difference per connection is the stream
// subscription's cost over a queue subscription's (both counts include
// the client connection, the same on both sides). A measurement, not a
// pass/fail test: it runs only with FIBRIL_MEASURE=1 and logs its numbers.
//
//	FIBRIL_MEASURE=1 go test -run TestMeasureIdleStreamSubscriptions -v ./core/broker
func TestMeasureIdleStreamSubscriptions(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") != "1" {
		t.Skip("a measurement: set FIBRIL_MEASURE=1 to run it")
	}
	const n = 1000
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := dialClient(ctx, t, b)
	if _, err := admin.DeclareQueue(ctx, client.QueueSpec{Topic: "q", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DeclareStream(ctx, client.StreamSpec{Topic: "s", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	open := func(op wire.Op, body func(i int) wire.Encoder) []*client.Conn {
		conns := make([]*client.Conn, 0, n)
		for i := range n {
			c, err := client.DialConn(ctx, b.BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril", ReadBufferSize: 4 << 10})
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.Do(ctx, op, body(i))
			if err != nil || f.Op != wire.OpSubscribeOK {
				t.Fatalf("subscribe: %v %v", f.Op, err)
			}
			conns = append(conns, c)
		}
		return conns
	}
	base := heap()
	g0 := runtime.NumGoroutine()
	queues := open(wire.OpSubscribe, func(int) wire.Encoder { return &wire.Subscribe{Topic: "q", Prefetch: 32} })
	afterQueues := heap()
	g1 := runtime.NumGoroutine()
	streams := open(wire.OpSubscribeStream, func(i int) wire.Encoder {
		return &wire.SubscribeStream{Topic: "s", DurableName: wire.Some(fmt.Sprint("reader-", i)), Prefetch: 32}
	})
	afterStreams := heap()
	g2 := runtime.NumGoroutine()
	perQueue := float64(afterQueues-base) / n
	perStream := float64(afterStreams-afterQueues) / n
	t.Logf("per connection with an idle queue subscription: %.1f KiB, %.1f goroutines", perQueue/1024, float64(g1-g0)/n)
	t.Logf("per connection with an idle durable stream subscription: %.1f KiB, %.1f goroutines", perStream/1024, float64(g2-g1)/n)
	t.Logf("an idle stream subscription over a queue subscription: %.1f KiB", (perStream-perQueue)/1024)
	for _, c := range append(queues, streams...) {
		c.Close()
	}
}

// heap is the heap and stacks in use after two collections: what a
// measurement counts as memory held.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
