package tlsconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// autoPeer loads auto peer material for id under root, sharing ca.
func autoPeer(t *testing.T, caPath, root, id string) *Peer {
	t.Helper()
	p, err := LoadPeer(PeerOptions{NodeID: id, ClusterCAPath: caPath, Dir: filepath.Join(root, id)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// peerHandshake runs one TLS handshake over a pipe and returns the node id
// the server saw and both sides' errors.
func peerHandshake(server, client *tls.Config) (clientID string, serverErr, clientErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := tls.Server(a, server)
		serverErr = s.Handshake()
		clientID = PeerNodeID(s.ConnectionState())
		if serverErr != nil {
			_ = a.Close() // unblock the client
		}
	}()
	c := tls.Client(b, client)
	clientErr = c.Handshake()
	if clientErr == nil {
		// TLS 1.3: the server's verdict on our certificate arrives with
		// the first read.
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var one [1]byte
		if _, err := c.Read(one[:]); err != nil && !isTimeout(err) {
			clientErr = err
		}
	}
	if clientErr != nil {
		_ = b.Close()
	}
	wg.Wait()
	return clientID, serverErr, clientErr
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestPeerAutoSharedCAConcurrent(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "shared", "cluster-ca.pem")
	ids := []string{"n1", "n2", "n3", "n4"}
	peers := make([]*Peer, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peers[i], errs[i] = LoadPeer(PeerOptions{NodeID: id, ClusterCAPath: caPath, Dir: filepath.Join(root, id)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", ids[i], err)
		}
	}
	ca0, err := os.ReadFile(peers[0].Files().CAFile)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range peers {
		ca, _ := os.ReadFile(p.Files().CAFile)
		if !bytes.Equal(ca, ca0) {
			t.Fatalf("%s got another CA than %s", ids[i], ids[0])
		}
		leaf := readCert(t, p.Files().CertFile)
		if got := CertNodeID(leaf); got != ids[i] {
			t.Fatalf("%s: certificate names %q", ids[i], got)
		}
		if Identity(leaf) != "" {
			t.Fatalf("%s: a peer certificate maps to user %q", ids[i], Identity(leaf))
		}
		if mode(t, p.Files().KeyFile) != 0o600 {
			t.Fatalf("%s: key mode %o", ids[i], mode(t, p.Files().KeyFile))
		}
	}
	if mode(t, caPath) != 0o600 {
		t.Fatalf("cluster CA mode %o", mode(t, caPath))
	}
	// No temporary files are left behind by the losers of the race.
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(caPath), ".*tmp*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestPeerMutualHandshake(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "ca.pem")
	n1, n2 := autoPeer(t, caPath, root, "n1"), autoPeer(t, caPath, root, "n2")

	id, sErr, cErr := peerHandshake(n2.ServerConfig(), n1.ClientConfig("n2"))
	if sErr != nil || cErr != nil {
		t.Fatalf("handshake: server %v, client %v", sErr, cErr)
	}
	if id != "n1" {
		t.Fatalf("server saw client node %q, want n1", id)
	}
	// Any node is accepted when the dialer does not know whom to expect.
	if _, sErr, cErr := peerHandshake(n2.ServerConfig(), n1.ClientConfig("")); sErr != nil || cErr != nil {
		t.Fatalf("handshake without expectation: server %v, client %v", sErr, cErr)
	}
	// The wrong node at the address is refused by the dialer.
	_, _, cErr = peerHandshake(n2.ServerConfig(), n1.ClientConfig("n3"))
	if cErr == nil || !strings.Contains(cErr.Error(), `names node "n2", expected "n3"`) {
		t.Fatalf("wrong node accepted: %v", cErr)
	}
}

func TestPeerForeignCARefused(t *testing.T) {
	root := t.TempDir()
	mine := autoPeer(t, filepath.Join(root, "a", "ca.pem"), root, "n1")
	other := autoPeer(t, filepath.Join(root, "b", "ca.pem"), filepath.Join(root, "b"), "n2")

	// A client from another cluster is refused by the server...
	if _, sErr, _ := peerHandshake(mine.ServerConfig(), other.ClientConfig("n1")); sErr == nil {
		t.Fatal("server accepted a client certificate from a foreign CA")
	}
	// ...and a server from another cluster by the client.
	if _, _, cErr := peerHandshake(other.ServerConfig(), mine.ClientConfig("n2")); cErr == nil {
		t.Fatal("client accepted a server certificate from a foreign CA")
	}
}

func TestPeerCertWithoutNodeRefused(t *testing.T) {
	root := t.TempDir()
	n1 := autoPeer(t, filepath.Join(root, "ca.pem"), root, "n1")
	ca, err := readClusterCA(filepath.Join(root, "ca.pem"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// A certificate from the right CA that names no node (say, a client
	// certificate for a user) is no peer.
	tc := testCA{cert: ca.cert, key: mustECDSAKey(t, ca)}
	plain := tc.clientCert(t, "alice", "alice")
	cfg := n1.ClientConfig("n1")
	cfg.Certificates, cfg.GetClientCertificate = []tls.Certificate{plain}, nil
	if _, sErr, _ := peerHandshake(n1.ServerConfig(), cfg); sErr == nil || !strings.Contains(sErr.Error(), "names no node") {
		t.Fatalf("server accepted a certificate naming no node: %v", sErr)
	}
}

func TestPeerReuseAndRemint(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "ca.pem")
	dir := filepath.Join(root, "node")
	log, lb := testLogger()
	p1, err := LoadPeer(PeerOptions{NodeID: "n1", ClusterCAPath: caPath, Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(p1.Files().CertFile)
	if !strings.Contains(lb.String(), "generated the peer cluster CA") {
		t.Fatalf("no CA generation logged: %s", lb)
	}
	if _, err := LoadPeer(PeerOptions{NodeID: "n1", ClusterCAPath: caPath, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(p1.Files().CertFile)
	if !bytes.Equal(first, again) {
		t.Fatal("a fitting certificate was re-minted")
	}
	// The node id changed (the data dir was reused by another node):
	// re-mint for the new id.
	p2, err := LoadPeer(PeerOptions{NodeID: "n9", ClusterCAPath: caPath, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := CertNodeID(readCert(t, p2.Files().CertFile)); got != "n9" {
		t.Fatalf("certificate names %q after the id changed", got)
	}
	// Close to expiry: re-mint.
	later := time.Now().Add(serverLifetime - renewBefore/2)
	if _, err := LoadPeer(PeerOptions{NodeID: "n9", ClusterCAPath: caPath, Dir: dir, now: at(later)}); err != nil {
		t.Fatal(err)
	}
	if leaf := readCert(t, p2.Files().CertFile); leaf.NotAfter.Before(later.Add(renewBefore)) {
		t.Fatalf("expiring certificate kept: not after %s", leaf.NotAfter)
	}
}

func TestPeerExplicitFiles(t *testing.T) {
	root := t.TempDir()
	auto := autoPeer(t, filepath.Join(root, "ca.pem"), root, "n1")
	f := auto.Files()
	p, err := LoadPeer(PeerOptions{NodeID: "n1", CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if p.Files() != f {
		t.Fatalf("files %+v, want %+v", p.Files(), f)
	}
	// The certificate must name this node.
	_, err = LoadPeer(PeerOptions{NodeID: "n2", CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile})
	if err == nil || !strings.Contains(err.Error(), "tls.cert_path") || !strings.Contains(err.Error(), "urn:fibril:node:n2") {
		t.Fatalf("a certificate for another node was accepted: %v", err)
	}
	// The CA is mandatory.
	_, err = LoadPeer(PeerOptions{NodeID: "n1", CertFile: f.CertFile, KeyFile: f.KeyFile})
	if err == nil || !strings.Contains(err.Error(), "tls.peer_ca_path") {
		t.Fatalf("missing CA: %v", err)
	}
	// A CA that did not sign the certificate.
	other := autoPeer(t, filepath.Join(root, "other", "ca.pem"), filepath.Join(root, "other"), "n1")
	_, err = LoadPeer(PeerOptions{NodeID: "n1", CAFile: other.Files().CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile})
	if err == nil || !strings.Contains(err.Error(), "does not verify against tls.peer_ca_path") {
		t.Fatalf("foreign CA: %v", err)
	}
}

func TestPeerOptionErrors(t *testing.T) {
	for name, o := range map[string]PeerOptions{
		"no id":        {ClusterCAPath: "x", Dir: "y"},
		"no source":    {NodeID: "n1"},
		"both sources": {NodeID: "n1", CAFile: "a", ClusterCAPath: "b", Dir: "c"},
		"auto no dir":  {NodeID: "n1", ClusterCAPath: "b"},
	} {
		if _, err := LoadPeer(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestPeerBrokenClusterCA(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "ca.pem")
	if err := os.WriteFile(caPath, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadPeer(PeerOptions{NodeID: "n1", ClusterCAPath: caPath, Dir: filepath.Join(root, "n1")})
	if err == nil || !strings.Contains(err.Error(), caPath) {
		t.Fatalf("a broken CA file was not reported: %v", err)
	}
}

func TestNodeURI(t *testing.T) {
	u := NodeURI("node_1.a-b")
	if u.String() != "urn:fibril:node:node_1.a-b" {
		t.Fatalf("uri %q", u)
	}
	parsed, err := url.Parse(u.String())
	if err != nil || parsed.String() != u.String() {
		t.Fatalf("round trip: %v %v", parsed, err)
	}
}

func mustECDSAKey(t *testing.T, ca *autoCA) *ecdsa.PrivateKey {
	t.Helper()
	k, ok := ca.key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("CA key is %T", ca.key)
	}
	return k
}
