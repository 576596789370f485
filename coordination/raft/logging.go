package raft

import (
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fibrilgo/fibril/plugins"
)

// newHCLog gives hashicorp/raft the broker's slog logger through the
// shared bridge, so raft's lines (leadership, membership) share the
// broker's format and level. raft's lines about failing to reach one peer
// go to debug (see peerDetail).
func newHCLog(l *slog.Logger, name string) hclog.Logger {
	return raftHCLog{plugins.HCLog(l, name)}
}

// peerDetail lists hashicorp/raft's (v1.8) messages about one RPC to one
// peer that failed. While a peer is down the leader logs the heartbeat
// one several times a second, at ERROR, which reads as an outage of the
// whole cluster; raft retries all of them by itself. The member reports
// the peer's reachability instead (peerWatch: a line when it goes, a
// reminder while it stays away, a line when it is back), so these are
// details, logged at debug. The value is the key that names the peer:
// a line without it is about something else (a follower's own snapshot
// install failing, say) and keeps its level.
var peerDetail = map[string]string{
	"failed to heartbeat to":                  "peer",
	"failed to appendEntries to":              "peer",
	"failed to pipeline appendEntries":        "peer",
	"failed to start pipeline replication to": "peer",
	"failed to send snapshot to":              "peer",
	"failed to install snapshot":              "peer",
	"failed to contact":                       "server-id", // the leader's lease check
}

// raftHCLog is the bridge with raft's per-peer RPC failures moved to
// debug; every logger derived from it (Named, With) does the same.
type raftHCLog struct{ hclog.Logger }

func (l raftHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level > hclog.Debug && level != hclog.Off && isPeerDetail(msg, args) {
		level = hclog.Debug
	}
	l.Logger.Log(level, msg, args...)
}

func isPeerDetail(msg string, args []any) bool {
	key, ok := peerDetail[msg]
	if !ok {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == key {
			return true
		}
	}
	return false
}

func (l raftHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l raftHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l raftHCLog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l raftHCLog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l raftHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l raftHCLog) With(args ...any) hclog.Logger    { return raftHCLog{l.Logger.With(args...)} }
func (l raftHCLog) Named(name string) hclog.Logger   { return raftHCLog{l.Logger.Named(name)} }
func (l raftHCLog) ResetNamed(n string) hclog.Logger { return raftHCLog{l.Logger.ResetNamed(n)} }

// throttle lets a repeated log line through once per interval per key,
// so a peer that keeps failing to authenticate logs clearly but does not
// flood the log.
type throttle struct {
	mu    sync.Mutex
	every time.Duration
	last  map[string]time.Time
}

func newThrottle(every time.Duration) *throttle {
	return &throttle{every: every, last: map[string]time.Time{}}
}

func (t *throttle) allow(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if last, ok := t.last[key]; ok && now.Sub(last) < t.every {
		return false
	}
	if len(t.last) > 1024 { // bounded: forget everything rather than grow
		clear(t.last)
	}
	t.last[key] = now
	return true
}
