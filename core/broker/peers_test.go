package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/tlsconf"
	_ "github.com/fibrilgo/fibril/transport/quic"
	_ "github.com/fibrilgo/fibril/transport/tcp"
)

// In coordinated mode the effective peer address must be one
// other brokers can dial: never unspecified, and loopback only while the
// coordination peers are on loopback too.
func TestCheckPeerAddr(t *testing.T) {
	load := func(args ...string) *config.Config {
		cfg, _, err := config.Load(append([]string{"--coordination.backend=raft"}, args...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	loopPeers := load("--coordination.raft.peers=a=127.0.0.1:7001,b=127.0.0.1:7002")
	lanPeers := load("--coordination.raft.peers=a=10.1.2.3:7001,b=10.1.2.4:7002")
	cases := []struct {
		addr string
		cfg  *config.Config
		want string // substring of the error; "" = accepted
	}{
		{"127.0.0.1:9876", loopPeers, ""},
		{"[::1]:9876", loopPeers, ""},
		{"broker-1.internal:9876", lanPeers, ""},
		{"10.1.2.3:9876", lanPeers, ""},
		{"0.0.0.0:9876", loopPeers, "unspecified"},
		{"[::]:9876", lanPeers, "unspecified"},
		{"127.0.0.1:9876", lanPeers, "loopback but coordination peers are not"},
		{"127.0.0.1:0", loopPeers, "no usable port"},
		{"no-port", loopPeers, "not host:port"},
	}
	for _, c := range cases {
		err := checkPeerAddr(c.addr, c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.addr, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error containing %q", c.addr, err, c.want)
		case err != nil && !strings.Contains(err.Error(), "broker.peer_advertise"):
			t.Errorf("%s: the error must name broker.peer_advertise: %v", c.addr, err)
		}
	}
}

// peerFlags configures a transport for the peer tests; ca is the shared
// cluster CA file of the test (auto peer material).
type peerSetup struct {
	name  string
	flags func(ca string) []string
	tls   bool
}

var peerSetups = []peerSetup{
	{name: "tcp-plaintext-shared", flags: func(string) []string { return nil }},
	{name: "tcp-tls-shared", tls: true, flags: tlsFlags},
	{name: "tcp-tls-dedicated", tls: true, flags: func(ca string) []string {
		return append(tlsFlags(ca), "--broker.peer_listener.bind=127.0.0.1:0")
	}},
	{name: "quic", tls: true, flags: func(ca string) []string {
		return append(tlsFlags(ca), "--transport.backend=quic")
	}},
}

type probeAnswer struct {
	Node      string `json:"node"`
	Transport string `json:"transport"`
	PeerAddr  string `json:"peer_addr"`
	Peers     []struct {
		Node, Error  string
		PeerAddr     string `json:"peer_addr"`
		OK           bool
		VerifiedNode string `json:"verified_node"`
	} `json:"peers"`
}

// On every transport setup, each broker reaches the other as a
// peer — a stream over transport.backend, AUTH as @node, one round trip —
// and with inter-broker TLS the certificate names the dialled node.
func TestPeersProbeEveryTransport(t *testing.T) {
	for _, ps := range peerSetups {
		t.Run(ps.name, func(t *testing.T) {
			ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
			bs := startMemClusterWith(t, 2, func(int) []string { return ps.flags(ca) })
			for i, b := range bs {
				other := fmt.Sprintf("n%d", 1-i)
				var ans probeAnswer
				testkit.Eventually(t, 5*time.Second, "the peer probe succeeds", func() bool {
					code, body := adminDo(t, b, "GET", "/admin/api/peers", "")
					if code != 200 {
						t.Fatalf("GET /admin/api/peers = %d %s", code, body)
					}
					ans = probeAnswer{}
					if err := json.Unmarshal([]byte(body), &ans); err != nil {
						t.Fatal(err)
					}
					return len(ans.Peers) == 1 && ans.Peers[0].OK
				})
				p := ans.Peers[0]
				if p.Node != other {
					t.Fatalf("probed %q, want %q", p.Node, other)
				}
				if want := map[bool]string{true: other, false: ""}[ps.tls]; p.VerifiedNode != want {
					t.Fatalf("verified node %q, want %q", p.VerifiedNode, want)
				}
				if host, _, _ := net.SplitHostPort(ans.PeerAddr); host != "127.0.0.1" {
					t.Fatalf("peer address %q", ans.PeerAddr)
				}
			}
		})
	}
}

// With inter-broker TLS on a shared port, the cluster secret
// alone does not make a peer (AUTH_ERR 401), a peer certificate presented
// without the peer ALPN still does (verified against the peer CA), and a
// certificate from another CA never completes the peer handshake.
func TestNodeLoginNeedsPeerCertificate(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	bs := startMemClusterWith(t, 2, func(int) []string { return tlsFlags(ca) })
	addr := bs[0].BrokerAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(tc *tls.Config) error {
		c, err := client.DialConn(ctx, addr, client.ConnConfig{TLS: tc, Username: "@node", Password: "test-secret"})
		if err == nil {
			c.Close()
		}
		return err
	}
	// No certificate: refused, and the refusal says why.
	err := dial(&tls.Config{InsecureSkipVerify: true})
	if err == nil || !strings.Contains(err.Error(), "inter-broker TLS") {
		t.Fatalf("@node without a peer certificate: %v", err)
	}
	// n1's own peer certificate, no ALPN: accepted.
	dir := filepath.Join(bs[1].cfg.Server.DataDir, "tls", "peer")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsconf.PeerFile), filepath.Join(dir, tlsconf.PeerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}); err != nil {
		t.Fatalf("@node with n1's peer certificate: %v", err)
	}
	// A node certificate from another cluster CA, offering the peer ALPN:
	// the handshake fails.
	foreign, err := tlsconf.LoadPeer(tlsconf.PeerOptions{NodeID: "n1", ClusterCAPath: filepath.Join(t.TempDir(), "other-ca.pem"), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cc := foreign.ClientConfig("n0")
	raw, err := tls.Dial("tcp", addr, cc)
	if err == nil {
		// TLS 1.3: the server's verdict on our certificate arrives with the first read.
		_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = raw.Read(make([]byte, 1))
		raw.Close()
	}
	if err == nil {
		t.Fatal("a peer certificate from another CA completed the handshake")
	}
}

// Configurations peers could not use fail at start, naming
// the keys to change.
func TestStartRefusesUnusablePeerConfig(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	cases := []struct {
		name  string
		flags []string
		want  []string
	}{
		{"quic without TLS", []string{"--transport.backend=quic"}, []string{"transport.backend = quic", "tls.inter_broker", "tls.peer_ca_path"}},
		{"shared port, inter_broker differs", append(tlsFlags(ca), "--tls.inter_broker=false"), []string{"tls.inter_broker", "tls.enabled", "broker.peer_listener.bind"}},
		{"unspecified peer address", []string{"--broker.peer_advertise=0.0.0.0:9876"}, []string{"broker.peer_advertise", "unspecified"}},
		{"unknown transport", []string{"--transport.backend=carrier-pigeon", "--broker.peer_listener.bind=127.0.0.1:0"}, []string{"transport", "carrier-pigeon", "tcp"}},
		{"external transport without its own port", []string{"--transport.backend=carrier-pigeon"}, []string{"carrier-pigeon", "broker.peer_listener.bind"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{
				"--server.data_dir=" + t.TempDir(),
				"--broker.listener.bind=127.0.0.1:0",
				"--admin.listener.bind=127.0.0.1:0",
				"--coordination.backend=memtest",
				"--coordination.raft.peers=" + memName(t) + "=127.0.0.1:1",
				"--coordination.node_id=n0",
			}, c.flags...)
			cfg, _, err := config.Load(args, []string{"FIBRIL_CLUSTER_SECRET=test-secret"})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Start(cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				_ = b.Shutdown()
				t.Fatal("started")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
