package raft

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/plugins"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRegistered(t *testing.T) {
	if _, ok := plugins.BuiltinCoordination("raft"); !ok {
		t.Fatal(`"raft" is not registered`)
	}
}

func TestOptionsFromEnv(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := plugins.CoordinationEnv{
		NodeID:        "n2",
		DataDir:       "/d",
		ClusterSecret: "s",
		Registerer:    reg,
		Config: map[string]string{
			keyPeers:           "n1=127.0.0.1:7001, n2=127.0.0.1:7002,n3=127.0.0.1:7003",
			keyBootstrapExpect: "3",
			keyVoter:           "false",
			keyHeartbeat:       "500",
			keyLivenessTTL:     "3000",
		},
	}
	o, err := OptionsFromEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	if o.Registerer != reg {
		t.Errorf("the registerer was not passed on")
	}
	if o.Listen != "127.0.0.1:7002" {
		t.Errorf("listen defaults to the peers entry: %q", o.Listen)
	}
	if len(o.Peers) != 3 || o.Peers[1] != (Peer{ID: "n2", Addr: "127.0.0.1:7002"}) {
		t.Errorf("peers %+v", o.Peers)
	}
	if o.BootstrapExpect != 3 || !o.NonVoter || o.HeartbeatInterval != 500*time.Millisecond || o.LivenessTTL != 3*time.Second {
		t.Errorf("options %+v", o)
	}
	d, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	// A 3 s liveness TTL keeps raft's default 1 s timeout (MinTTL 2 s).
	if d.RaftTimeout != time.Second || d.minTTL() != 2*time.Second {
		t.Errorf("raft timeout %s", d.RaftTimeout)
	}

	env.Config = map[string]string{}
	if o, _ := OptionsFromEnv(env); o.Listen != DefaultListen || o.NonVoter {
		t.Errorf("defaults: %+v", o)
	}
	for key, val := range map[string]string{
		keyPeers:           "n1",
		keyBootstrapExpect: "x",
		keyVoter:           "maybe",
		keyHeartbeat:       "-1",
		keyLivenessTTL:     "1.5",
	} {
		env.Config = map[string]string{key: val}
		if _, err := OptionsFromEnv(env); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%q: error %v does not name the key", key, val, err)
		}
	}
	env.Config = map[string]string{}
	env.PeerTLS = &plugins.PeerTLS{CAFile: "/nope/ca.pem", CertFile: "/nope/c.pem", KeyFile: "/nope/k.pem"}
	if _, err := OptionsFromEnv(env); err == nil || !strings.Contains(err.Error(), "tls.peer_ca_path") {
		t.Errorf("bad peer TLS: %v", err)
	}
}

