// Package memcoord is an in-memory core.Coordinator: one Store holds the
// state of a whole coordination cluster, and each Member handle plays one
// broker's connection to it. It backs unit tests and the deterministic
// simulation harness (with a clock.Fake), so it implements the contract of
// core/coordinator.go to the letter, including the failure modes a real
// backend shows: leases that expire when not renewed, members that crash
// (Close) without revoking their leases, and members whose coordinator is
// unreachable (PauseMember).
//
// The package starts no goroutine of its own. Waiting is done on a
// broadcast channel (Watch, Campaign) and every timed action is a
// Clock.AfterFunc, so with a clock.Fake nothing moves until the test
// advances time.
package memcoord

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
)

// ElectionPrefix is where election locks live (reserved "_" space).
const ElectionPrefix = "_elections/"

// Options configure a Store. The zero value is usable.
type Options struct {
	// Clock is the time source (default clock.Real{}).
	Clock clock.Clock
	// MinTTL is the shortest lease TTL (default 50 ms); shorter requests
	// are raised to it.
	MinTTL time.Duration
	// ElectionTTL is the TTL of the lease behind a leadership (default
	// 10 × MinTTL). It bounds how long a crashed leader blocks the next
	// one; the keepalive renews it every ElectionTTL/3.
	ElectionTTL time.Duration
}

// Store is the shared state of one coordination cluster. Members created by
// Member see the same keys, leases and elections.
type Store struct {
	clock       clock.Clock
	minTTL      time.Duration
	electionTTL time.Duration

	mu        sync.Mutex
	index     uint64 // global store index: +1 per write
	keys      map[string]*entry
	leases    map[string]*leaseRec
	nextLease uint64
	paused    map[string]bool
	// changed is closed and replaced on every change a waiter may care
	// about (a write, a pause, a member closing): the broadcast that
	// wakes Watch and Campaign without polling.
	changed chan struct{}
}

type entry struct {
	value   []byte
	version uint64
	lease   string
}

// leaseRec is the store side of a lease: the authoritative deadline and
// the keys bound to it.
type leaseRec struct {
	id       string
	ttl      time.Duration
	deadline time.Time // store clock; the lease ends when Now reaches it
	keys     map[string]struct{}
	timer    clock.Timer
	// handles are the holders' views (one per GrantLease/AttachLease);
	// they learn of the end synchronously, before the keys are deleted.
	handles []*lease
}

// NewStore creates an empty store (index 0).
func NewStore(opts Options) *Store {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.MinTTL <= 0 {
		opts.MinTTL = 50 * time.Millisecond
	}
	if opts.ElectionTTL <= 0 {
		opts.ElectionTTL = 10 * opts.MinTTL
	}
	opts.ElectionTTL = max(opts.ElectionTTL, opts.MinTTL)
	return &Store{
		clock:       opts.Clock,
		minTTL:      opts.MinTTL,
		electionTTL: opts.ElectionTTL,
		keys:        make(map[string]*entry),
		leases:      make(map[string]*leaseRec),
		paused:      make(map[string]bool),
		changed:     make(chan struct{}),
	}
}

// Member returns a new handle for the member named id. Handles are
// independent: closing one does not close another with the same id, which
// is how a test restarts a node. PauseMember applies to every handle of id.
func (s *Store) Member(id string) *Member {
	return &Member{s: s, id: id, leaderships: make(map[*leadership]struct{})}
}

// PauseMember makes id's coordinator unreachable: its calls (including
// lease renewals and the election keepalive) fail with
// core.ErrCoordinationUnavailable until ResumeMember. Its leases are not
// touched, so they expire unless it resumes in time — the situation of a
// broker whose coordination plugin died.
func (s *Store) PauseMember(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused[id] = true
	s.notifyLocked()
}

// ResumeMember undoes PauseMember.
func (s *Store) ResumeMember(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.paused, id)
	s.notifyLocked()
}

// Index is the current store index.
func (s *Store) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// Leases is the number of live leases (for tests).
func (s *Store) Leases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}

func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// writeLocked takes the next index for a write and wakes the waiters.
func (s *Store) writeLocked() uint64 {
	s.index++
	s.notifyLocked()
	return s.index
}

