// Package lograte keeps a repeated log line from flooding the log: a
// Limiter lets a line about one key through at most once per interval and
// counts the ones it held back, so the line that does go out can say how
// many were left out. It is a leaf package: it imports only the standard
// library.
package lograte

import (
	"sync"
	"time"
)

// Limiter rate-limits log lines per key. The zero value with Every set is
// ready to use and holds no memory until its first line (a limiter per
// client connection costs nothing while the connection is quiet). Safe for
// concurrent use.
type Limiter[K comparable] struct {
	// Every is the least time between two lines about one key.
	Every time.Duration

	mu   sync.Mutex
	keys map[K]*state
}

type state struct {
	last    time.Time
	skipped int
}

// Allow reports whether a line about key may be logged at now. When it
// may, skipped is the number of lines about key held back since the last
// one allowed, and the count starts again; when it may not, the line is
// counted as held back.
func (l *Limiter[K]) Allow(key K, now time.Time) (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil {
		if l.keys == nil {
			l.keys = make(map[K]*state)
		}
		st = &state{}
		l.keys[key] = st
	}
	if now.Sub(st.last) < l.Every {
		st.skipped++
		return false, 0
	}
	skipped = st.skipped
	st.last, st.skipped = now, 0
	return true, skipped
}
