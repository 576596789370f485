package broker

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/tlsconf"
)

// S-152: a client that pins a fingerprint the way the SDKs do connects
// with the CA fingerprint the broker logs (the broker presents its leaf
// and then the CA) and with the leaf's own fingerprint — on the client
// listener, and on the peer listener (the client port shared with peers,
// reached with the peer ALPN, or a dedicated broker.peer_listener.bind),
// where the node's peer certificate comes with the cluster CA.
func TestPinnedFingerprintsConnect(t *testing.T) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"shared port", nil}, {"peer listener", []string{"--broker.peer_listener.bind=127.0.0.1:0"}}} {
		t.Run(mode.name, func(t *testing.T) {
			caPath := filepath.Join(t.TempDir(), "cluster-ca.pem")
			b := startMemClusterWith(t, 1, func(int) []string { return append(tlsFlags(caPath), mode.flags...) })[0]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			connect := func(what, addr, fp, user, password string, peerCert *tls.Certificate) {
				t.Helper()
				tc, err := client.PinnedTLS(fp)
				if err != nil {
					t.Fatal(err)
				}
				if peerCert != nil {
					tc.Certificates = []tls.Certificate{*peerCert}
					tc.NextProtos = []string{tlsconf.PeerALPN}
				}
				c, err := client.DialConn(ctx, addr, client.ConnConfig{TLS: tc, Username: user, Password: password, Dial: loopbackOnly(t)})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				c.Close()
			}
			clientAddr := b.BrokerAddr().String()
			connect("client listener, CA pinned", clientAddr, b.tls.CAFingerprint(), "fibril", "fibril", nil)
			connect("client listener, leaf pinned", clientAddr, b.tls.LeafSHA256(), "fibril", "fibril", nil)

			dir := filepath.Join(b.cfg.Server.DataDir, "tls", "peer")
			pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsconf.PeerFile), filepath.Join(dir, tlsconf.PeerKeyFile))
			if err != nil {
				t.Fatal(err)
			}
			ca, err := os.ReadFile(caPath)
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode(ca)
			if block == nil {
				t.Fatalf("%s holds no certificate", caPath)
			}
			peerAddr := clientAddr
			if a := b.transport.Addr(); a != nil {
				peerAddr = a.String()
			}
			connect("peer listener, cluster CA pinned", peerAddr, tlsconf.Fingerprint(block.Bytes), "@node", "test-secret", &pair)
			connect("peer listener, peer leaf pinned", peerAddr, tlsconf.Fingerprint(pair.Certificate[0]), "@node", "test-secret", &pair)
		})
	}
}
