package tlsconf

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Reload swaps in valid new material for new handshakes, and rejected
// material leaves the previous pair serving (S-153).
func TestReloadOperatorFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	now := time.Now()
	c1, k1 := ca.leaf(t, "one", []string{"localhost"}, nil, now, now.Add(90*24*time.Hour))
	cp, kp := writePair(t, dir, "server", c1, k1)
	o, logs := fileOptions(cp, kp)
	m := mustLoad(t, o)
	first := m.LeafSHA256()
	client := &tls.Config{RootCAs: ca.pool(), ServerName: "localhost"}

	presented := func() string {
		t.Helper()
		addr, res := serveOnce(t, m.ServerConfig())
		raw, err := dial(t, addr, client)
		if err != nil {
			t.Fatal(err)
		}
		<-res
		return sha256Hex(raw)
	}
	if presented() != first {
		t.Fatal("not serving the loaded pair")
	}

	// Valid replacement.
	c2, k2 := ca.leaf(t, "two", []string{"localhost"}, nil, now, now.Add(90*24*time.Hour))
	writePair(t, dir, "server", c2, k2)
	second, err := m.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second != m.LeafSHA256() || presented() != second {
		t.Fatal("reload did not swap the serving pair")
	}

	// Invalid replacements: mismatched key, expired certificate, garbage.
	_, otherKey := ca.leaf(t, "x", []string{"localhost"}, nil, now, now.Add(time.Hour))
	expired, expiredKey := ca.leaf(t, "x", []string{"localhost"}, nil, now.Add(-48*time.Hour), now.Add(-time.Hour))
	for name, pair := range map[string][2][]byte{
		"mismatch": {c2, otherKey},
		"expired":  {expired, expiredKey},
		"garbage":  {[]byte("not pem"), k2},
	} {
		writePair(t, dir, "server", pair[0], pair[1])
		if sum, err := m.Reload(); err == nil {
			t.Fatalf("%s: reload accepted (%s)", name, sum)
		}
		if m.LeafSHA256() != second || presented() != second {
			t.Fatalf("%s: failed reload changed the serving pair", name)
		}
	}
	if !strings.Contains(logs.String(), "previous certificate keeps serving") {
		t.Errorf("rejection not logged:\n%s", logs)
	}
}

// In auto mode, reload re-mints from the CA when the files no longer fit,
// and otherwise keeps them.
func TestReloadAuto(t *testing.T) {
	data := t.TempDir()
	o, _ := autoOptions(t, data)
	m := mustLoad(t, o)
	first := m.LeafSHA256()
	if sum, err := m.Reload(); err != nil || sum != first {
		t.Fatalf("no-op reload: %s, %v", sum, err)
	}
	srv := filepath.Join(data, DirName, ServerFile)
	if err := os.WriteFile(srv, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := m.Reload()
	if err != nil || sum == first {
		t.Fatalf("damaged server.pem: %s, %v; want a re-mint", sum, err)
	}
	if b, _ := os.ReadFile(srv); bytes.Equal(b, []byte("damaged")) {
		t.Fatal("re-mint did not rewrite server.pem")
	}
}
