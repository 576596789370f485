package memcoord

import (
	"context"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
)

// lease is a holder's view of a lease. It keeps its own ValidUntil and a
// local timer on it, as a remote holder would: Done closes when ValidUntil
// passes without a successful renew even if the store has not expired the
// lease yet (its deadline is at or after ValidUntil), so a holder cut off
// from the store (PauseMember) stops acting on the lease before anyone else
// can take what it guarded.
//
// Lock order: Store.mu, then lease.mu. Methods never call into the store
// while holding lease.mu.
type lease struct {
	m   *Member
	id  string
	ttl time.Duration

	mu         sync.Mutex
	validUntil time.Time
	ended      bool
	gen        uint64 // invalidates stale local timers
	timer      clock.Timer
	done       chan struct{}
	onEnd      []func() // leadership hooks, run once at the end
}

// newHandleLocked registers a holder view of rec valid until called+ttl.
func (s *Store) newHandleLocked(m *Member, rec *leaseRec, called time.Time) *lease {
	h := &lease{m: m, id: rec.id, ttl: rec.ttl, done: make(chan struct{})}
	h.mu.Lock()
	h.extendLocked(called)
	h.mu.Unlock()
	rec.handles = append(rec.handles, h)
	return h
}

// extendLocked sets ValidUntil to called+ttl and re-arms the local timer.
func (h *lease) extendLocked(called time.Time) {
	h.validUntil = called.Add(h.ttl)
	h.gen++
	if h.timer != nil {
		h.timer.Stop()
	}
	gen, clock := h.gen, h.m.s.clock
	h.timer = clock.AfterFunc(h.validUntil.Sub(clock.Now()), func() { h.localExpiry(gen) })
}

// localExpiry ends the holder's view when ValidUntil passed unrenewed.
func (h *lease) localExpiry(gen uint64) {
	h.mu.Lock()
	if h.ended || gen != h.gen || h.m.s.clock.Now().Before(h.validUntil) {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.end()
}

// end marks the lease lost for this holder: ValidUntil becomes zero, Done
// closes and the hooks run. Idempotent.
func (h *lease) end() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.validUntil = time.Time{}
	if h.timer != nil {
		h.timer.Stop()
	}
	hooks := h.onEnd
	h.onEnd = nil
	close(h.done)
	h.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// addOnEnd runs f when the lease ends (at once if it already has).
func (h *lease) addOnEnd(f func()) {
	h.mu.Lock()
	if !h.ended {
		h.onEnd = append(h.onEnd, f)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	f()
}

func (h *lease) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

func (h *lease) ID() string            { return h.id }
func (h *lease) TTL() time.Duration    { return h.ttl }
func (h *lease) Done() <-chan struct{} { return h.done }

func (h *lease) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Put writes key bound to the lease.
func (h *lease) Put(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if err := core.CheckKey(key); err != nil {
		return 0, err
	}
	if err := h.m.begin(ctx); err != nil {
		return 0, err
	}
	s := h.m.s
	defer s.mu.Unlock()
	if h.isEnded() || s.liveLocked(h.id) == nil {
		return 0, core.ErrLeaseLost
	}
	return s.casLocked(key, value, version, h.id)
}

// Renew moves the store deadline to now+TTL and ValidUntil to the call
// time+TTL; the call time is read before the store acts, so ValidUntil is
// never later than the store's deadline.
func (h *lease) Renew(ctx context.Context) error {
	if h.isEnded() {
		if h.m.closed.Load() {
			return core.ErrClosed
		}
		return core.ErrLeaseLost
	}
	s := h.m.s
	called := s.clock.Now()
	if err := h.m.begin(ctx); err != nil {
		return err
	}
	rec := s.liveLocked(h.id)
	if rec != nil {
		s.armLocked(rec)
	}
	s.mu.Unlock()
	if rec == nil {
		h.end() // the store ended it; make sure this view agrees
		return core.ErrLeaseLost
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		// Our own ValidUntil passed while the renew was in flight: the
		// holder has already acted on the loss, so it stays lost (the
		// store lease, renewed or not, now just expires).
		return core.ErrLeaseLost
	}
	h.extendLocked(called)
	return nil
}

// Revoke ends the lease now and deletes its keys. Revoking a lease that
// already ended succeeds: the goal state holds.
func (h *lease) Revoke(ctx context.Context) error {
	if err := h.m.begin(ctx); err != nil {
		return err
	}
	s := h.m.s
	if rec := s.leases[h.id]; rec != nil {
		s.endLocked(rec)
	}
	s.mu.Unlock()
	h.end()
	return nil
}
