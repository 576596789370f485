package tlsconf

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/config"
)

func TestOperatorPEMs(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c, k := ca.leaf(t, "broker", []string{"broker.example.com"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Now(), time.Now().Add(90*24*time.Hour))
	cp, kp := writePair(t, dir, "good", c, k)
	o, logs := fileOptions(cp, kp)
	m := mustLoad(t, o)
	if m.CAFingerprint() != "" || m.CAPool() != nil {
		t.Error("operator material claims a known CA")
	}
	blk, _ := pem.Decode(c)
	if m.LeafSHA256() != sha256Hex(blk.Bytes) {
		t.Error("LeafSHA256 is not the file's leaf")
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("unexpected warning:\n%s", logs)
	}
}

func TestOperatorPEMErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	now := time.Now()
	good, goodKey := ca.leaf(t, "b", []string{"b"}, nil, now, now.Add(90*24*time.Hour))
	_, otherKey := ca.leaf(t, "b", []string{"b"}, nil, now, now.Add(90*24*time.Hour))
	expired, expiredKey := ca.leaf(t, "b", []string{"b"}, nil, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	future, futureKey := ca.leaf(t, "b", []string{"b"}, nil, now.Add(24*time.Hour), now.Add(48*time.Hour))
	clientOnly, clientOnlyKey := ca.leaf(t, "b", []string{"b"}, nil, now, now.Add(90*24*time.Hour), x509.ExtKeyUsageClientAuth)
	encrypted := []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")

	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodCert, goodKeyP := write("good.pem", good), write("good.key", goodKey)
	cases := []struct {
		name, cert, key string
		want            []string
	}{
		{"missing cert", filepath.Join(dir, "nope.pem"), goodKeyP, []string{"tls.cert_path", "nope.pem", "cannot read"}},
		{"missing key", goodCert, filepath.Join(dir, "nope.key"), []string{"tls.key_path", "nope.key", "cannot read"}},
		{"cert not PEM", write("junk.pem", []byte("hello")), goodKeyP, []string{"tls.cert_path", "junk.pem", "no PEM CERTIFICATE"}},
		{"cert file is the key", goodKeyP, goodKeyP, []string{"tls.cert_path", "no PEM CERTIFICATE"}},
		{"key not PEM", goodCert, write("junk.key", []byte("hello")), []string{"tls.key_path", "junk.key", "not a PEM file"}},
		{"key file is the cert", goodCert, goodCert, []string{"tls.key_path", "no PEM private key", "CERTIFICATE"}},
		{"encrypted key", goodCert, write("enc.key", encrypted), []string{"tls.key_path", "encrypted"}},
		{"mismatch", goodCert, write("other.key", otherKey), []string{"tls.key_path", "other.key", "does not match", "good.pem"}},
		{"expired", write("expired.pem", expired), write("expired.key", expiredKey), []string{"tls.cert_path", "expired.pem", "expired on"}},
		{"not yet valid", write("future.pem", future), write("future.key", futureKey), []string{"tls.cert_path", "not valid before"}},
		{"client-only EKU", write("client.pem", clientOnly), write("client.key", clientOnlyKey), []string{"serverAuth"}},
	}
	for _, c := range cases {
		o, _ := fileOptions(c.cert, c.key)
		m, err := Load(o)
		if err == nil {
			t.Errorf("%s: loaded (%v)", c.name, m)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
	}
}

func TestOperatorExpiringSoonWarns(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c, k := ca.leaf(t, "b", []string{"b"}, nil, time.Now(), time.Now().Add(10*24*time.Hour))
	cp, kp := writePair(t, dir, "soon", c, k)
	_ = os.Chmod(kp, 0o644)
	o, logs := fileOptions(cp, kp)
	mustLoad(t, o)
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "expires in") {
		t.Errorf("no expiry warning:\n%s", out)
	}
	if !strings.Contains(out, "chmod 600") {
		t.Errorf("no key mode warning:\n%s", out)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c, k := ca.leaf(t, "b", []string{"b"}, nil, time.Now(), time.Now().Add(90*24*time.Hour))
	cp, kp := writePair(t, dir, "p", c, k)

	if m, err := Load(Options{TLS: config.TLS{Enabled: false, AutoSelfSigned: true}}); m != nil || err != nil {
		t.Fatalf("disabled: %v, %v", m, err)
	}
	var off *Material
	if off.ServerConfig() != nil || off.AdminConfig() != nil || off.CAFingerprint() != "" || off.LeafSHA256() != "" || !off.NotAfter().IsZero() {
		t.Fatal("nil Material is not inert")
	}
	if _, err := off.Reload(); err == nil {
		t.Fatal("nil Material reloaded")
	}

	bad := map[string]Options{
		"both sources":       {TLS: config.TLS{Enabled: true, CertPath: cp, KeyPath: kp, AutoSelfSigned: true}, DataDir: dir},
		"no source":          {TLS: config.TLS{Enabled: true}},
		"cert without key":   {TLS: config.TLS{Enabled: true, CertPath: cp}},
		"auto without dir":   {TLS: config.TLS{Enabled: true, AutoSelfSigned: true}},
		"bad client_auth":    {TLS: config.TLS{Enabled: true, CertPath: cp, KeyPath: kp, ClientAuth: "sometimes"}},
		"request without CA": {TLS: config.TLS{Enabled: true, CertPath: cp, KeyPath: kp, ClientAuth: "request"}},
		"bad client CA file": {TLS: config.TLS{Enabled: true, CertPath: cp, KeyPath: kp, ClientAuth: "require", ClientCAPath: kp}},
	}
	for name, o := range bad {
		if _, err := Load(o); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	o := Options{TLS: config.TLS{Enabled: true, CertPath: cp, KeyPath: kp, ClientAuth: "require", ClientCAPath: cp}}
	if _, err := Load(o); err != nil {
		t.Errorf("client_ca_path with operator PEMs: %v", err)
	}
}
