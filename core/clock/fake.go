package clock

import (
	"sync"
	"time"
)

// Fake is a manual clock for deterministic tests and simulation. Time
// stands still until Advance or Set moves it. Advance runs the due
// callbacks one by one, in deadline order (ties in scheduling order), with
// Now equal to each callback's deadline while it runs. Callbacks scheduled
// by a callback inside the window run in the same Advance, so "renew every
// TTL/3" keeps a lease alive across one long Advance exactly as it would in
// real time.
type Fake struct {
	advance sync.Mutex // serialises Advance so callbacks never interleave
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	timers  []*fakeTimer
}

// maxRunsPerAdvance bounds the callbacks one Advance runs: a callback that
// keeps re-arming itself for a time already due would otherwise spin
// forever, and a panic names the bug instead.
const maxRunsPerAdvance = 1_000_000

// NewFake returns a Fake reading start (a fixed instant, for reproducible
// runs, when start is zero).
func NewFake(start time.Time) *Fake {
	if start.IsZero() {
		start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &Fake{now: start}
}

// Now returns the clock's current instant.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d. A d <= 0 runs at the next Advance
// (even Advance(0)), never synchronously, so callers may hold locks.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(max(d, 0)), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d (a negative d counts as 0), running
// every callback that falls due on the way. Callbacks run on the caller's
// goroutine, with no clock lock held.
func (c *Fake) Advance(d time.Duration) {
	c.advance.Lock()
	defer c.advance.Unlock()
	c.mu.Lock()
	target := c.now.Add(max(d, 0))
	for range maxRunsPerAdvance {
		t := c.nextDueLocked(target)
		if t == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.mu.Unlock()
	panic("clock.Fake: callbacks keep re-arming for times already due")
}

// Set moves the clock to now without running any callback, as if the
// timers were late (the next Advance runs those that are due). Set may
// move the clock backwards.
func (c *Fake) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// Pending is the number of scheduled callbacks (for tests that wait until
// a component has armed its timers).
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// nextDueLocked removes and returns the earliest timer due by target (ties
// broken by scheduling order), or nil.
func (c *Fake) nextDueLocked(target time.Time) *fakeTimer {
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

func (c *Fake) removeLocked(i int) {
	last := len(c.timers) - 1
	c.timers[i] = c.timers[last]
	c.timers[last] = nil
	c.timers = c.timers[:last]
}

type fakeTimer struct {
	c    *Fake
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