// checkLocked is the gate every member call passes.
func (s *Store) checkLocked(m *Member) error {
	if m.closed.Load() {
		return core.ErrClosed
	}
	if s.paused[m.id] {
		return core.ErrCoordinationUnavailable
	}
	return nil
}

func (s *Store) getLocked(key string) core.KV {
	e, ok := s.keys[key]
	if !ok {
		return core.KV{Key: key}
	}
	return core.KV{Key: key, Value: clone(e.value), Version: e.version, Lease: e.lease}
}

func (s *Store) listLocked(prefix string) []core.KV {
	var out []core.KV
	for k := range s.keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, s.getLocked(k))
		}
	}
	sortKVs(out)
	return out
}

// casLocked is the one write path for keys: compare, then write bound to
// leaseID ("" unbinds).
func (s *Store) casLocked(key string, value []byte, version uint64, leaseID string) (uint64, error) {
	e := s.keys[key]
	var cur uint64
	if e != nil {
		cur = e.version
	}
	if version != core.AnyVersion && version != cur {
		return 0, core.Errorf(core.ErrVersionConflict, "coordination: key %q is at version %d, not %d", key, cur, version)
	}
	if e == nil {
		e = &entry{}
		s.keys[key] = e
	}
	s.unbindLocked(key, e)
	e.value = clone(value)
	e.version = s.writeLocked()
	if leaseID != "" {
		e.lease = leaseID
		s.leases[leaseID].keys[key] = struct{}{}
	}
	return e.version, nil
}

func (s *Store) unbindLocked(key string, e *entry) {
	if e.lease == "" {
		return
	}
	if rec := s.leases[e.lease]; rec != nil {
		delete(rec.keys, key)
	}
	e.lease = ""
}

func (s *Store) cadLocked(key string, version uint64) error {
	e := s.keys[key]
	var cur uint64
	if e != nil {
		cur = e.version
	}
	if version != core.AnyVersion && version != cur {
		return core.Errorf(core.ErrVersionConflict, "coordination: key %q is at version %d, not %d", key, cur, version)
	}
	if e == nil {
		return nil // absent already: nothing to write
	}
	s.unbindLocked(key, e)
	delete(s.keys, key)
	s.writeLocked()
	return nil
}

// grantLocked creates a lease whose store deadline is now+ttl.
func (s *Store) grantLocked(ttl time.Duration) *leaseRec {
	s.nextLease++
	rec := &leaseRec{
		id:   "lease-" + strconv.FormatUint(s.nextLease, 10),
		ttl:  ttl,
		keys: make(map[string]struct{}),
	}
	s.leases[rec.id] = rec
	s.armLocked(rec)
	return rec
}

// armLocked (re)starts the store-side expiry of rec at now+ttl.
func (s *Store) armLocked(rec *leaseRec) {
	rec.deadline = s.clock.Now().Add(rec.ttl)
	if rec.timer != nil {
		rec.timer.Stop()
	}
	rec.timer = s.clock.AfterFunc(rec.ttl, func() { s.expire(rec) })
}

// liveLocked returns the lease if it has not ended, ending it first when
// its deadline passed but the timer has not fired yet (a late timer must
// not let a renew revive a dead lease).
func (s *Store) liveLocked(id string) *leaseRec {
	rec := s.leases[id]
	if rec == nil {
		return nil
	}
	if !s.clock.Now().Before(rec.deadline) {
		s.endLocked(rec)
		return nil
	}
	return rec
}

// expire is the store-side timer of a lease.
func (s *Store) expire(rec *leaseRec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[rec.id] != rec {
		return // already ended
	}
	if s.clock.Now().Before(rec.deadline) {
		return // renewed; a newer timer is armed
	}
	s.endLocked(rec)
}

// endLocked ends a lease (expiry or revoke): the holders learn first, then
// every bound key goes in one write.
func (s *Store) endLocked(rec *leaseRec) {
	delete(s.leases, rec.id)
	if rec.timer != nil {
		rec.timer.Stop()
	}
	for _, h := range rec.handles {
		h.end()
	}
	rec.handles = nil
	if len(rec.keys) == 0 {
		return
	}
	for k := range rec.keys {
		delete(s.keys, k)
	}
	rec.keys = nil
	s.writeLocked()
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
