package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAutoGeneratesLayout(t *testing.T) {
	data := t.TempDir()
	o, logs := autoOptions(t, data, "broker.example.com:9876", "10.1.2.3", "[2001:db8::5]:9876", "0.0.0.0:9876", "Admin.Example.com.")
	m := mustLoad(t, o)
	dir := filepath.Join(data, DirName)

	if got := mode(t, dir); got != 0o700 {
		t.Errorf("tls dir mode = %04o, want 0700", got)
	}
	for name, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, ServerFile: 0o644, ServerKeyFile: 0o600} {
		if got := mode(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s mode = %04o, want %04o", name, got, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("tls dir holds %d entries, want 4", len(entries))
	}

	ca := readCert(t, filepath.Join(dir, CAFile))
	srv := readCert(t, filepath.Join(dir, ServerFile))
	if !ca.IsCA || ca.NotAfter.Sub(ca.NotBefore) < 9*365*24*time.Hour {
		t.Errorf("CA: IsCA=%v lifetime=%v", ca.IsCA, ca.NotAfter.Sub(ca.NotBefore))
	}
	if life := srv.NotAfter.Sub(srv.NotBefore); life < 364*24*time.Hour || life > 367*24*time.Hour {
		t.Errorf("server lifetime = %v, want about a year", life)
	}
	for _, c := range []*x509.Certificate{ca, srv} {
		pub, ok := c.PublicKey.(*ecdsa.PublicKey)
		if !ok || pub.Curve != elliptic.P256() {
			t.Errorf("%s: key is not ECDSA P-256", c.Subject.CommonName)
		}
	}
	if err := srv.CheckSignatureFrom(ca); err != nil {
		t.Errorf("server certificate not signed by the CA: %v", err)
	}
	if !slices.Contains(srv.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(srv.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("server EKU = %v, want serverAuth and clientAuth", srv.ExtKeyUsage)
	}
	wantDNS := []string{"broker.example.com", "admin.example.com", "localhost"}
	if !slices.Equal(srv.DNSNames, wantDNS) {
		t.Errorf("DNS SANs = %v, want %v", srv.DNSNames, wantDNS)
	}
	var ips []string
	for _, ip := range srv.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"10.1.2.3", "2001:db8::5", "127.0.0.1", "::1"}; !slices.Equal(ips, want) {
		t.Errorf("IP SANs = %v, want %v", ips, want)
	}

	fp := m.CAFingerprint()
	if !regexp.MustCompile(`^([0-9A-F]{2}:){31}[0-9A-F]{2}$`).MatchString(fp) || fp != Fingerprint(ca.Raw) {
		t.Errorf("CA fingerprint %q", fp)
	}
	if !strings.Contains(logs.String(), fp) || !strings.Contains(logs.String(), "level=INFO") {
		t.Errorf("fingerprint not logged at Info:\n%s", logs)
	}
	if m.LeafSHA256() != sha256Hex(srv.Raw) || len(m.LeafSHA256()) != 64 {
		t.Errorf("LeafSHA256 = %q", m.LeafSHA256())
	}
	if !m.NotAfter().Equal(srv.NotAfter) {
		t.Errorf("NotAfter = %v, want %v", m.NotAfter(), srv.NotAfter)
	}
}

func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range []string{CAFile, CAKeyFile, ServerFile, ServerKeyFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err == nil {
			out[f] = string(b)
		}
	}
	return out
}

