package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QueueAdmin is the queues and streams API (docs/admin.md#queues).
type QueueAdmin interface {
	// List describes every queue and stream (kind "stream": streams
	// only); with topic set, only that topic's (and with group, only that
	// queue), ErrNotFound when there is none.
	List(ctx context.Context, kind, topic, group string) (any, error)
	// Purge drops a queue's ready messages on every partition; user is the
	// admin user, for the audit log.
	Purge(ctx context.Context, topic, group, user string) (any, error)
	// Messages reads one queue partition's messages (S-69).
	Messages(ctx context.Context, q MessagesQuery) (any, error)
	// Replay copies dead letters back to their origin queues (S-68).
	Replay(ctx context.Context, req ReplayRequest, user string) (any, error)
	// Delete removes a queue (kind "queue") or a stream (kind "stream");
	// a queue with messages in flight needs force.
	Delete(ctx context.Context, kind, topic, group string, force bool, user string) (any, error)
	// Repartition starts changing a queue's partition count
	// (docs/repartition.md); a standalone broker answers ErrNotFound.
	Repartition(ctx context.Context, topic, group string, count uint32, user string) (any, error)
}

// MessagesQuery is GET /admin/api/messages' parameters.
type MessagesQuery struct {
	Topic, Group   string
	Partition      uint32
	From           uint64
	Limit          int
	IncludeSettled bool
	PayloadLimit   int      // 0: no payload
	States         []string // empty: every state but settled (with IncludeSettled: every state)
}

// ReplayRequest is POST /admin/api/dlq/replay's body.
type ReplayRequest struct {
	DLQTopic  string   `json:"dlq_topic"`
	DLQGroup  string   `json:"dlq_group"`
	Partition *uint32  `json:"partition"` // nil: every partition of the DLQ
	Offsets   []uint64 `json:"offsets"`   // at most 100, of one partition
	All       bool     `json:"all"`       // every active message instead of Offsets
	Settle    bool     `json:"settle"`    // remove each replayed message from the DLQ once its copy is confirmed
}

// Inspection limits (S-69).
const (
	messagesDefaultLimit = 50
	messagesMaxLimit     = 5000
	payloadDefaultLimit  = 4096
	payloadMaxLimit      = 1 << 20
)

// messageStates are the states GET /admin/api/messages filters on.
var messageStates = []string{"ready", "inflight", "delayed", "pending_dlq", "settled"}

// adminCallTimeout bounds one queues call that fans out to owners.
const adminCallTimeout = 30 * time.Second

// queuesRoute serves a queues API handler behind admin auth; without a
// queues API it answers 404.
func (s *Server) queuesRoute(h http.HandlerFunc) http.Handler {
	return s.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Queues == nil {
			writeError(w, http.StatusNotFound, "not_found", "no queues API")
			return
		}
		h(w, r)
	}))
}

// answer runs call within timeout and writes its result as JSON, or its
// error with the status of S-160.
func answer(w http.ResponseWriter, r *http.Request, timeout time.Duration, call func(context.Context) (any, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	out, err := call(ctx)
	if err != nil {
		writeCoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) registerQueues() {
	s.mux.Handle("GET /admin/api/queues", s.queuesRoute(s.listQueues("", false)))
	s.mux.Handle("GET /admin/api/streams", s.queuesRoute(s.listQueues("stream", false)))
	s.mux.Handle("GET /admin/api/queues/{topic}", s.queuesRoute(s.listQueues("", true)))
	s.mux.Handle("POST /admin/api/queues/purge", s.queuesRoute(s.purgeQueue))
	s.mux.Handle("GET /admin/api/messages", s.queuesRoute(s.messages))
	s.mux.Handle("POST /admin/api/dlq/replay", s.queuesRoute(s.replay))
	s.mux.Handle("POST /admin/api/queues/delete", s.queuesRoute(s.deleteTopic("queue")))
	s.mux.Handle("POST /admin/api/streams/delete", s.queuesRoute(s.deleteTopic("stream")))
	s.mux.Handle("POST /admin/api/repartition", s.queuesRoute(s.repartition))
}

// deleteTopic is POST /admin/api/queues/delete {topic, group?, force?}
// and POST /admin/api/streams/delete {topic}.
func (s *Server) deleteTopic(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Topic string `json:"topic"`
			Group string `json:"group"`
			Force bool   `json:"force"`
		}
		shape := "{topic, group?, force?}"
		if kind == "stream" {
			shape = "{topic}"
		}
		if !readBody(w, r, &req, shape, func() bool { return req.Topic != "" && (kind != "stream" || req.Group == "" && !req.Force) }) {
			return
		}
		answer(w, r, adminCallTimeout, func(ctx context.Context) (any, error) {
			return s.opts.Queues.Delete(ctx, kind, req.Topic, req.Group, req.Force, s.user(r))
		})
	}
}

