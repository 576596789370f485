package integration

// The inter-broker transport (issue 5): real broker processes on embedded
// raft reach one another as peers over tcp (shared client port, TLS), quic,
// and an external transport plugin (contrib/transport-tcpwrap), checked by
// the broker's own peer probe (GET /admin/api/peers: a stream over the
// transport, AUTH as @node, one round trip).

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	tcpwrapOnce sync.Once
	tcpwrapPath string
	tcpwrapErr  error
)

// tcpwrapCatalog builds the example external transport once per run and
// writes a catalog naming it "tcpwrap" with its sha256.
func tcpwrapCatalog(t *testing.T) string {
	t.Helper()
	tcpwrapOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fibril-tcpwrap-")
		if err != nil {
			tcpwrapErr = err
			return
		}
		tcpwrapPath = filepath.Join(dir, "fibril-transport-tcpwrap")
		cmd := exec.Command("go", "build", "-o", tcpwrapPath, "github.com/fibrilgo/fibril/contrib/transport-tcpwrap")
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			tcpwrapErr = fmt.Errorf("building the tcpwrap plugin: %v\n%s", err, out)
		}
	})
	if tcpwrapErr != nil {
		t.Fatal(tcpwrapErr)
	}
	data, err := os.ReadFile(tcpwrapPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	catalog := filepath.Join(t.TempDir(), "plugins.toml")
	entry := fmt.Sprintf("[[plugin]]\nkind = \"transport\"\nname = \"tcpwrap\"\nversion = \"0.1.0\"\ncommand = %q\nsha256 = %q\n",
		tcpwrapPath, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(catalog, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	return catalog
}

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

// Issue 5 §2–§5: every transport carries a peer exchange between broker
// processes, with the peer certificate naming the dialled node.
func TestClusterPeersOverEveryTransport(t *testing.T) {
	setups := []struct {
		name  string
		flags func(t *testing.T) []string
	}{
		{"tcp", func(*testing.T) []string { return nil }},
		{"quic", func(*testing.T) []string { return []string{"--transport.backend=quic"} }},
		{"external-tcpwrap", func(t *testing.T) []string {
			return []string{"--plugins.catalog=" + tcpwrapCatalog(t), "--transport.backend=tcpwrap", "--broker.peer_listener.bind=127.0.0.1:0"}
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
				eventually(t, 20*time.Second, nd.id+" reaches "+other+" over the transport", func() bool {
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
