package integration

// The inter-broker transport: real broker processes on embedded
// raft reach one another as peers over tcp (shared client port, TLS), quic,
// and an external transport plugin (contrib/transport-tcpwrap), checked by
// the broker's own peer probe (GET /admin/api/peers: a stream over the
// transport, AUTH as @node, one round trip).

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

type peersAnswer struct {
	Node      string `json:"node"`
	Transport string `json:"transport"`
	PeerAddr  string `json:"peer_addr"`
	Peers     []struct {
		Node         string `json:"node"`
		OK           bool   `json:"ok"`
		VerifiedNode string `json:"verified_node"`
		Error        string `json:"error"`
	} `json:"peers"`
}

// Every transport carries a peer exchange between broker
// processes, with the peer certificate naming the dialled node.
func TestClusterPeersOverEveryTransport(t *testing.T) {
	setups := []struct {
		name  string
		flags func(t *testing.T) []string
	}{
		{"tcp", func(*testing.T) []string { return nil }},
		{"quic", func(*testing.T) []string { return []string{"--transport.backend=quic"} }},
		{"external-tcpwrap", func(t *testing.T) []string {
			catalog, _ := pluginCatalog(t, "github.com/fibrilgo/fibril/contrib/transport-tcpwrap", "transport", "tcpwrap")
			return []string{"--plugins.catalog=" + catalog, "--transport.backend=tcpwrap", "--broker.peer_listener.bind=127.0.0.1:0"}
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
			flags := append([]string{"--tls.enabled", "--tls.auto_self_signed", "--tls.peer_ca_path=" + ca, "--tls.admin_enabled=false"}, s.flags(t)...)
			rc := startRaftCluster(t, 2, flags...)
			for i, nd := range rc.nodes {
				other := rc.nodes[1-i].id
				var ans peersAnswer
				testkit.Eventually(t, 20*time.Second, nd.id+" reaches "+other+" over the transport", func() bool {
					code, body := httpGet(t, nd.Admin, "/admin/api/peers", nil)
					if code != 200 {
						t.Fatalf("GET /admin/api/peers = %d %s", code, body)
					}
					ans = peersAnswer{}
					if err := json.Unmarshal([]byte(body), &ans); err != nil {
						t.Fatal(err)
					}
					return len(ans.Peers) == 1 && ans.Peers[0].OK
				})
				if p := ans.Peers[0]; p.Node != other || p.VerifiedNode != other {
					t.Fatalf("%s probed %+v, want node and certificate %s", nd.id, p, other)
				}
				if want := map[string]string{"external-tcpwrap": "tcpwrap"}[s.name]; want != "" && ans.Transport != want {
					t.Fatalf("transport %q, want %q", ans.Transport, want)
				}
			}
		})
	}
}
