package integration

import (
	"context"
	"crypto/tls"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// TestMeasureGatewayUpstreamMemory measures what one idle upstream session
// costs the gateway process (the target: < 64 KiB per idle
// upstream session with quic, 1,000 forwarded client sessions sharing one
// QUIC connection per broker pair). The gateway's heap and stacks (after a
// GC, from its /debug/pprof/heap) are read after 1,000 client sessions
// without a subscription, 1,000 with one it serves, and 1,000 with a
// forwarded one (an upstream session each); forwarded minus bare is the
// upstream's cost on the gateway. A measurement: it
// runs only with FIBRIL_MEASURE=1 and reports with t.Logf.
//
//	FIBRIL_MEASURE=1 go test -run TestMeasureGatewayUpstreamMemory -v -timeout 30m ./integration
func TestMeasureGatewayUpstreamMemory(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") != "1" {
		t.Skip("a measurement; set FIBRIL_MEASURE=1 to run it")
	}
	const n = 1000
	pc := startPrivateCluster(t, "quic")
	setup := pc.client(t)
	if _, err := setup.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "idle", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	local, remote := -1, -1
	for p, o := range pc.placed(pc.nodes[0], "idle", 6) {
		if o == "node-1" {
			local = int(p)
		} else {
			remote = int(p)
		}
	}
	if local < 0 || remote < 0 {
		t.Fatal("placement gave the gateway or the private brokers nothing")
	}
	gw := pc.nodes[0]
	mem := func() float64 {
		// /debug/pprof/heap?gc=1 runs a GC first; its debug=1 text ends with
		// the runtime's MemStats.
		_, body := httpGet(t, gw.Admin, "/debug/pprof/heap?gc=1&debug=1", nil)
		return memStat(body, "HeapInuse") + memStat(body, "StackInuse")
	}
	g := newGuard(t)
	open := func(partition int) []*client.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out := make([]*client.Conn, 0, n)
		for range n {
			c, err := client.DialConn(ctx, gw.Addr, client.ConnConfig{Username: "fibril", Password: "fibril",
				TLS: &tls.Config{InsecureSkipVerify: true}, Dial: g.dial, ReadBufferSize: 4 << 10}) //nolint:gosec // a test broker's own CA
			if err != nil {
				t.Fatal(err)
			}
			if partition >= 0 {
				f, err := c.Do(ctx, wire.OpSubscribe, &wire.Subscribe{Topic: "idle", Partition: uint32(partition), Prefetch: 1})
				if err != nil || f.Op != wire.OpSubscribeOK {
					t.Fatalf("subscribe: %v %v", f.Op, err)
				}
			}
			out = append(out, c)
		}
		return out
	}
	// Sessions without a subscription, with one served here, and with a
	// forwarded one: the last minus the first is the upstream's cost.
	base := mem()
	bare := open(-1)
	afterBare := mem()
	direct := open(local)
	afterDirect := mem()
	forwarded := open(remote)
	afterForwarded := mem()
	perBare := (afterBare - base) / n
	perDirect := (afterDirect - afterBare) / n
	perForwarded := (afterForwarded - afterDirect) / n
	t.Logf("gateway heap+stacks: base %.1f MiB; +%d bare sessions %.1f MiB; +%d with a local subscription %.1f MiB; +%d forwarded %.1f MiB",
		base/(1<<20), n, afterBare/(1<<20), n, afterDirect/(1<<20), n, afterForwarded/(1<<20))
	t.Logf("per session on the gateway: bare %.1f KiB, with a local subscription %.1f KiB, forwarded %.1f KiB; so per idle upstream session %.1f KiB",
		perBare/1024, perDirect/1024, perForwarded/1024, (perForwarded-perBare)/1024)
	// All of them share the gateway's one QUIC connection to the owner.
	_, metrics := httpGet(t, gw.Admin, "/metrics", nil)
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "fibril_transport_quic_connections_open ") {
			t.Logf("QUIC connections open on the gateway with %d upstream sessions: %s", n, strings.TrimPrefix(line, "fibril_transport_quic_connections_open "))
		}
	}
	for _, c := range append(append(bare, direct...), forwarded...) {
		c.Close()
	}
}

// memStat reads "# Name = value" from a heap profile's debug=1 text.
func memStat(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "# "+name+" = "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
