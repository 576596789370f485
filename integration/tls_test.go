package integration

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// TestTLS: with tls.enabled and tls.auto_self_signed the broker creates a
// CA under <data_dir>/tls (S-150); a client trusting that ca.pem does a
// confirmed publish and consumes it over TLS; the admin listener serves
// HTTPS from the same material (S-156). The listener sniffs the first
// bytes (docs/protocol.md#transport, S-151): a plaintext HELLO on the TLS port gets one
// plaintext ERROR 426 echoing the HELLO's request id, then the close, and
// the Go client reports ErrTLSRequired (docs/protocol.md#answers); a TLS ClientHello to a
// plaintext broker is closed without a byte.
func TestTLS(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--tls.enabled=true", "--tls.auto_self_signed=true")
	pem, err := os.ReadFile(filepath.Join(b.DataDir, "tls", "ca.pem"))
	if err != nil {
		t.Fatalf("generated CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("ca.pem holds no certificate")
	}
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}

	t.Run("client over TLS", func(t *testing.T) {
		c := newClient(t, b.Addr, func(o *client.Options) { o.TLS = tc })
		off := publish(t, c, "secure", client.Message{Payload: []byte("over tls")})
		sub := subscribe(t, c, "secure", client.SubscribeOptions{Prefetch: 1})
		d := next(t, sub, waitTimeout)
		if d.Offset != off || string(d.Payload) != "over tls" {
			t.Fatalf("delivery offset %d %q, want %d", d.Offset, d.Payload, off)
		}
		ack(t, d)
		barrier(t, c)
	})

	t.Run("admin over HTTPS", func(t *testing.T) {
		code, body := httpGet(t, b.Admin, "/healthz", tc)
		if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Fatalf("https /healthz: %d %q", code, body)
		}
	})

	t.Run("plaintext HELLO to the TLS port", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.send(wire.OpHello, 4711, &wire.Hello{ClientName: "plain", ClientVersion: "0", ProtocolVersion: 1})
		r.expectError(wire.OpError, 4711, wire.CodeTLSRequired)
		r.expectClosed()

		g := newGuard(t)
		_, err := client.Dial(ctxT(t, opTimeout), client.Options{Addrs: []string{b.Addr}, Username: "fibril", Password: "fibril",
			Dial: g.dial, Logger: testLogger(t, "plaintext")})
		if !errors.Is(err, client.ErrTLSRequired) {
			t.Fatalf("plaintext client.Dial to the TLS port: %v, want ErrTLSRequired", err)
		}
	})

	t.Run("TLS ClientHello to a plaintext broker", func(t *testing.T) {
		plain := startBroker(t)
		g := newGuard(t)
		nc, err := g.dial(ctxT(t, opTimeout), "tcp", plain.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		cc := &countingConn{Conn: nc}
		err = tls.Client(cc, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}).HandshakeContext(ctxT(t, opTimeout))
		if err == nil {
			t.Fatal("TLS handshake with a plaintext broker succeeded")
		}
		if n := cc.read.Load(); n != 0 {
			t.Fatalf("the plaintext broker answered a ClientHello with %d bytes; want the close without a frame", n)
		}
		if !closedErr(err) {
			t.Fatalf("handshake error %v, want the connection closed", err)
		}
		// And the plaintext broker still serves plaintext clients.
		publish(t, newClient(t, plain.Addr), "after-hello", client.Message{Payload: []byte("ok")})
	})
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	read atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}
