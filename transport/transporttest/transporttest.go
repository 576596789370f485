// Package transporttest is the conformance suite every core.Transport
// passes — the built-in tcp and quic transports, the external-plugin
// adapter, and third-party transports — plus the test material it needs: a
// throwaway peer CA that mints node certificates.
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Config{Network: "tcp", Open: func(t testing.TB, env plugins.TransportEnv) core.Transport {
//			tr, err := mytransport.Open(context.Background(), env)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return tr
//		}})
//	}
//
// Every test dials 127.0.0.1 only.
package transporttest

import (
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
)

// Config describes the transport under test.
type Config struct {
	// Network is the transport's wire: "tcp" or "udp". The fault tests put
	// a faultproxy of that network between the two ends.
	Network string
	// Open opens the transport for env. The suite fills env.NodeID,
	// env.Bind ("127.0.0.1:0"), env.PeerTLS (from its CA, unless the test
	// runs without TLS) and env.DataDir; the transport closes with the
	// test unless the test closes it first.
	Open func(t testing.TB, env plugins.TransportEnv) core.Transport
	// Plaintext: the transport also runs with env.PeerTLS nil (tcp).
	Plaintext bool
}
