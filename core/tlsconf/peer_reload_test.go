package tlsconf

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The peer certificate follows its files: a new pair for the same node
// from the same CA serves the next handshakes, at once after Reload and
// by itself within peerCheckEvery; a pair that is refused (another
// node's) leaves the serving one in place.
func TestPeerReload(t *testing.T) {
	root := t.TempDir()
	caPath := filepath.Join(root, "ca.pem")
	n1 := autoPeer(t, caPath, root, "n1")
	first := autoPeer(t, caPath, filepath.Join(root, "a"), "n2").Files()
	second := autoPeer(t, caPath, filepath.Join(root, "b"), "n2").Files()
	other := autoPeer(t, caPath, filepath.Join(root, "c"), "n3").Files()

	dir := t.TempDir()
	cert, key := filepath.Join(dir, "peer.pem"), filepath.Join(dir, "peer.key")
	install := func(f PeerFiles) {
		t.Helper()
		for src, dst := range map[string]string{f.KeyFile: key, f.CertFile: cert} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	leafOf := func(f PeerFiles) string {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(pair.Certificate[0])
		return hex.EncodeToString(s[:])
	}
	install(first)
	n2, err := LoadPeer(PeerOptions{NodeID: "n2", CAFile: first.CAFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		t.Helper()
		var got string
		cfg := n1.ClientConfig("n2")
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			s := sha256.Sum256(cs.PeerCertificates[0].Raw)
			got = hex.EncodeToString(s[:])
			return verify(cs)
		}
		if _, sErr, cErr := peerHandshake(n2.ServerConfig(), cfg); sErr != nil || cErr != nil {
			t.Fatalf("handshake: server %v, client %v", sErr, cErr)
		}
		return got
	}
	if got := served(); got != leafOf(first) {
		t.Fatal("not serving the first certificate")
	}
	install(second)
	if changed, err := n2.Reload(); err != nil || !changed {
		t.Fatalf("Reload: %v %v", changed, err)
	}
	if got := served(); got != leafOf(second) {
		t.Fatal("not serving the second certificate after Reload")
	}
	install(other)
	if _, err := n2.Reload(); err == nil || !strings.Contains(err.Error(), `names node "n3"`) {
		t.Fatalf("another node's certificate: %v", err)
	}
	if got := served(); got != leafOf(second) {
		t.Fatal("a refused reload replaced the certificate")
	}
	// Without Reload: the files change, a handshake a second later sees it.
	install(first)
	now := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(cert, now, now) // a distinct stamp even on a coarse clock
	deadline := time.Now().Add(5 * time.Second)
	for served() != leafOf(first) {
		if time.Now().After(deadline) {
			t.Fatal("the rotated files were not picked up by themselves")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n2.NotAfter().IsZero() {
		t.Fatal("NotAfter of the reloaded certificate")
	}
}