func TestAutoRestartReuses(t *testing.T) {
	data := t.TempDir()
	o, _ := autoOptions(t, data, "broker.example.com")
	m1 := mustLoad(t, o)
	before := snapshot(t, filepath.Join(data, DirName))
	o2, logs := autoOptions(t, data, "broker.example.com:9876")
	m2 := mustLoad(t, o2)
	if m1.CAFingerprint() != m2.CAFingerprint() || m1.LeafSHA256() != m2.LeafSHA256() {
		t.Fatal("restart changed the material")
	}
	if after := snapshot(t, filepath.Join(data, DirName)); !mapsEqual(before, after) {
		t.Fatal("restart rewrote files")
	}
	if strings.Contains(logs.String(), "minted") || strings.Contains(logs.String(), "generated") {
		t.Fatalf("restart minted something:\n%s", logs)
	}
	if !strings.Contains(logs.String(), m1.CAFingerprint()) {
		t.Fatal("fingerprint not logged on restart")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A cluster shares one CA: copying ca.pem and ca.key into a fresh node's
// directory makes it mint its own server certificate from that CA.
func TestAutoSharedCAOnly(t *testing.T) {
	first := t.TempDir()
	o1, _ := autoOptions(t, first, "node-a.example.com")
	m1 := mustLoad(t, o1)
	second := t.TempDir()
	dst := filepath.Join(second, DirName)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAFile, CAKeyFile} {
		b, _ := os.ReadFile(filepath.Join(first, DirName, f))
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o, logs := autoOptions(t, second, "node-b.example.com")
	m2 := mustLoad(t, o)
	if m2.CAFingerprint() != m1.CAFingerprint() {
		t.Fatal("second node generated its own CA")
	}
	if m2.LeafSHA256() == m1.LeafSHA256() {
		t.Fatal("second node reused the first node's leaf")
	}
	srv := readCert(t, filepath.Join(dst, ServerFile))
	if !slices.Contains(srv.DNSNames, "node-b.example.com") {
		t.Fatalf("minted SANs %v", srv.DNSNames)
	}
	if !strings.Contains(logs.String(), "no server certificate yet") {
		t.Fatalf("mint reason not logged:\n%s", logs)
	}
}

func TestAutoReMintsOnNewSAN(t *testing.T) {
	data := t.TempDir()
	o, _ := autoOptions(t, data, "a.example.com")
	m1 := mustLoad(t, o)
	o, logs := autoOptions(t, data, "a.example.com", "b.example.com", "192.0.2.7")
	m2 := mustLoad(t, o)
	if m2.LeafSHA256() == m1.LeafSHA256() || m2.CAFingerprint() != m1.CAFingerprint() {
		t.Fatal("new SAN did not re-mint the leaf (or changed the CA)")
	}
	if !strings.Contains(logs.String(), "does not cover b.example.com, 192.0.2.7") {
		t.Fatalf("reason not logged:\n%s", logs)
	}
	// Dropping a host keeps the broader certificate.
	o, _ = autoOptions(t, data, "b.example.com")
	if m3 := mustLoad(t, o); m3.LeafSHA256() != m2.LeafSHA256() {
		t.Fatal("a narrower host list re-minted")
	}
}

func TestAutoReMintsNearExpiry(t *testing.T) {
	data := t.TempDir()
	o, _ := autoOptions(t, data)
	m1 := mustLoad(t, o)
	o, _ = autoOptions(t, data)
	o.now = at(time.Now().Add(300 * 24 * time.Hour))
	if mustLoad(t, o).LeafSHA256() != m1.LeafSHA256() {
		t.Fatal("re-minted with 65 days left")
	}
	o, logs := autoOptions(t, data)
	o.now = at(time.Now().Add(340 * 24 * time.Hour))
	m3 := mustLoad(t, o)
	if m3.LeafSHA256() == m1.LeafSHA256() || !strings.Contains(logs.String(), "expires on") {
		t.Fatalf("did not re-mint with 25 days left:\n%s", logs)
	}
	if m3.NotAfter().Before(time.Now().Add(600 * 24 * time.Hour)) {
		t.Fatalf("re-minted leaf expires %v, want a year after the (moved) clock", m3.NotAfter())
	}
}

// The CA key may be moved offline once the server certificate exists.
func TestAutoWithoutCAKey(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, DirName)
	o, _ := autoOptions(t, data, "a.example.com")
	m1 := mustLoad(t, o)
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	o, _ = autoOptions(t, data, "a.example.com")
	if m := mustLoad(t, o); m.LeafSHA256() != m1.LeafSHA256() {
		t.Fatal("leaf changed without a CA key")
	}
	// Needs a new SAN but cannot mint: serves the old pair with a warning.
	o, logs := autoOptions(t, data, "a.example.com", "new.example.com")
	if m := mustLoad(t, o); m.LeafSHA256() != m1.LeafSHA256() || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("want the old leaf with a warning:\n%s", logs)
	}
	// No usable server certificate and no key: error naming ca.key.
	_ = os.Remove(filepath.Join(dir, ServerFile))
	o, _ = autoOptions(t, data)
	if _, err := Load(o); err == nil || !strings.Contains(err.Error(), CAKeyFile) {
		t.Fatalf("err = %v, want one naming %s", err, CAKeyFile)
	}
}

func TestAutoRefusesHalfPresentCA(t *testing.T) {
	// ca.key alone.
	data := t.TempDir()
	o, _ := autoOptions(t, data)
	mustLoad(t, o)
	dir := filepath.Join(data, DirName)
	_ = os.Remove(filepath.Join(dir, CAFile))
	if _, err := Load(o); err == nil || !strings.Contains(err.Error(), "without ca.pem") {
		t.Fatalf("ca.key alone: %v", err)
	}
	// server files without any CA.
	_ = os.Remove(filepath.Join(dir, CAKeyFile))
	if _, err := Load(o); err == nil || !strings.Contains(err.Error(), "restore the CA files") {
		t.Fatalf("server without CA: %v", err)
	}
	// ca.pem that is not a CA.
	data2 := t.TempDir()
	_ = os.MkdirAll(filepath.Join(data2, DirName), 0o700)
	ca := newTestCA(t)
	c, k := ca.leaf(t, "x", []string{"x"}, nil, time.Now(), time.Now().Add(time.Hour))
	writePair(t, filepath.Join(data2, DirName), "ca", c, k)
	o2, _ := autoOptions(t, data2)
	if _, err := Load(o2); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("leaf as CA: %v", err)
	}
}

func TestAutoExpiredCA(t *testing.T) {
	data := t.TempDir()
	o, _ := autoOptions(t, data)
	mustLoad(t, o)
	o.now = at(time.Now().Add(11 * 365 * 24 * time.Hour))
	if _, err := Load(o); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired CA: %v", err)
	}
}

func TestServerSANs(t *testing.T) {
	s := serverSANs([]string{" ", "host:1", "HOST", "[fe80::1%eth0]:9", "::ffff:10.0.0.1", "::", "127.0.0.1:9876"})
	if want := []string{"host", "localhost"}; !slices.Equal(s.dns, want) {
		t.Errorf("dns = %v, want %v", s.dns, want)
	}
	want := []net.IP{net.ParseIP("fe80::1"), net.ParseIP("10.0.0.1"), net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if len(s.ips) != len(want) {
		t.Fatalf("ips = %v, want %v", s.ips, want)
	}
	for i := range want {
		if !s.ips[i].Equal(want[i]) {
			t.Errorf("ips = %v, want %v", s.ips, want)
		}
	}
}
