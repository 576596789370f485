package tlsconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/config"
)

// logBuf collects log output for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger() (*slog.Logger, *logBuf) {
	lb := &logBuf{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

func autoOptions(t *testing.T, dataDir string, hosts ...string) (Options, *logBuf) {
	t.Helper()
	log, lb := testLogger()
	return Options{
		TLS:     config.TLS{Enabled: true, AutoSelfSigned: true, ClientAuth: "off"},
		DataDir: dataDir,
		Hosts:   hosts,
		Logger:  log,
	}, lb
}

func mustLoad(t *testing.T, o Options) *Material {
	t.Helper()
	m, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func at(ts time.Time) func() time.Time { return func() time.Time { return ts } }

// testCA is a throwaway CA for operator-style material and client
// certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	c, k, err := mintCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return testCA{c, k}
}

// leaf mints a certificate valid from notBefore to notAfter with the given
// SANs and CN, returning PEM cert and key.
func (ca testCA) leaf(t *testing.T, cn string, dns []string, ips []net.IP, notBefore, notAfter time.Time, eku ...x509.ExtKeyUsage) ([]byte, []byte) {
	t.Helper()
	tmpl, err := leafTemplate(notBefore.Add(backdate), ca.cert, cn, sans{dns: dns, ips: ips})
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotAfter = notAfter
	tmpl.Subject = pkix.Name{CommonName: cn}
	if eku != nil {
		tmpl.ExtKeyUsage = eku
	}
	c, k, err := mintLeaf(tmpl, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

func (ca testCA) clientCert(t *testing.T, cn string, dns ...string) tls.Certificate {
	t.Helper()
	c, k := ca.leaf(t, cn, dns, nil, time.Now(), time.Now().Add(time.Hour))
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func (ca testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// writePair writes PEM cert and key into dir and returns their paths.
func writePair(t *testing.T, dir, name string, certPEM, keyPEM []byte) (string, string) {
	t.Helper()
	cp, kp := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cp, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kp, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cp, kp
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, _, err := readCerts("test", path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func mustECDSA(t *testing.T, m *Material) *ecdsa.PrivateKey {
	t.Helper()
	k, ok := m.ca.key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("CA key is %T", m.ca.key)
	}
	return k
}

type handshakeResult struct {
	identity string
	proto    string
	err      error
}

// serveOnce accepts one connection on loopback, sniffs it the way the
// broker listener will, runs the TLS handshake with cfg and reports the
// client certificate identity.
func serveOnce(t *testing.T, cfg *tls.Config) (string, <-chan handshakeResult) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan handshakeResult, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			out <- handshakeResult{err: err}
			return
		}
		defer conn.Close()
		kind, prefix, err := Sniff(conn, 5*time.Second)
		if err != nil || kind != SniffTLS {
			out <- handshakeResult{err: err}
			return
		}
		srv := tls.Server(Replay(conn, prefix), cfg)
		_ = srv.SetDeadline(time.Now().Add(5 * time.Second))
		if err := srv.Handshake(); err != nil {
			out <- handshakeResult{err: err}
			return
		}
		cs := srv.ConnectionState()
		_, _ = srv.Write([]byte("k"))
		out <- handshakeResult{identity: PeerIdentity(cs), proto: cs.NegotiatedProtocol}
	}()
	return ln.Addr().String(), out
}

// dial connects with the given client config and returns the leaf the
// server presented (nil when the handshake failed on the client side).
func dial(t *testing.T, addr string, cfg *tls.Config) ([]byte, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	if _, err := conn.Read(buf); err != nil { // TLS 1.3 reports client-cert rejection here
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0].Raw, nil
}

func fileOptions(certPath, keyPath string) (Options, *logBuf) {
	log, lb := testLogger()
	return Options{
		TLS:    config.TLS{Enabled: true, CertPath: certPath, KeyPath: keyPath, ClientAuth: "off"},
		Logger: log,
	}, lb
}