// repartition is POST /admin/api/repartition {topic, group?,
// partition_count} (docs/repartition.md, S-122).
func (s *Server) repartition(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Topic          string  `json:"topic"`
		Group          string  `json:"group"`
		PartitionCount *uint32 `json:"partition_count"`
	}
	if !readBody(w, r, &req, "{topic, group?, partition_count}", func() bool { return req.Topic != "" && req.PartitionCount != nil }) {
		return
	}
	answer(w, r, adminCallTimeout, func(ctx context.Context) (any, error) {
		return s.opts.Queues.Repartition(ctx, req.Topic, req.Group, *req.PartitionCount, s.user(r))
	})
}

// messages is GET /admin/api/messages?topic&group&partition&from&limit&
// include_settled&include_payload&payload_limit_bytes&status (S-69).
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := MessagesQuery{Topic: v.Get("topic"), Group: v.Get("group"), Limit: messagesDefaultLimit, PayloadLimit: payloadDefaultLimit}
	bad := func(msg string) { writeError(w, http.StatusBadRequest, "bad_request", msg) }
	if q.Topic == "" {
		bad("topic is required")
		return
	}
	num := func(name string, max uint64, set func(uint64)) bool {
		if t := v.Get(name); t != "" {
			n, err := strconv.ParseUint(t, 10, 64)
			if err != nil || n > max {
				bad(fmt.Sprintf("%s must be a whole number up to %d", name, max))
				return false
			}
			set(n)
		}
		return true
	}
	flag := func(name string, set func(bool)) bool {
		if t := v.Get(name); t != "" {
			b, err := strconv.ParseBool(t)
			if err != nil {
				bad(name + " must be true or false")
				return false
			}
			set(b)
		}
		return true
	}
	includePayload := true
	if !num("partition", math.MaxUint32, func(n uint64) { q.Partition = uint32(n) }) ||
		!num("from", math.MaxUint64, func(n uint64) { q.From = n }) ||
		!num("limit", messagesMaxLimit, func(n uint64) { q.Limit = int(n) }) ||
		!num("payload_limit_bytes", payloadMaxLimit, func(n uint64) { q.PayloadLimit = int(n) }) ||
		!flag("include_settled", func(b bool) { q.IncludeSettled = b }) ||
		!flag("include_payload", func(b bool) { includePayload = b }) {
		return
	}
	if !includePayload {
		q.PayloadLimit = 0
	}
	if st := v.Get("status"); st != "" && st != "active" {
		for _, x := range strings.Split(st, ",") {
			if !slices.Contains(messageStates, x) {
				bad(fmt.Sprintf("status %q: want a comma-separated list of %s, or active", x, strings.Join(messageStates, ", ")))
				return
			}
			q.States = append(q.States, x)
			if x == "settled" {
				q.IncludeSettled = true
			}
		}
	}
	answer(w, r, adminCallTimeout, func(ctx context.Context) (any, error) { return s.opts.Queues.Messages(ctx, q) })
}

// replay is POST /admin/api/dlq/replay (S-68).
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	var req ReplayRequest
	if !readBody(w, r, &req, "{dlq_topic, dlq_group?, partition?, offsets[] | all, settle?}", func() bool { return true }) {
		return
	}
	// A replay of everything may take a while: the copies wait for their
	// confirms.
	answer(w, r, 10*time.Minute, func(ctx context.Context) (any, error) { return s.opts.Queues.Replay(ctx, req, s.user(r)) })
}

func (s *Server) listQueues(kind string, one bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic, group := "", ""
		if one {
			topic, group = r.PathValue("topic"), r.URL.Query().Get("group")
		}
		answer(w, r, adminCallTimeout, func(ctx context.Context) (any, error) { return s.opts.Queues.List(ctx, kind, topic, group) })
	}
}

// purgeQueue is POST /admin/api/queues/purge {topic, group?}.
func (s *Server) purgeQueue(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Topic string `json:"topic"`
		Group string `json:"group"`
	}
	if !readBody(w, r, &req, "{topic, group?}", func() bool { return strings.TrimSpace(req.Topic) != "" }) {
		return
	}
	answer(w, r, adminCallTimeout, func(ctx context.Context) (any, error) {
		return s.opts.Queues.Purge(ctx, req.Topic, req.Group, s.user(r))
	})
}

// user names who made an admin request, for audit logs: the admin user,
// or "anonymous" when admin auth is off.
func (s *Server) user(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && s.opts.Username != "" {
		return u
	}
	return "anonymous"
}

// readBody decodes r's JSON body (at most 64 KiB, no unknown fields) into
// v. When that fails, or valid reports false, it answers 400 with the
// shape the body must have and returns false.
func readBody(w http.ResponseWriter, r *http.Request, v any, shape string, valid func() bool) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && valid() {
		return true
	}
	msg := "body must be JSON " + shape
	if err != nil {
		msg += ": " + err.Error()
	}
	writeError(w, http.StatusBadRequest, "bad_request", msg)
	return false
}
