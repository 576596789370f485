// Package clock is the time seam of the packages whose deadlines tests must
// control (core/queue's leases, TTLs and delays; core/memcoord's leases and
// election keepalives). Production code reads Real; tests and simulations
// drive a Fake, on which nothing happens until Advance is called.
//
// The seam is two calls, Now and AfterFunc, because every deadline in those
// packages is computed from Now and waited for with AfterFunc: no
// time.Sleep, no goroutine of their own, so a Fake makes them deterministic.
package clock

import "time"

// Clock is a time source and timer factory.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once d has elapsed on this clock: in its own
	// goroutine on Real, inside Advance on a Fake.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop cancels the call; it reports whether the call was still
	// pending (false: it ran or is running).
	Stop() bool
}

// Real is the wall clock, with Go's monotonic reading so deadlines do not
// move when the system time is set. time.AfterFunc holds no goroutine while
// it waits, so an idle timer costs nothing. The zero value is ready to use.
type Real struct {
	// NowFunc, when set, replaces time.Now as the reading of Now (timers
	// still run on the wall clock).
	NowFunc func() time.Time
}

// Now is time.Now, or NowFunc when it is set.
func (r Real) Now() time.Time {
	if r.NowFunc != nil {
		return r.NowFunc()
	}
	return time.Now()
}

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
