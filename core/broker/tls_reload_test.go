package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// testIssuer signs serving certificates for 127.0.0.1, as an operator's
// CA would.
type testIssuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestIssuer(t *testing.T) testIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test operator CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testIssuer{cert, key, pool}
}

// issue writes a new serving pair for 127.0.0.1 to certPath and keyPath
// and returns the leaf's SHA-256 (hex).
func (ti testIssuer) issue(t *testing.T, serial int64, certPath, keyPath string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ti.cert, &key.PublicKey, ti.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// The key first, then the certificate: a reload that ran between the
	// two writes would see a mismatched pair and refuse it.
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// servedLeaf dials addr and returns the SHA-256 of the certificate it
// presents, verified against pool.
func servedLeaf(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sum := sha256.Sum256(c.ConnectionState().PeerCertificates[0].Raw)
	return hex.EncodeToString(sum[:])
}

// S-153: the operator rotates the certificate files and asks for a
// reload while a producer publishes: new connections (client and admin
// listeners) get the new certificate, the producer's connection keeps
// its own and loses nothing; material that does not load is refused
// (400) and the new certificate keeps serving.
func TestTLSReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := newTestIssuer(t)
	first := ca.issue(t, 10, certPath, keyPath)
	b := startBroker(t, "--tls.enabled=true", "--tls.cert_path="+certPath, "--tls.key_path="+keyPath)
	addr, adminAddr := b.BrokerAddr().String(), b.AdminAddr().String()
	if got := servedLeaf(t, addr, ca.pool); got != first {
		t.Fatalf("serving %s, want the first certificate %s", got, first)
	}
	admin := func(path string) (int, string) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
		resp, err := hc.Post("https://"+adminAddr+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{addr}, Username: "fibril", Password: "fibril",
		Dial: loopbackOnly(t), TLS: &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "rotating"}); err != nil {
		t.Fatal(err)
	}
	// The load: confirmed publishes on the connection opened before the
	// rotation, bounded in count and time.
	var confirmed atomic.Int64
	loadDone := make(chan error, 1)
	go func() {
		pub := c.Publisher("rotating", client.PublisherOptions{})
		for i := 0; i < 5000 && ctx.Err() == nil; i++ {
			if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
				loadDone <- err
				return
			}
			confirmed.Add(1)
		}
		loadDone <- nil
	}()
	waitFor := func(n int64) {
		t.Helper()
		for confirmed.Load() < n {
			select {
			case err := <-loadDone:
				t.Fatalf("the producer stopped at %d confirms: %v", confirmed.Load(), err)
			case <-time.After(time.Millisecond):
			}
		}
	}
	waitFor(100)

	second := ca.issue(t, 11, certPath, keyPath)
	code, body := admin("/admin/api/tls/reload")
	if code != 200 || !strings.Contains(body, second) {
		t.Fatalf("reload: %d %s (want leaf %s)", code, body, second)
	}
	if got := servedLeaf(t, addr, ca.pool); got != second {
		t.Fatalf("the client listener serves %s after the reload, want %s", got, second)
	}
	if got := servedLeaf(t, adminAddr, ca.pool); got != second {
		t.Fatalf("the admin listener serves %s after the reload, want %s", got, second)
	}
	at := confirmed.Load()
	waitFor(at + 100) // the connection from before the rotation keeps working

	if err := os.WriteFile(certPath, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := admin("/admin/api/tls/reload"); code != 400 || !strings.Contains(body, "previous certificate keeps serving") {
		t.Fatalf("reload of broken material: %d %s", code, body)
	}
	if got := servedLeaf(t, addr, ca.pool); got != second {
		t.Fatalf("after a refused reload the listener serves %s, want %s", got, second)
	}
	if err := <-loadDone; err != nil {
		t.Fatalf("the producer failed after %d confirms: %v", confirmed.Load(), err)
	}
	if n := confirmed.Load(); n != 5000 {
		t.Fatalf("%d confirms, want 5000", n)
	}
}

// Without TLS there is nothing to reload: 400 that says so.
func TestTLSReloadWithoutTLS(t *testing.T) {
	b := startBroker(t)
	if code, body := adminDo(t, b, "POST", "/admin/api/tls/reload", ""); code != 400 || !strings.Contains(body, "TLS is off") {
		t.Fatalf("reload without TLS: %d %s", code, body)
	}
}

// A broker whose starter gave it no level variable has a fixed level: 404
// that says so; with one, PUT changes it and GET reads it back.
func TestLogLevelAPI(t *testing.T) {
	b := startBroker(t)
	if code, body := adminDo(t, b, "GET", "/admin/api/log-level", ""); code != 404 || !strings.Contains(body, "fixed") {
		t.Fatalf("without a level variable: %d %s", code, body)
	}
	lv := new(slog.LevelVar)
	b.SetLogLevelVar(lv)
	if code, body := adminDo(t, b, "PUT", "/admin/api/log-level", `{"level":"debug"}`); code != 200 || !strings.Contains(body, `"previous":"info"`) || lv.Level() != slog.LevelDebug {
		t.Fatalf("PUT debug: %d %s (level %v)", code, body, lv.Level())
	}
	if code, body := adminDo(t, b, "GET", "/admin/api/log-level", ""); code != 200 || !strings.Contains(body, `"level":"debug"`) {
		t.Fatalf("GET: %d %s", code, body)
	}
	for _, bad := range []string{`{"level":"loud"}`, `{}`, `{"level":"info","x":1}`} {
		if code, _ := adminDo(t, b, "PUT", "/admin/api/log-level", bad); code != 400 {
			t.Errorf("PUT %s: %d, want 400", bad, code)
		}
	}
}
