package host_test

import (
	"context"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/plugintest"
	"github.com/fibrilgo/fibril/transport/tcp"
	"github.com/fibrilgo/fibril/transport/transporttest"
)

// external is the tcp transport behind the plugin boundary (gRPC control,
// unix-socket data plane), in this process.
var external = transporttest.Config{
	Network:   "tcp",
	Plaintext: true,
	Open: func(t testing.TB, env plugins.TransportEnv) core.Transport {
		return plugintest.Transport(t, tcp.Open, tcpwrapInfo, env)
	},
}

// inProcess is the same transport linked in, for the benchmarks' ratio.
var inProcess = transporttest.Config{
	Network:   "tcp",
	Plaintext: true,
	Open: func(t testing.TB, env plugins.TransportEnv) core.Transport {
		tr, err := tcp.Open(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	},
}

// The transport conformance suite through the plugin protocol: whatever
// tcp does linked in, it does the same behind the boundary (ends, aborts,
// deadlines, backpressure, faults, peer identity).
func TestTransportConformanceThroughProtocol(t *testing.T) {
	plugintest.TransportConformance(t, tcp.Open, tcpwrapInfo, "tcp", true)
}

// The ratio of these pairs is the cost of the boundary (target: external
// at least 0.6× in-process throughput).
func BenchmarkExternalTCP_Throughput_1stream(b *testing.B)  { transporttest.Bench(b, external, 1) }
func BenchmarkInProcessTCP_Throughput_1stream(b *testing.B) { transporttest.Bench(b, inProcess, 1) }
func BenchmarkExternalTCP_RTT_1stream(b *testing.B)         { transporttest.BenchRTT(b, external, 1) }
func BenchmarkInProcessTCP_RTT_1stream(b *testing.B)        { transporttest.BenchRTT(b, inProcess, 1) }
func BenchmarkExternalTCP_Throughput_8streams(b *testing.B) { transporttest.Bench(b, external, 8) }
func BenchmarkInProcessTCP_Throughput_8streams(b *testing.B) {
	transporttest.Bench(b, inProcess, 8)
}
