package admin

import (
	"net/http"

	"github.com/fibrilgo/fibril/core/admin/dashboard"
)

// The overview endpoint and the browser dashboard (docs/admin.md#dashboard).

// overview is GET /admin/api/overview: what the broker says about itself
// (node, mode, version, uptime), the dashboard's first page.
func (s *Server) overview(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Overview == nil {
		writeError(w, http.StatusNotFound, "not_found", "no overview")
		return
	}
	writeJSON(w, http.StatusOK, s.opts.Overview())
}

// registerDashboard serves the embedded dashboard under /dashboard/ and
// sends / there, both behind the admin login like the API it reads. The
// pages load only their own script and style sheet (no inline code, no
// other origin), and the answers say so to the browser.
func (s *Server) registerDashboard() {
	s.mux.Handle("GET /{$}", s.auth(http.RedirectHandler("/dashboard/", http.StatusFound)))
	files := http.StripPrefix("/dashboard/", http.FileServerFS(dashboard.Files()))
	s.mux.Handle("GET /dashboard/", s.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary: revalidate instead of caching
		// an older dashboard across an upgrade.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})))
}
