package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/settings"
)

// The runtime settings API (S-162) and the cluster endpoints.

// settingsView is the GET answer and the PUT success answer (S-162).
type settingsView struct {
	Version  uint64            `json:"version"`
	Settings settings.Document `json:"settings"`
	Locks    []string          `json:"locks"`
}

func (s *Server) getSettings(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Settings == nil {
		writeError(w, http.StatusNotFound, "not_found", "no runtime settings")
		return
	}
	d := s.opts.Settings().Current()
	writeJSON(w, http.StatusOK, settingsView{Version: d.Version, Settings: d, Locks: []string{}})
}

// putSettings takes the whole document with the version it was read at: a
// stale version is 409 with the current settings, an invalid document 400
// (S-162). In coordinated mode the document is the cluster's (S-173) and
// every broker applies the change without a restart.
func (s *Server) putSettings(w http.ResponseWriter, r *http.Request) {
	if s.opts.Settings == nil {
		writeError(w, http.StatusNotFound, "not_found", "no runtime settings")
		return
	}
	var req struct {
		ExpectedVersion *uint64            `json:"expected_version"`
		Settings        *settings.Document `json:"settings"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.ExpectedVersion == nil || req.Settings == nil {
		msg := "body must be JSON {expected_version, settings}"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, "bad_request", msg)
		return
	}
	st := s.opts.Settings()
	d, err := st.Replace(*req.ExpectedVersion, *req.Settings)
	if errors.Is(err, core.ErrConflict) {
		writeJSON(w, http.StatusConflict, map[string]any{"code": "conflict", "message": err.Error(),
			"current": settingsView{Version: d.Version, Settings: d, Locks: []string{}}})
		return
	}
	if err != nil {
		writeCoreError(w, err)
		return
	}
	s.opts.Logger.Info("runtime settings changed", "version", d.Version)
	writeJSON(w, http.StatusOK, settingsView{Version: d.Version, Settings: d, Locks: []string{}})
}

func (s *Server) topology(w http.ResponseWriter, _ *http.Request) {
	var v any
	if s.opts.Topology != nil {
		v = s.opts.Topology()
	}
	if v == nil {
		writeError(w, http.StatusNotFound, "not_found", "standalone broker: no cluster topology")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// drain is S-127/S-128: GOING_AWAY to every connected session and, in
// coordinated mode, the draining mark (no new placements).
func (s *Server) drain(w http.ResponseWriter, r *http.Request) {
	if s.opts.Drain == nil {
		writeError(w, http.StatusNotFound, "not_found", "drain is not available")
		return
	}
	req := struct {
		GraceMS *int64 `json:"grace_ms"`
		Message string `json:"message"`
	}{}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "body must be JSON {grace_ms, message}: "+err.Error())
			return
		}
	}
	grace := 30 * time.Second
	if req.GraceMS != nil {
		if *req.GraceMS < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "grace_ms must not be negative")
			return
		}
		grace = time.Duration(*req.GraceMS) * time.Millisecond
	}
	if req.Message == "" {
		req.Message = "broker draining"
	}
	answer(w, r, 30*time.Second, func(ctx context.Context) (any, error) {
		out, err := s.opts.Drain(ctx, grace, req.Message)
		if err == nil {
			s.opts.Logger.Info("drain requested", "grace", grace)
		}
		return out, err
	})
}

// undrain ends a drain: the node may get new partitions again and /readyz
// follows its other conditions. What a drain already did elsewhere (the
// GOING_AWAY sent, the partitions handed over) stays done; the answer says
// what was undone.
func (s *Server) undrain(w http.ResponseWriter, r *http.Request) {
	if s.opts.Undrain == nil {
		writeError(w, http.StatusNotFound, "not_found", "undrain is not available")
		return
	}
	answer(w, r, 30*time.Second, func(ctx context.Context) (any, error) {
		out, err := s.opts.Undrain(ctx)
		if err == nil {
			s.opts.Logger.Info("undrain requested")
		}
		return out, err
	})
}

// reloadTLS re-reads the serving certificate (S-153) without a restart:
// new connections get the new one, open ones keep theirs; material that
// does not load is refused (400) and the previous keeps serving.
func (s *Server) reloadTLS(w http.ResponseWriter, r *http.Request) {
	if s.opts.ReloadTLS == nil {
		writeError(w, http.StatusNotFound, "not_found", "TLS reload is not available")
		return
	}
	answer(w, r, 30*time.Second, func(context.Context) (any, error) {
		out, err := s.opts.ReloadTLS()
		if err != nil {
			s.opts.Logger.Warn("TLS reload refused", "admin_user", s.user(r), "err", err)
			return nil, err
		}
		s.opts.Logger.Info("TLS reloaded", "admin_user", s.user(r))
		return out, nil
	})
}

// logLevel is GET /admin/api/log-level and PUT {level}: this broker's log
// level, changed at once and until the process ends.
func (s *Server) logLevel(w http.ResponseWriter, r *http.Request) {
	if s.opts.LogLevel == nil {
		writeError(w, http.StatusNotFound, "not_found", "the log level cannot be changed here")
		return
	}
	var req struct {
		Level string `json:"level"`
	}
	if r.Method == http.MethodPut {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Level == "" {
			writeError(w, http.StatusBadRequest, "bad_request", "body must be JSON {level}: debug, info, warn or error")
			return
		}
	}
	answer(w, r, 5*time.Second, func(context.Context) (any, error) { return s.opts.LogLevel(req.Level, s.user(r)) })
}

// backup is POST /admin/api/backup: the broker's backup as a tar archive
// (docs/deploy.md#backup-and-restore). The answer starts once the backup
// is made, so a failure before that is an ordinary error answer.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if s.opts.Backup == nil {
		writeError(w, http.StatusNotFound, "not_found", "backups are not available")
		return
	}
	lw := &lazyWriter{w: w}
	err := s.opts.Backup(r.Context(), lw)
	switch {
	case err != nil && !lw.started:
		s.opts.Logger.Warn("backup failed", "admin_user", s.user(r), "err", err)
		writeCoreError(w, err)
	case err != nil:
		// Part of the archive is out: end the connection so the client
		// sees a broken transfer, not a short archive.
		s.opts.Logger.Warn("backup cut short", "admin_user", s.user(r), "err", err)
		panic(http.ErrAbortHandler)
	default:
		s.opts.Logger.Info("backup taken", "admin_user", s.user(r), "bytes", lw.n)
	}
}

// lazyWriter sends the 200 header of a tar answer at the first write.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
	n       int64
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/x-tar")
		l.w.Header().Set("Content-Disposition", `attachment; filename="fibril-backup.tar"`)
		l.w.WriteHeader(http.StatusOK)
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}

// raftMembers is GET /admin/api/raft/members: the coordination group's
// members as its leader sees them.
func (s *Server) raftMembers(w http.ResponseWriter, r *http.Request) {
	if s.opts.RaftMembers == nil {
		writeError(w, http.StatusNotFound, "not_found", "no raft group here")
		return
	}
	answer(w, r, 30*time.Second, s.opts.RaftMembers)
}

// raftChange is POST /admin/api/raft/{remove,add-voter,demote} {node,
// addr?}: a change of the coordination group, refused (409) when it would
// leave the voters without a quorum they reach.
func (s *Server) raftChange(change core.ConsensusChange) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.RaftChange == nil {
			writeError(w, http.StatusNotFound, "not_found", "no raft group here")
			return
		}
		var req struct {
			Node string `json:"node"`
			Addr string `json:"addr"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<12))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Node == "" || (req.Addr != "" && change != core.ConsensusAddVoter) {
			msg := "body must be JSON {node}"
			if change == core.ConsensusAddVoter {
				msg = "body must be JSON {node, addr?} (addr: the raft address of a node not yet a member)"
			}
			writeError(w, http.StatusBadRequest, "bad_request", msg)
			return
		}
		answer(w, r, 60*time.Second, func(ctx context.Context) (any, error) {
			return s.opts.RaftChange(ctx, change, req.Node, req.Addr, s.user(r))
		})
	}
}

// peers reports, for every live peer, whether this broker reaches it over
// the inter-broker transport as a peer (stream, @node handshake, one round
// trip) and how long that took: the check an operator runs after changing
// peer addresses, TLS material or firewalls.
func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	if s.opts.Peers == nil {
		writeError(w, http.StatusNotFound, "not_found", "standalone broker: no peers")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, s.opts.Peers(ctx))
}

// connections lists every open client connection: client id, user, remote
// address, subscriptions, and — on an owner — the gateway and end user a
// forwarded session acts for (core/forward/README.md#observability).
func (s *Server) connections(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Connections == nil {
		writeError(w, http.StatusNotFound, "not_found", "no connection listing")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"connections": s.opts.Connections()})
}
