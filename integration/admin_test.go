package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// TestAdminEndpoints: /healthz and /readyz answer 200 "ok" on a ready
// broker (S-158); /metrics exposes fibril_broker_published_total and
// fibril_tcp_connections_open with the values the test caused.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body := httpGet(t, b.Admin, path, nil)
		if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Fatalf("GET %s: %d %q, want 200 ok", path, code, body)
		}
	}
	code, body := httpGet(t, b.Admin, "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, name := range []string{"fibril_broker_published_total", "fibril_tcp_connections_open"} {
		if !strings.Contains(body, "\n"+name+" ") {
			t.Fatalf("/metrics has no %s series", name)
		}
	}

	c := newClient(t, b.Addr)
	for range 3 {
		publish(t, c, "metered", client.Message{Payload: []byte("x")})
	}
	if got := metric(t, b, "fibril_broker_published_total"); got != 3 {
		t.Fatalf("fibril_broker_published_total = %v, want 3", got)
	}
	if got := metric(t, b, "fibril_tcp_connections_open"); got != 1 {
		t.Fatalf("fibril_tcp_connections_open = %v with one client connected, want 1", got)
	}
	c.Close()
	testkit.Eventually(t, waitTimeout, "fibril_tcp_connections_open to drop to 0", func() bool {
		return metric(t, b, "fibril_tcp_connections_open") == 0
	})
}
