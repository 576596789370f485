package memcoord

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
)

var (
	_ core.Coordinator   = (*Member)(nil)
	_ core.LeaseAttacher = (*Member)(nil)
)

// Member is one member's handle on a Store; it implements core.Coordinator.
type Member struct {
	s      *Store
	id     string
	closed atomic.Bool

	mu          sync.Mutex
	leaderships map[*leadership]struct{}
}

// ID is the member id given to Store.Member.
func (m *Member) ID() string { return m.id }

// begin is the common prologue: ctx, then closed/paused, holding s.mu on
// success (the caller unlocks).
func (m *Member) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		if m.closed.Load() {
			return core.ErrClosed
		}
		return err
	}
	m.s.mu.Lock()
	if err := m.s.checkLocked(m); err != nil {
		m.s.mu.Unlock()
		return err
	}
	return nil
}

// Get reads one key.
func (m *Member) Get(ctx context.Context, key string) (core.KV, error) {
	if err := core.CheckKey(key); err != nil {
		return core.KV{}, err
	}
	if err := m.begin(ctx); err != nil {
		return core.KV{}, err
	}
	defer m.s.mu.Unlock()
	return m.s.getLocked(key), nil
}

// List reads every key under prefix, sorted, with the current index.
func (m *Member) List(ctx context.Context, prefix string) ([]core.KV, uint64, error) {
	if err := core.CheckPrefix(prefix); err != nil {
		return nil, 0, err
	}
	if err := m.begin(ctx); err != nil {
		return nil, 0, err
	}
	defer m.s.mu.Unlock()
	return m.s.listLocked(prefix), m.s.index, nil
}

// Watch blocks until the index passes after, then lists prefix. It waits on
// the store's broadcast channel, so it costs nothing while idle, and wakes
// on every write (the contract allows returning for writes outside
// prefix), on pause and on Close.
func (m *Member) Watch(ctx context.Context, prefix string, after uint64) ([]core.KV, uint64, error) {
	if err := core.CheckPrefix(prefix); err != nil {
		return nil, 0, err
	}
	for {
		if err := m.begin(ctx); err != nil {
			return nil, 0, err
		}
		s := m.s
		if s.index > after {
			kvs, idx := s.listLocked(prefix), s.index
			s.mu.Unlock()
			return kvs, idx, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			if m.closed.Load() {
				return nil, 0, core.ErrClosed
			}
			return nil, 0, ctx.Err()
		}
	}
}

// CompareAndSet writes key when its version matches, unbinding it from any
// lease.
func (m *Member) CompareAndSet(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if err := core.CheckKey(key); err != nil {
		return 0, err
	}
	if err := m.begin(ctx); err != nil {
		return 0, err
	}
	defer m.s.mu.Unlock()
	return m.s.casLocked(key, value, version, "")
}

// CompareAndDelete deletes key when its version matches.
func (m *Member) CompareAndDelete(ctx context.Context, key string, version uint64) error {
	if err := core.CheckKey(key); err != nil {
		return err
	}
	if err := m.begin(ctx); err != nil {
		return err
	}
	defer m.s.mu.Unlock()
	return m.s.cadLocked(key, version)
}

// MinTTL is the store's minimum lease TTL.
func (m *Member) MinTTL() time.Duration { return m.s.minTTL }

// GrantLease creates a lease of max(ttl, MinTTL).
func (m *Member) GrantLease(ctx context.Context, ttl time.Duration) (core.Lease, error) {
	ttl = max(ttl, m.s.minTTL)
	called := m.s.clock.Now()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	defer m.s.mu.Unlock()
	rec := m.s.grantLocked(ttl)
	return m.s.newHandleLocked(m, rec, called), nil
}

// AttachLease implements LeaseAttacher.
func (m *Member) AttachLease(ctx context.Context, id string) (core.Lease, error) {
	called := m.s.clock.Now()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	defer m.s.mu.Unlock()
	rec := m.s.liveLocked(id)
	if rec == nil {
		return nil, core.ErrLeaseLost
	}
	m.s.armLocked(rec)
	return m.s.newHandleLocked(m, rec, called), nil
}

// Close ends the member: its calls return core.ErrClosed from now on and
// its leaderships end at once, but its leases are left to expire, so a
// Close looks to the rest of the cluster exactly like a crash.
func (m *Member) Close() error {
	if m.closed.Swap(true) {
		return core.ErrClosed
	}
	m.mu.Lock()
	ls := m.leaderships
	m.leaderships = nil
	m.mu.Unlock()
	for l := range ls {
		l.stop()
	}
	m.s.mu.Lock()
	m.s.notifyLocked() // wake this member's Watch and Campaign calls
	m.s.mu.Unlock()
	return nil
}

func sortKVs(kvs []core.KV) {
	slices.SortFunc(kvs, func(a, b core.KV) int { return strings.Compare(a.Key, b.Key) })
}
