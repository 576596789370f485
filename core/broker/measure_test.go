package broker

import (
	"context"
	"crypto/tls"
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
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
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
