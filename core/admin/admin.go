// Package admin serves the broker's admin HTTP listener: health and
// readiness probes for load balancers, Prometheus metrics, Go profiling
// under /debug/pprof/ (behind the same auth as /metrics), and the small
// part of the admin API that exists so far (users, runtime settings,
// cluster topology, drain and undrain, peers, connections, queues,
// overview) with the browser dashboard over it (overview.go). docs/semantics.md
// (S-161) says which part of Fibril's admin surface exists; the rest of
// the API comes later.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/settings"
)

// Users is the user store as the admin API manages it.
type Users interface {
	Add(name, password string) error
	// SetPassword replaces a user's password (ErrNotFound: no such user).
	SetPassword(name, password string) error
	// SetPermissions replaces a user's permission list; nil makes the
	// user unrestricted, an empty list allows nothing.
	SetPermissions(name string, ps []Permission) error
	Remove(name string) error
	List() []UserInfo
}

// UserInfo is one user as the API lists it.
type UserInfo struct {
	Name    string    `json:"username"`
	Created time.Time `json:"created"`
	// Permissions is null for an unrestricted user.
	Permissions []Permission `json:"permissions"`
}

// Permission allows its actions (declare, publish, consume) on the topics
// its patterns match ('*': any run of characters).
type Permission struct {
	Topics  []string `json:"topics"`
	Actions []string `json:"actions"`
}

// Options configure the admin handler.
type Options struct {
	Gatherer prometheus.Gatherer
	Users    Users // nil: the users API answers 404
	// Settings returns the runtime settings store in force (nil: 404).
	Settings func() *settings.Store
	// Topology returns the cluster view for GET /admin/api/topology (nil:
	// standalone, 404).
	Topology func() any
	// Connections lists the open client connections for
	// GET /admin/api/connections (nil: 404).
	Connections func() any
	// Peers probes every live peer over the inter-broker transport for
	// GET /admin/api/peers (nil: standalone, 404).
	Peers func(ctx context.Context) any
	// Queues serves the queues and streams API (nil: 404).
	Queues QueueAdmin
	// Drain starts a drain (S-127, S-128) and returns its report.
	Drain func(ctx context.Context, grace time.Duration, message string) (any, error)
	// Undrain ends a drain as far as it can be undone (POST
	// /admin/api/undrain) and returns its report (nil: 404).
	Undrain func(ctx context.Context) (any, error)
	// Overview describes this broker for GET /admin/api/overview and the
	// dashboard's first page: node, mode, version, uptime (nil: 404).
	Overview func() any
	// ReloadTLS re-reads the TLS material (POST /admin/api/tls/reload);
	// an error leaves the previous material serving (nil: 404).
	ReloadTLS func() (any, error)
	// RaftMembers lists the coordination group's members (GET
	// /admin/api/raft/members); RaftChange changes one (POST
	// /admin/api/raft/{remove,add-voter,demote}; change is a
	// core.ConsensusChange). nil: 404.
	RaftMembers func(ctx context.Context) (any, error)
	RaftChange  func(ctx context.Context, change core.ConsensusChange, node, addr, user string) (any, error)
	// Backup writes a backup of the broker to w as a tar archive (POST
	// /admin/api/backup); an error before anything was written is
	// answered as usual (nil: 404).
	Backup func(ctx context.Context, w io.Writer) error
	// LogLevel reads (set "") or changes the broker's log level for
	// GET/PUT /admin/api/log-level; user is the admin user (nil: 404).
	LogLevel func(set, user string) (any, error)
	// Auth, when Username is set, protects everything but the probes with
	// HTTP Basic (S-159); empty = open.
	Username, Password string
	Logger             *slog.Logger
}

// Server is the admin handler plus the readiness state it reports.
type Server struct {
	opts  Options
	ready atomic.Pointer[string] // nil = ready; otherwise why not
	mux   *http.ServeMux

	csrf       http.Handler // mux behind cross-origin protection (ServeHTTP)
	condMu     sync.Mutex
	conditions map[string]string // SetCondition: more reasons not to be ready
}

