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
// broker's format and level.
func newHCLog(l *slog.Logger, name string) hclog.Logger { return plugins.HCLog(l, name) }

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
