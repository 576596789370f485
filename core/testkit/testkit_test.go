package testkit_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// fatalTB records a Fatalf instead of stopping the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestEventuallyWaitsForAnotherGoroutine(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(10*time.Millisecond, func() { done.Store(true) })
	testkit.Eventually(t, 5*time.Second, "the timer", done.Load)
}

func TestEventuallyFailsWithWhat(t *testing.T) {
	tb := &fatalTB{TB: t}
	testkit.Eventually(tb, 20*time.Millisecond, "the impossible", func() bool { return false })
	if want := "not within 20ms: waiting for the impossible"; tb.msg != want {
		t.Fatalf("message %q, want %q", tb.msg, want)
	}
}

func TestEventuallyReportSeesTheLastState(t *testing.T) {
	tb := &fatalTB{TB: t}
	n := 0
	testkit.EventuallyReport(tb, 20*time.Millisecond, func() bool { n++; return false },
		func() string { return fmt.Sprintf("%d attempts", n) })
	if want := fmt.Sprintf("not within 20ms: %d attempts", n); n < 2 || tb.msg != want {
		t.Fatalf("message %q after %d attempts, want %q", tb.msg, n, want)
	}
}

func TestPollReturnsTheLastError(t *testing.T) {
	n := 0
	err := testkit.Poll(20*time.Millisecond, func() error { n++; return fmt.Errorf("attempt %d", n) })
	if err == nil || err.Error() != fmt.Sprintf("attempt %d", n) {
		t.Fatalf("got %v after %d attempts", err, n)
	}
	if err := testkit.Poll(0, func() error { return nil }); err != nil {
		t.Fatalf("a first success: %v", err)
	}
	sentinel := errors.New("once")
	if err := testkit.Poll(0, func() error { return sentinel }); err != sentinel {
		t.Fatalf("a zero bound still tries once: %v", err)
	}
}
