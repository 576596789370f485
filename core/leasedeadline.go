package core

import (
	"sync"
	"time"
)

// LeaseDeadline is the holder's side of a lease handle, the same for every
// backend: until when the lease is surely held (Lease.ValidUntil), and the
// Done channel, closed once that instant passes without a renewal or the
// lease is known lost. A backend's Lease embeds it and calls Extend after
// each successful renewal and Lose when the backend says the lease ended.
type LeaseDeadline struct {
	mu         sync.Mutex
	validUntil time.Time // zero once lost
	timer      *time.Timer
	done       chan struct{}
}

// NewLeaseDeadline starts a deadline valid until until.
func NewLeaseDeadline(until time.Time) *LeaseDeadline {
	d := &LeaseDeadline{validUntil: until, done: make(chan struct{})}
	d.mu.Lock()
	d.timer = time.AfterFunc(time.Until(until), d.expire)
	d.mu.Unlock()
	return d
}

// ValidUntil implements Lease.ValidUntil.
func (d *LeaseDeadline) ValidUntil() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.validUntil
}

// Done implements Lease.Done.
func (d *LeaseDeadline) Done() <-chan struct{} { return d.done }

// Lost reports whether the lease is known lost (or ValidUntil passed).
func (d *LeaseDeadline) Lost() bool { return d.ValidUntil().IsZero() }

// Extend moves ValidUntil to until (never backwards). It returns false when
// the lease was already lost — ValidUntil passed while the renewal was in
// flight — which then stays lost.
func (d *LeaseDeadline) Extend(until time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.validUntil.IsZero() {
		return false
	}
	if until.After(d.validUntil) {
		d.validUntil = until
	}
	return true
}

// Lose marks the lease lost and closes Done (once).
func (d *LeaseDeadline) Lose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loseLocked()
}

// expire runs when ValidUntil may have passed without a renewal.
func (d *LeaseDeadline) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.validUntil.IsZero() {
		return
	}
	if left := time.Until(d.validUntil); left > 0 {
		d.timer.Reset(left) // a renewal moved it
		return
	}
	d.loseLocked()
}

func (d *LeaseDeadline) loseLocked() {
	if d.validUntil.IsZero() {
		return
	}
	d.validUntil = time.Time{}
	d.timer.Stop()
	close(d.done)
}