// New builds the handler. It starts not ready ("starting").
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	s.SetNotReady("starting: recovery in progress")
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok")) // S-158: always 200 while the process serves HTTP
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.auth(promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{})))
	s.mux.Handle("GET /admin/api/users", s.auth(http.HandlerFunc(s.listUsers)))
	s.mux.Handle("POST /admin/api/users", s.auth(http.HandlerFunc(s.addUser)))
	s.mux.Handle("DELETE /admin/api/users/{username}", s.auth(http.HandlerFunc(s.removeUser)))
	s.mux.Handle("PUT /admin/api/users/{username}/password", s.auth(http.HandlerFunc(s.setPassword)))
	s.mux.Handle("PUT /admin/api/users/{username}/permissions", s.auth(http.HandlerFunc(s.setPermissions)))
	s.mux.Handle("GET /admin/api/runtime-settings", s.auth(http.HandlerFunc(s.getSettings)))
	s.mux.Handle("PUT /admin/api/runtime-settings", s.auth(http.HandlerFunc(s.putSettings)))
	s.mux.Handle("GET /admin/api/topology", s.auth(http.HandlerFunc(s.topology)))
	s.mux.Handle("POST /admin/api/drain", s.auth(http.HandlerFunc(s.drain)))
	s.mux.Handle("POST /admin/api/undrain", s.auth(http.HandlerFunc(s.undrain)))
	s.mux.Handle("GET /admin/api/peers", s.auth(http.HandlerFunc(s.peers)))
	s.mux.Handle("GET /admin/api/connections", s.auth(http.HandlerFunc(s.connections)))
	s.registerQueues()
	s.mux.Handle("GET /admin/api/overview", s.auth(http.HandlerFunc(s.overview)))
	s.mux.Handle("POST /admin/api/tls/reload", s.auth(http.HandlerFunc(s.reloadTLS)))
	s.mux.Handle("GET /admin/api/log-level", s.auth(http.HandlerFunc(s.logLevel)))
	s.mux.Handle("POST /admin/api/backup", s.auth(http.HandlerFunc(s.backup)))
	s.mux.Handle("GET /admin/api/raft/members", s.auth(http.HandlerFunc(s.raftMembers)))
	s.mux.Handle("POST /admin/api/raft/remove", s.auth(s.raftChange(core.ConsensusRemove)))
	s.mux.Handle("POST /admin/api/raft/add-voter", s.auth(s.raftChange(core.ConsensusAddVoter)))
	s.mux.Handle("POST /admin/api/raft/demote", s.auth(s.raftChange(core.ConsensusDemote)))
	s.mux.Handle("PUT /admin/api/log-level", s.auth(http.HandlerFunc(s.logLevel)))
	s.registerDashboard()
	// Profiling, for measuring before optimising (same auth as /metrics).
	s.mux.Handle("GET /debug/pprof/", s.auth(http.HandlerFunc(pprof.Index)))
	s.mux.Handle("GET /debug/pprof/profile", s.auth(http.HandlerFunc(pprof.Profile)))
	s.mux.Handle("GET /debug/pprof/trace", s.auth(http.HandlerFunc(pprof.Trace)))
	s.mux.Handle("GET /debug/pprof/symbol", s.auth(http.HandlerFunc(pprof.Symbol)))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusForbidden, "forbidden", "cross-origin request refused: admin changes are accepted from this listener's own pages and from tools, not from other sites")
	}))
	s.csrf = cop.Handler(s.mux)
	return s
}

// ServeHTTP implements http.Handler. Changes (every method but GET, HEAD
// and OPTIONS) sent by a browser from another site are refused with 403:
// a browser that holds the admin login would otherwise send it along with
// a form another page submits to this listener. Tools that send no
// Origin or Sec-Fetch-Site header (fibrilctl, curl) are not affected.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.csrf.ServeHTTP(w, r) }

// SetReady marks the broker ready for traffic.
func (s *Server) SetReady() { s.ready.Store(nil) }

// SetNotReady marks the broker not ready, with the reason /readyz reports.
func (s *Server) SetNotReady(reason string) { s.ready.Store(&reason) }

// SetCondition adds (reason != "") or clears (reason == "") a named
// reason not to be ready that holds whatever SetReady says — a nearly full
// disk while the cluster lease is fine.
func (s *Server) SetCondition(name, reason string) {
	s.condMu.Lock()
	defer s.condMu.Unlock()
	if reason == "" {
		delete(s.conditions, name)
		return
	}
	if s.conditions == nil {
		s.conditions = map[string]string{}
	}
	s.conditions[name] = reason
}

