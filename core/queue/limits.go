package queue

import (
	"sync/atomic"

	"github.com/fibrilgo/fibril/core"
)

// Queue limits (docs/admin.md#limits): the most messages a queue
// partition holds, and what a publish past it gets. They are runtime
// settings, so they apply without a restart and do not touch the log's
// format.

// Overflow is what a publish to a full partition does.
type Overflow uint8

const (
	// RejectPublish refuses the publish (503, retry later); nothing is
	// stored.
	RejectPublish Overflow = iota
	// DropOldest settles the oldest ready message to make room (it is
	// gone: not delivered, not dead-lettered); when nothing is ready
	// (everything is in flight or delayed) the publish is refused as with
	// RejectPublish.
	DropOldest
)

func (o Overflow) String() string {
	if o == DropOldest {
		return "drop_oldest"
	}
	return "reject_publish"
}

// Limit bounds one queue.
type Limit struct {
	// MaxMessages is the most unsettled messages (ready, in flight,
	// delayed) one partition holds; 0 = no limit.
	MaxMessages uint64
	Overflow    Overflow
}

// limitStats count what limits did.
type limitStats struct {
	rejected, dropped atomic.Uint64
}

// SetLimits replaces every queue's limit: queues not in limits have none.
// Queues declared later pick theirs up when they are opened.
func (m *Manager) SetLimits(limits map[Key]Limit) {
	norm := make(map[Key]Limit, len(limits))
	for k, l := range limits {
		norm[k.norm()] = l
	}
	m.limits.Store(&norm)
	m.queues.Range(func(_, v any) bool {
		q := v.(*queue)
		q.setLimit(norm)
		return true
	})
}

// LimitOf returns the limit in force for a queue (ok false: none, or no
// such queue).
func (m *Manager) LimitOf(key Key) (Limit, bool) {
	v, ok := m.queues.Load(key.norm())
	if !ok {
		return Limit{}, false
	}
	if l := v.(*queue).limit.Load(); l != nil {
		return *l, true
	}
	return Limit{}, false
}

func (q *queue) setLimit(limits map[Key]Limit) {
	if l, ok := limits[q.key]; ok && l.MaxMessages > 0 {
		q.limit.Store(&l)
	} else {
		q.limit.Store(nil)
	}
}

// makeRoomLocked enforces the queue's limit before a publish: nil when the
// message may be appended (after dropping the oldest ready message if
// that is the policy), else the refusal.
func (p *Partition) makeRoomLocked() error {
	l := p.q.limit.Load()
	if l == nil || p.unsettled < l.MaxMessages {
		return nil
	}
	if l.Overflow == DropOldest {
		if off, fresh, ok := p.peekReadyLocked(); ok {
			p.takeLocked(off, fresh)
			if _, err := p.dropLocked([]uint64{off}); err != nil {
				return p.storageErr("drop oldest", err)
			}
			p.m.limitStats.dropped.Add(1)
			return nil
		}
	}
	p.m.limitStats.rejected.Add(1)
	return core.Errorf(core.ErrUnavailable, "%s is full: %d messages, the limit is %d per partition (overflow %s); retry later",
		p.name, p.unsettled, l.MaxMessages, l.Overflow)
}

// RefuseWrites makes every publish, to queues and streams, fail with
// ErrUnavailable and reason (the disk is nearly full,
// docs/admin.md#limits); "" accepts them again. Acknowledgements,
// dead-letter copies already under way and replication are not refused:
// they are small, and they are what frees space.
func (m *Manager) RefuseWrites(reason string) {
	if reason == "" {
		m.refuse.Store(nil)
		return
	}
	m.refuse.Store(&reason)
}

// refused returns the publish refusal in force, if any.
func refused(r *atomic.Pointer[string]) error {
	if why := r.Load(); why != nil {
		return core.Errorf(core.ErrUnavailable, "%s", *why)
	}
	return nil
}
