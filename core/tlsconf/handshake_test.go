package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// clientConfig trusts m's CA. A client certificate, if given, is always
// sent: the Go client would otherwise withhold one whose issuer the server
// did not list, and the test wants the server to judge it.
func clientConfig(m *Material, serverName string, certs ...tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: m.CAPool(), ServerName: serverName, MinVersion: tls.VersionTLS12}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return cfg
}

func autoMaterial(t *testing.T, clientAuth string) (*Material, testCA) {
	t.Helper()
	o, _ := autoOptions(t, t.TempDir(), "broker.test")
	o.TLS.ClientAuth = clientAuth
	o.TLS.AdminEnabled = true
	m := mustLoad(t, o)
	// Issue client certificates from the generated CA, as an operator
	// would with ca.key.
	return m, testCA{cert: m.ca.cert, key: mustECDSA(t, m)}
}

func TestHandshakeServerIdentity(t *testing.T) {
	m, _ := autoMaterial(t, "off")
	for _, name := range []string{"localhost", "broker.test", "127.0.0.1", "::1"} {
		addr, res := serveOnce(t, m.ServerConfig())
		if _, err := dial(t, addr, clientConfig(m, name)); err != nil {
			t.Fatalf("verify as %s: %v", name, err)
		}
		if r := <-res; r.err != nil {
			t.Fatal(r.err)
		}
	}
	addr, res := serveOnce(t, m.ServerConfig())
	if _, err := dial(t, addr, clientConfig(m, "elsewhere.test")); err == nil {
		t.Fatal("hostname not covered by the certificate was accepted")
	}
	<-res
	// TLS 1.1 is refused.
	addr, res = serveOnce(t, m.ServerConfig())
	old := clientConfig(m, "localhost")
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := dial(t, addr, old); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
	<-res
}

func TestHandshakeClientAuth(t *testing.T) {
	stranger := newTestCA(t)
	cases := []struct {
		mode      string
		cert      string // "", "alice", "stranger", "node"
		wantOK    bool
		wantIdent string
	}{
		{"off", "", true, ""},
		{"off", "alice", true, ""}, // not requested, so not seen
		{"request", "", true, ""},
		{"request", "alice", true, "alice"},
		{"request", "node", true, ""}, // CN @node never maps
		{"request", "stranger", false, ""},
		{"require", "", false, ""},
		{"require", "alice", true, "alice"},
		{"require", "stranger", false, ""},
	}
	for _, c := range cases {
		m, ca := autoMaterial(t, c.mode)
		var certs []tls.Certificate
		switch c.cert {
		case "alice":
			certs = append(certs, ca.clientCert(t, "ignored-cn", "alice", "alice.example.com"))
		case "node":
			certs = append(certs, ca.clientCert(t, "@node"))
		case "stranger":
			certs = append(certs, stranger.clientCert(t, "alice", "alice"))
		}
		addr, res := serveOnce(t, m.ServerConfig())
		_, cerr := dial(t, addr, clientConfig(m, "localhost", certs...))
		r := <-res
		if ok := r.err == nil && cerr == nil; ok != c.wantOK {
			t.Errorf("%s/%s: ok=%v (server %v, client %v), want %v", c.mode, c.cert, ok, r.err, cerr, c.wantOK)
			continue
		}
		if r.identity != c.wantIdent {
			t.Errorf("%s/%s: identity %q, want %q", c.mode, c.cert, r.identity, c.wantIdent)
		}
	}
}

func TestAdminConfig(t *testing.T) {
	m, _ := autoMaterial(t, "require")
	cfg := m.AdminConfig()
	if cfg == nil || cfg.ClientAuth != tls.NoClientCert {
		t.Fatalf("admin config %+v", cfg)
	}
	addr, res := serveOnce(t, cfg)
	cc := clientConfig(m, "localhost")
	cc.NextProtos = []string{"h2"}
	if _, err := dial(t, addr, cc); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.err != nil || r.proto != "h2" {
		t.Fatalf("admin handshake: %+v", r)
	}
	o, _ := autoOptions(t, t.TempDir())
	o.TLS.AdminEnabled = false
	if mustLoad(t, o).AdminConfig() != nil {
		t.Fatal("admin TLS on although tls.admin_enabled = false")
	}
}

func TestIdentity(t *testing.T) {
	cert := func(cn string, dns ...string) *x509.Certificate {
		c := &x509.Certificate{DNSNames: dns}
		c.Subject.CommonName = cn
		return c
	}
	cases := []struct {
		c    *x509.Certificate
		want string
	}{
		{cert("cn-name", "first.example", "second.example"), "first.example"},
		{cert("cn-name"), "cn-name"},
		{cert(""), ""},
		{cert("@node"), ""},
		{cert("alice", "@node"), ""},
		{cert("@node", "alice"), "alice"},
		{nil, ""},
	}
	for _, c := range cases {
		if got := Identity(c.c); got != c.want {
			t.Errorf("Identity(%v) = %q, want %q", c.c, got, c.want)
		}
	}
	if PeerIdentity(tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert("alice")}}) != "" {
		t.Error("unverified peer certificate produced an identity")
	}
}
