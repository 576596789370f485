package quic

import (
	"context"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/transport/transporttest"
)

// Rule: quic passes the core.Transport conformance suite every transport
// passes (transport/transporttest), over UDP.
func TestConformance(t *testing.T) {
	transporttest.Run(t, conformanceConfig())
}

func conformanceConfig() transporttest.Config {
	return transporttest.Config{Network: "udp", Open: func(t testing.TB, env plugins.TransportEnv) core.Transport {
		tr, err := Open(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}}
}

func BenchmarkQUIC_Throughput_1streams(b *testing.B) {
	transporttest.Bench(b, conformanceConfig(), 1)
}

func BenchmarkQUIC_Throughput_256streams(b *testing.B) {
	transporttest.Bench(b, conformanceConfig(), 256)
}

func BenchmarkQUIC_RTT_1streams(b *testing.B) {
	transporttest.BenchRTT(b, conformanceConfig(), 1)
}

func BenchmarkQUIC_RTT_256streams(b *testing.B) {
	transporttest.BenchRTT(b, conformanceConfig(), 256)
}
