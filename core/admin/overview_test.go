package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string, login bool) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if login {
		r.SetBasicAuth("admin", "secret")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The dashboard and the overview sit behind the admin login; / leads to
// the dashboard, whose files are served with their types and a policy
// that allows only themselves.
func TestDashboardRoutes(t *testing.T) {
	s := New(Options{Gatherer: prometheus.NewRegistry(), Username: "admin", Password: "secret",
		Overview: func() any { return map[string]string{"mode": "standalone"} }})
	for _, p := range []string{"/", "/dashboard/", "/dashboard/app.js", "/admin/api/overview"} {
		if w := get(t, s, p, false); w.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without login: %d, want 401", p, w.Code)
		}
	}
	if w := get(t, s, "/", true); w.Code != http.StatusFound || w.Header().Get("Location") != "/dashboard/" {
		t.Errorf("GET /: %d to %q", w.Code, w.Header().Get("Location"))
	}
	for p, ct := range map[string]string{"/dashboard/": "text/html", "/dashboard/app.js": "javascript", "/dashboard/style.css": "text/css"} {
		w := get(t, s, p, true)
		if w.Code != http.StatusOK || !strings.Contains(w.Header().Get("Content-Type"), ct) || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d %q (%d bytes)", p, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: CSP %q", p, csp)
		}
	}
	if w := get(t, s, "/dashboard/nothing.js", true); w.Code != http.StatusNotFound {
		t.Errorf("GET a missing file: %d", w.Code)
	}
	if w := get(t, s, "/nothing", true); w.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d, want 404 (only / itself leads to the dashboard)", w.Code)
	}
	if w := get(t, s, "/admin/api/overview", true); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"mode":"standalone"`) {
		t.Errorf("overview: %d %s", w.Code, w.Body)
	}
	if w := get(t, New(Options{Gatherer: prometheus.NewRegistry()}), "/admin/api/overview", false); w.Code != http.StatusNotFound {
		t.Errorf("overview without Options.Overview: %d, want 404", w.Code)
	}
}