// notReady returns why the broker is not ready, "" when it is.
func (s *Server) notReady() string {
	if why := s.ready.Load(); why != nil {
		return *why
	}
	s.condMu.Lock()
	defer s.condMu.Unlock()
	names := make([]string, 0, len(s.conditions))
	for n := range s.conditions {
		names = append(names, n)
	}
	sort.Strings(names)
	var why []string
	for _, n := range names {
		why = append(why, s.conditions[n])
	}
	return strings.Join(why, "; ")
}

// readyz answers 200 "ok" when ready and 503 with the reason otherwise:
// false until recovery has finished, while shutting down, and while a
// condition holds.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if why := s.notReady(); why != "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": why})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) auth(h http.Handler) http.Handler {
	if s.opts.Username == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		uok := subtle.ConstantTimeCompare([]byte(u), []byte(s.opts.Username)) == 1
		pok := subtle.ConstantTimeCompare([]byte(p), []byte(s.opts.Password)) == 1
		if !ok || !uok || !pok {
			w.Header().Set("WWW-Authenticate", `Basic realm="fibril admin"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "admin credentials required (admin.auth)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) listUsers(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Users == nil {
		writeError(w, http.StatusNotFound, "not_found", "no user store")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": s.opts.Users.List()})
}

func (s *Server) addUser(w http.ResponseWriter, r *http.Request) {
	if s.opts.Users == nil {
		writeError(w, http.StatusNotFound, "not_found", "no user store")
		return
	}
	var req struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body must be JSON {username, password}: "+err.Error())
		return
	}
	if err := s.opts.Users.Add(req.Username, req.Password); err != nil {
		writeCoreError(w, err)
		return
	}
	s.opts.Logger.Info("user added", "user", req.Username)
	writeJSON(w, http.StatusCreated, map[string]any{"username": req.Username})
}

// setPassword is PUT /admin/api/users/{username}/password {password}: the
// user's sessions stay open; its next login needs the new password.
func (s *Server) setPassword(w http.ResponseWriter, r *http.Request) {
	if s.opts.Users == nil {
		writeError(w, http.StatusNotFound, "not_found", "no user store")
		return
	}
	var req struct {
		Password string `json:"password"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body must be JSON {password}: "+err.Error())
		return
	}
	name := r.PathValue("username")
	if err := s.opts.Users.SetPassword(name, req.Password); err != nil {
		writeCoreError(w, err)
		return
	}
	s.opts.Logger.Info("user password changed", "user", name, "admin_user", s.user(r))
	w.WriteHeader(http.StatusNoContent)
}

// setPermissions is PUT /admin/api/users/{username}/permissions
// {permissions: [{topics, actions}] | null}: the user's next operations
// are checked against the new list, on every broker (the user store is
// shared in a cluster).
func (s *Server) setPermissions(w http.ResponseWriter, r *http.Request) {
	if s.opts.Users == nil {
		writeError(w, http.StatusNotFound, "not_found", "no user store")
		return
	}
	var req struct {
		Permissions []Permission `json:"permissions"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body must be JSON {permissions: [{topics, actions}] or null}: "+err.Error())
		return
	}
	name := r.PathValue("username")
	if err := s.opts.Users.SetPermissions(name, req.Permissions); err != nil {
		writeCoreError(w, err)
		return
	}
	s.opts.Logger.Info("user permissions changed", "user", name, "unrestricted", req.Permissions == nil,
		"entries", len(req.Permissions), "admin_user", s.user(r))
	writeJSON(w, http.StatusOK, map[string]any{"username": name, "permissions": req.Permissions})
}

func (s *Server) removeUser(w http.ResponseWriter, r *http.Request) {
	if s.opts.Users == nil {
		writeError(w, http.StatusNotFound, "not_found", "no user store")
		return
	}
	name := r.PathValue("username")
	if err := s.opts.Users.Remove(name); err != nil {
		writeCoreError(w, err)
		return
	}
	s.opts.Logger.Info("user removed", "user", name)
	w.WriteHeader(http.StatusNoContent)
}

// writeCoreError maps a core sentinel to an HTTP status and the snake_case
// code of S-160.
func writeCoreError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, core.ErrBadRequest):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, core.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, core.ErrConflict):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, core.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
