// Package testkit holds the waiting helpers that every test in the module
// shares, so a test waits for an asynchronous effect in one way only: poll
// a condition with a short backoff until it holds or a bound runs out.
//
// It lives outside internal/ on purpose: core/coordtest and
// transport/transporttest are conformance suites that third-party plugin
// authors run against their own backends, and they wait with these
// helpers too. It imports only the standard library.
//
// Polling only bounds how long a test waits; it never decides what the test
// asserts. A condition that can be observed with a channel or a fake clock
// should be, and these helpers are for the rest (work finishing on another
// goroutine, a socket closing on the far side, a peer noticing a change).
package testkit

import (
	"errors"
	"testing"
	"time"
)

// Pacing of the polls: the first retry comes quickly (most conditions hold
// within a millisecond or two) and the pause doubles up to maxPause, so a
// long wait does not spin a core that other tests share.
const (
	firstPause = time.Millisecond
	maxPause   = 20 * time.Millisecond
)

// Eventually calls cond until it returns true, failing tb if it has not
// within the given duration. what names the awaited state for the failure
// message ("the follower to catch up").
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	EventuallyReport(tb, within, cond, func() string { return "waiting for " + what })
}

// EventuallyReport is Eventually for a condition whose failure is only
// understood with the state last seen: report is called once, after the
// last failed attempt, and its text is the failure message.
func EventuallyReport(tb testing.TB, within time.Duration, cond func() bool, report func() string) {
	tb.Helper()
	if Poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) != nil {
		tb.Fatalf("not within %v: %s", within, report())
	}
}

var errNotYet = errors.New("condition not met")

// Poll calls try until it returns nil or within has passed, and returns
// try's last error (nil on success). The last attempt is made at or after
// the deadline, so a condition that holds just in time is seen. Poll needs
// no testing.TB: suites that report through their own errors (such as
// transport/transporttest) use it directly.
func Poll(within time.Duration, try func() error) error {
	deadline := time.Now().Add(within)
	pause := firstPause
	for {
		err := try()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(pause, max(time.Until(deadline), 0)))
		pause = min(2*pause, maxPause)
	}
}
