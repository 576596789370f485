package transporttest

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/plugins"
)

// CA is a throwaway cluster CA in a test's temporary directory; it mints
// node certificates the way a dev cluster's auto peer TLS does
// (tlsconf.LoadPeer with an auto cluster CA), so the suite exercises the
// material brokers really use.
//
// A certificate from a different CA — a node outside the cluster — is a
// node of a second CA: NewCA(t).Node(t, "x").
type CA struct {
	dir  string
	path string

	mu    sync.Mutex
	nodes map[string]*plugins.PeerTLS
}

// NewCA creates a CA whose files live as long as t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	return &CA{dir: dir, path: filepath.Join(dir, "cluster-ca.pem"), nodes: make(map[string]*plugins.PeerTLS)}
}

// Node returns the peer TLS files of node id (its certificate names the
// node in a URI SAN), minting them on first use.
func (ca *CA) Node(t testing.TB, id string) *plugins.PeerTLS {
	t.Helper()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if p, ok := ca.nodes[id]; ok {
		return p
	}
	p, err := tlsconf.LoadPeer(tlsconf.PeerOptions{
		NodeID:        id,
		ClusterCAPath: ca.path,
		Dir:           filepath.Join(ca.dir, "nodes", id),
	})
	if err != nil {
		t.Fatalf("transporttest: mint the peer certificate of %q: %v", id, err)
	}
	f := p.Files()
	pt := &plugins.PeerTLS{CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}
	ca.nodes[id] = pt
	return pt
}
