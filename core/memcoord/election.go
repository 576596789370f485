package memcoord

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
)

// Campaign is a lease-backed lock: the leader is whoever created
// _elections/<name>, bound to a lease of Options.ElectionTTL that this
// member keeps alive. Term is the lock key's version, so terms of one
// election strictly increase (the store index only grows). Waiting
// campaigners sleep on the store's broadcast channel and retry when the key
// is gone; the lock is a generic one, so two Campaign calls of the same
// member also exclude each other.
func (m *Member) Campaign(ctx context.Context, election string) (core.Leadership, error) {
	if election == "" {
		return nil, core.Errorf(core.ErrBadRequest, "coordination: empty election name")
	}
	key := ElectionPrefix + election
	if err := core.CheckKey(key); err != nil {
		return nil, err
	}
	s := m.s
	for {
		called := s.clock.Now()
		if err := m.begin(ctx); err != nil {
			return nil, err
		}
		if _, held := s.keys[key]; !held {
			l := m.acquireLocked(key, called)
			s.mu.Unlock()
			if !m.register(l) {
				l.stop() // closed meanwhile; the lock expires with its lease
				return nil, core.ErrClosed
			}
			l.schedule()
			return l, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			if m.closed.Load() {
				return nil, core.ErrClosed
			}
			return nil, ctx.Err()
		}
	}
}

// acquireLocked creates the lock key bound to a fresh election lease.
func (m *Member) acquireLocked(key string, called time.Time) *leadership {
	s := m.s
	rec := s.grantLocked(s.electionTTL)
	h := s.newHandleLocked(m, rec, called)
	term, err := s.casLocked(key, []byte(m.id), 0, rec.id)
	if err != nil {
		panic("memcoord: election key appeared under the store lock: " + err.Error())
	}
	l := &leadership{m: m, lease: h, term: term, lost: make(chan struct{})}
	// The lease's end closes Lost synchronously, before the store deletes
	// the lock key, so a new leader never overlaps a holder that still
	// believes it leads.
	h.addOnEnd(l.stop)
	return l
}

func (m *Member) register(l *leadership) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaderships == nil {
		return false
	}
	m.leaderships[l] = struct{}{}
	return true
}

func (m *Member) unregister(l *leadership) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leaderships, l)
}

// leadership is one term. Its keepalive is a chain of Clock.AfterFunc calls
// (every TTL/3) rather than a goroutine, so a clock.Fake drives it
// deterministically and a stopped term leaves nothing running.
type leadership struct {
	m     *Member
	lease *lease
	term  uint64
	lost  chan struct{}

	mu      sync.Mutex
	stopped bool
	timer   clock.Timer
}

func (l *leadership) Term() uint64          { return l.term }
func (l *leadership) Lost() <-chan struct{} { return l.lost }

// Resign closes Lost first, then revokes the lease (deleting the lock), so
// the next leader is elected only after this one has stepped down. When
// the revoke cannot reach the store the lock still goes when the lease
// expires.
func (l *leadership) Resign(ctx context.Context) error {
	l.stop()
	return l.lease.Revoke(ctx)
}

func (l *leadership) schedule() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.timer = l.m.s.clock.AfterFunc(l.lease.ttl/3, l.tick)
}

// tick renews the election lease. A failed renew that is not final
// (paused member) is retried at the next tick; if none succeeds before
// ValidUntil the lease's local expiry ends the term.
func (l *leadership) tick() {
	l.mu.Lock()
	stopped := l.stopped
	l.mu.Unlock()
	if stopped {
		return
	}
	err := l.lease.Renew(context.Background())
	if errors.Is(err, core.ErrLeaseLost) || errors.Is(err, core.ErrClosed) {
		l.stop()
		return
	}
	l.schedule()
}

// stop ends the term locally: Lost closes and the keepalive stops. It does
// not touch the lease (Close must not revoke; Resign revokes itself).
func (l *leadership) stop() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	close(l.lost)
	l.mu.Unlock()
	l.m.unregister(l)
}
