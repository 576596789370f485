package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A change a browser sends from another site is refused before it reaches
// a handler; the same request from the listener's own pages, or from a
// tool that sends no browser headers, goes through; reads are never
// refused.
func TestCrossOriginChangesRefused(t *testing.T) {
	s := New(Options{Gatherer: prometheus.NewRegistry()})
	do := func(method string, h map[string]string) (int, string) {
		r := httptest.NewRequest(method, "http://127.0.0.1:8081/admin/api/queues/purge", strings.NewReader(`{"topic":"t"}`))
		for k, v := range h {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := do("POST", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}); code != 403 || !strings.Contains(body, "cross-origin") {
		t.Fatalf("cross-site POST: %d %s", code, body)
	}
	if code, _ := do("POST", map[string]string{"Origin": "http://evil.example"}); code != 403 {
		t.Fatalf("POST with a foreign Origin: %d", code)
	}
	// No queues API configured: reaching the handler answers 404.
	if code, _ := do("POST", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8081"}); code != http.StatusNotFound {
		t.Fatalf("same-origin POST: %d", code)
	}
	if code, _ := do("POST", nil); code != http.StatusNotFound {
		t.Fatalf("a tool's POST: %d", code)
	}
	r := httptest.NewRequest("GET", "http://127.0.0.1:8081/healthz", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("cross-site GET /healthz: %d", w.Code)
	}
}
