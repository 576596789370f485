package memcoord

import (
	"sync"
	"time"
)

// Clock is the time source of a Store. Every deadline in the package (lease
// expiry on the store side, ValidUntil on the holder side, the election
// keepalive) is computed from Now and waited for with AfterFunc, never with
// time.Sleep or a goroutine of our own, so a FakeClock makes all of it
// deterministic: nothing happens until the test calls Advance.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, in its own goroutine (RealClock) or inside
	// FakeClock.Advance, when d has elapsed on this clock.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop cancels the call; it reports whether the call was still
	// pending (false: it ran or is running).
	Stop() bool
}

// RealClock is the wall clock (with Go's monotonic reading, so deadlines
// do not move when the system time is set).
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// FakeClock is a manual clock for deterministic tests and simulation. Time
// stands still until Advance moves it; Advance runs the due callbacks one
// by one, in deadline order, with Now equal to each callback's deadline
// while it runs. Callbacks scheduled by a callback inside the window run in
// the same Advance, so "renew every TTL/3" keeps a lease alive across one
// long Advance exactly as it would in real time.
type FakeClock struct {
	advance sync.Mutex // serialises Advance so callbacks never interleave
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	timers  []*fakeTimer
}

// NewFakeClock returns a FakeClock reading start (a fixed instant, for
// reproducible runs, when start is zero).
func NewFakeClock(start time.Time) *FakeClock {
	if start.IsZero() {
		start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &FakeClock{now: start}
}

// Now returns the clock's current instant.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d. A d <= 0 runs at the next Advance
// (even Advance(0)), never synchronously, so callers may hold locks.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(max(d, 0)), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d, running every callback that falls
// due on the way. Callbacks run on the caller's goroutine, with no clock
// lock held.
func (c *FakeClock) Advance(d time.Duration) {
	c.advance.Lock()
	defer c.advance.Unlock()
	c.mu.Lock()
	target := c.now.Add(max(d, 0))
	for {
		t := c.nextDueLocked(target)
		if t == nil {
			break
		}
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = target
	c.mu.Unlock()
}

// Pending is the number of scheduled callbacks (for tests that wait until
// a component has armed its timers).
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// nextDueLocked removes and returns the earliest timer due by target (ties
// broken by scheduling order), or nil.
func (c *FakeClock) nextDueLocked(target time.Time) *fakeTimer {
	best := -1
	for i, t := range c.timers {
		if t.when.After(target) {
			continue
		}
		if best < 0 || t.when.Before(c.timers[best].when) ||
			(t.when.Equal(c.timers[best].when) && t.seq < c.timers[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	t := c.timers[best]
	c.removeLocked(best)
	return t
}

func (c *FakeClock) removeLocked(i int) {
	last := len(c.timers) - 1
	c.timers[i] = c.timers[last]
	c.timers[last] = nil
	c.timers = c.timers[:last]
}

type fakeTimer struct {
	c    *FakeClock
	when time.Time
	seq  uint64
	f    func()
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.removeLocked(i)
			return true
		}
	}
	return false
}