func TestOptionsFromEnvPeerTLS(t *testing.T) {
	root := t.TempDir()
	p, err := tlsconf.LoadPeer(tlsconf.PeerOptions{NodeID: "n1", ClusterCAPath: filepath.Join(root, "ca.pem"), Dir: root})
	if err != nil {
		t.Fatal(err)
	}
	f := p.Files()
	o, err := OptionsFromEnv(plugins.CoordinationEnv{NodeID: "n1", PeerTLS: &plugins.PeerTLS{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	if o.TLS == nil || o.TLS.NodeID() != "n1" {
		t.Fatalf("TLS not loaded: %+v", o.TLS)
	}
}

func TestOptionsValidation(t *testing.T) {
	base := Options{NodeID: "n1", DataDir: "/d", Listen: "127.0.0.1:1", Secret: []byte("s")}
	cases := map[string]func(o *Options){
		"coordination.node_id":               func(o *Options) { o.NodeID = "" },
		"data directory":                     func(o *Options) { o.DataDir = "" },
		"coordination.raft.listen":           func(o *Options) { o.Listen = "nope" },
		"coordination.raft.advertise":        func(o *Options) { o.Advertise = "nope" },
		"cluster secret":                     func(o *Options) { o.Secret = nil },
		"twice":                              func(o *Options) { o.Peers = []Peer{{"a", "x:1"}, {"a", "y:1"}} },
		"coordination.raft.bootstrap_expect": func(o *Options) { o.BootstrapExpect = 2; o.Peers = []Peer{{"n1", "x:1"}} },
		"coordination.liveness_ttl_ms":       func(o *Options) { o.HeartbeatInterval = time.Second; o.LivenessTTL = time.Second },
	}
	for want, mod := range cases {
		o := base
		mod(&o)
		if _, err := o.withDefaults(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
	// A short liveness TTL shortens raft's timeout so MinTTL fits in it.
	o := base
	o.HeartbeatInterval, o.LivenessTTL = 100*time.Millisecond, 800*time.Millisecond
	d, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d.minTTL() > o.LivenessTTL {
		t.Fatalf("MinTTL %s above the liveness TTL %s", d.minTTL(), o.LivenessTTL)
	}
	// A long liveness TTL (brokers far apart) lengthens raft's timeout to
	// a quarter of it; the default 4 s keeps 1 s.
	for ttl, want := range map[time.Duration]time.Duration{4 * time.Second: time.Second, 12 * time.Second: 3 * time.Second} {
		o := base
		o.HeartbeatInterval, o.LivenessTTL = time.Second, ttl
		d, err := o.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if d.RaftTimeout != want {
			t.Errorf("liveness TTL %s: raft timeout %s, want %s", ttl, d.RaftTimeout, want)
		}
	}
}

func TestBootstrapperRule(t *testing.T) {
	peers := []Peer{{"b", "x:1"}, {"a", "x:2"}, {"c", "x:3"}}
	for id, want := range map[string]bool{"a": true, "b": false, "c": false, "z": false} {
		o := Options{NodeID: id, Peers: peers, BootstrapExpect: 3}
		if got := o.bootstrapper(); got != want {
			t.Errorf("%s: bootstrapper %v", id, got)
		}
	}
	if (Options{NodeID: "a", Peers: peers}).bootstrapper() {
		t.Error("bootstraps with bootstrap_expect = 0")
	}
	if (Options{NodeID: "a", Peers: peers, BootstrapExpect: 3, NonVoter: true}).bootstrapper() {
		t.Error("a non-voter bootstraps")
	}
}

func TestOpenRefusesNothingToJoin(t *testing.T) {
	ln := reserve(t, 1)[0]
	o, _ := baseOptions(t, "n1", ln, nil, 0)
	if _, err := Open(ctxT(t), o); err == nil || !strings.Contains(err.Error(), "coordination.raft.peers") {
		t.Fatalf("no peers and no state: %v", err)
	}
}

func TestAdvertiseFor(t *testing.T) {
	wild := &net.TCPAddr{IP: net.IPv4zero, Port: 7000}
	if _, err := advertiseFor(Options{Listen: "0.0.0.0:7000"}, wild); err == nil || !strings.Contains(err.Error(), "coordination.raft.advertise") {
		t.Fatalf("wildcard listen without advertise: %v", err)
	}
	if a, err := advertiseFor(Options{Advertise: "node-1.internal:7000"}, wild); err != nil || a != "node-1.internal:7000" {
		t.Fatalf("explicit advertise: %q %v", a, err)
	}
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7001}
	if a, err := advertiseFor(Options{}, lo); err != nil || a != "127.0.0.1:7001" {
		t.Fatalf("derived advertise: %q %v", a, err)
	}
}

// The preamble fails on both sides when the secrets differ, and names the
// reason.
func TestHandshakeSecrets(t *testing.T) {
	for _, tc := range []struct {
		name         string
		dialer, srv  string
		expect       string
		wantOK       bool
		wantErrMatch string
	}{
		{"same secret", "s", "s", "srv", true, ""},
		{"any node", "s", "s", "", true, ""},
		{"wrong secret", "s", "t", "srv", false, "cluster secret mismatch"},
		{"wrong node", "s", "s", "other", false, `"srv" answered where "other" was expected`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			var wg sync.WaitGroup
			var kind byte
			var peer string
			var srvErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				kind, peer, srvErr = serverHandshake(b, "srv", []byte(tc.srv), "")
				if srvErr != nil {
					b.Close()
				}
			}()
			got, err := clientHandshake(a, kindRPC, "dialer", []byte(tc.dialer), tc.expect, "")
			if err != nil {
				a.Close()
			}
			wg.Wait()
			if tc.wantOK {
				if err != nil || srvErr != nil || got != "srv" || peer != "dialer" || kind != kindRPC {
					t.Fatalf("client %v (%q), server %v (%q, %c)", err, got, srvErr, peer, kind)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErrMatch) {
				t.Fatalf("client error %v, want %q", err, tc.wantErrMatch)
			}
			if srvErr == nil {
				t.Fatal("the server accepted")
			}
		})
	}
}
