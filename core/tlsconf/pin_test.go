package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// pinned is core/client's pin check (the SDKs' rule, S-152) for fp.
func pinned(t *testing.T, fp string) *tls.Config {
	t.Helper()
	cfg, err := client.PinnedTLS(fp)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// pinHandshake runs a handshake against server with a client that pins
// fp (and presents cert, if any) and returns the client's error.
func pinHandshake(t *testing.T, server *tls.Config, fp string, cert ...tls.Certificate) error {
	t.Helper()
	cfg := pinned(t, fp)
	cfg.Certificates = cert
	if len(cert) > 0 {
		cfg.NextProtos = []string{PeerALPN}
	}
	_, serverErr, clientErr := peerHandshake(server, cfg)
	if clientErr == nil && serverErr != nil {
		return serverErr
	}
	return clientErr
}

// With tls.auto_self_signed the client listener presents the leaf and
// then the CA that issued it, so an SDK that pins the CA fingerprint the
// broker logs connects; pinning the leaf still works; pinning anything
// else is refused.
func TestClientListenerChainSatisfiesAPinnedCA(t *testing.T) {
	m, _ := autoMaterial(t, "off")
	pair := m.cur.Load()
	if len(pair.Certificate) != 2 || string(pair.Certificate[1]) != string(m.ca.cert.Raw) {
		t.Fatalf("the client listener presents %d certificates, want the leaf and the CA", len(pair.Certificate))
	}
	if err := pinHandshake(t, m.ServerConfig(), m.CAFingerprint()); err != nil {
		t.Fatalf("pinning the CA fingerprint: %v", err)
	}
	if err := pinHandshake(t, m.ServerConfig(), Fingerprint(pair.Certificate[0])); err != nil {
		t.Fatalf("pinning the leaf: %v", err)
	}
	other := newTestCA(t)
	if err := pinHandshake(t, m.ServerConfig(), Fingerprint(other.cert.Raw)); err == nil || !strings.Contains(err.Error(), "pinned fingerprint") {
		t.Fatalf("pinning a foreign CA: %v", err)
	}
	// A re-minted leaf (reload, restart) is presented with the CA too.
	m2 := mustLoad(t, func() Options { o, _ := autoOptions(t, m.opts.DataDir, "broker.test"); return o }())
	if err := pinHandshake(t, m2.ServerConfig(), m.CAFingerprint()); err != nil {
		t.Fatalf("pinning the CA after a restart: %v", err)
	}
}

// Operator material is presented as the certificate file holds it: a
// file with the leaf and its issuing CA satisfies a pin of that CA; a
// file with the leaf alone does not (only a leaf pin does); a CA that is
// in the chain but did not sign the leaf is refused.
func TestOperatorChainIsPresentedAsTheFileHoldsIt(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	certPEM, keyPEM := ca.leaf(t, "broker.test", []string{"broker.test"}, nil, now, now.Add(90*24*time.Hour))
	dir := t.TempDir()
	chainPath, keyPath := writePair(t, dir, "chain", append(append([]byte{}, certPEM...), encodeCert(ca.cert.Raw)...), keyPEM)
	o, _ := fileOptions(chainPath, keyPath)
	m := mustLoad(t, o)
	if err := pinHandshake(t, m.ServerConfig(), Fingerprint(ca.cert.Raw)); err != nil {
		t.Fatalf("pinning the CA the file carries: %v", err)
	}
	leafOnly, _ := writePair(t, dir, "leaf", certPEM, keyPEM)
	o, _ = fileOptions(leafOnly, keyPath)
	m = mustLoad(t, o)
	if err := pinHandshake(t, m.ServerConfig(), Fingerprint(ca.cert.Raw)); err == nil {
		t.Fatal("a CA absent from the presented chain satisfied the pin")
	}
	leaf, _ := x509.ParseCertificate(m.cur.Load().Certificate[0])
	if err := pinHandshake(t, m.ServerConfig(), Fingerprint(leaf.Raw)); err != nil {
		t.Fatalf("pinning the leaf: %v", err)
	}
	stranger := newTestCA(t)
	mixed, _ := writePair(t, dir, "mixed", append(append([]byte{}, certPEM...), encodeCert(stranger.cert.Raw)...), keyPEM)
	o, _ = fileOptions(mixed, keyPath)
	m = mustLoad(t, o)
	if err := pinHandshake(t, m.ServerConfig(), Fingerprint(stranger.cert.Raw)); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("a chain certificate that did not sign the leaf satisfied the pin: %v", err)
	}
}

// The peer listener presents the node's peer certificate and then the
// cluster CA: pinning the cluster CA, or the peer leaf, connects (with a
// peer certificate, as the listener requires); the material loaded back
// from the files (as the transports do) presents the same chain.
func TestPeerListenerChainSatisfiesAPinnedCA(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "cluster-ca.pem")
	n1, n2 := autoPeer(t, caPath, root, "n1"), autoPeer(t, caPath, root, "n2")
	ca := readCert(t, n1.Files().CAFile)
	if err := pinHandshake(t, n1.ServerConfig(), Fingerprint(ca.Raw), *n2.current()); err != nil {
		t.Fatalf("pinning the cluster CA: %v", err)
	}
	if err := pinHandshake(t, n1.ServerConfig(), Fingerprint(n1.current().Certificate[0]), *n2.current()); err != nil {
		t.Fatalf("pinning the peer leaf: %v", err)
	}
	f := n1.Files()
	fromFiles, err := LoadPeer(PeerOptions{NodeID: "n1", CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := pinHandshake(t, fromFiles.ServerConfig(), Fingerprint(ca.Raw), *n2.current()); err != nil {
		t.Fatalf("pinning the cluster CA of material loaded from %s: %v", f.CertFile, err)
	}
}
