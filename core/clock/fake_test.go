package clock_test

import (
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/clock"
)

const ms = time.Millisecond

// Callbacks run in deadline order with Now at their deadline, a callback
// armed inside the window runs in the same Advance, and a stopped one
// never runs.
func TestFakeOrder(t *testing.T) {
	c := clock.NewFake(time.Time{})
	start := c.Now()
	var got []int
	var at []time.Duration
	rec := func(i int) func() {
		return func() { got = append(got, i); at = append(at, c.Now().Sub(start)) }
	}
	c.AfterFunc(30*ms, rec(3))
	c.AfterFunc(10*ms, rec(1))
	stopped := c.AfterFunc(20*ms, rec(99))
	c.AfterFunc(10*ms, func() {
		rec(2)()
		c.AfterFunc(15*ms, rec(4)) // due at 25 ms: inside this Advance
	})
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should report true once, then false")
	}
	c.Advance(29 * ms)
	want := []int{1, 2, 4}
	if len(got) != len(want) || got[0] != 1 || got[1] != 2 || got[2] != 4 {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if at[2] != 25*ms {
		t.Fatalf("nested callback saw Now = +%v, want +25ms", at[2])
	}
	if c.Now().Sub(start) != 29*ms || c.Pending() != 1 {
		t.Fatalf("Now +%v, %d pending", c.Now().Sub(start), c.Pending())
	}
	c.Advance(ms)
	if len(got) != 4 || got[3] != 3 {
		t.Fatalf("ran %v", got)
	}
}

// Set moves the clock without running what fell due; the next Advance
// runs it, even Advance(0).
func TestFakeSetRunsNothing(t *testing.T) {
	c := clock.NewFake(time.Time{})
	start := c.Now()
	ran := false
	c.AfterFunc(10*ms, func() { ran = true })
	c.Set(start.Add(time.Second))
	if ran || c.Pending() != 1 {
		t.Fatalf("Set ran the timer (ran %v, %d pending)", ran, c.Pending())
	}
	c.Advance(0)
	if !ran || c.Now() != start.Add(time.Second) {
		t.Fatalf("ran %v, Now +%v", ran, c.Now().Sub(start))
	}
}

// A callback that keeps re-arming itself for a time already due is a bug
// the Fake names with a panic instead of spinning forever.
func TestFakeRearmLoopPanics(t *testing.T) {
	c := clock.NewFake(time.Time{})
	var again func()
	again = func() { c.AfterFunc(0, again) }
	c.AfterFunc(0, again)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	c.Advance(0)
}

func TestRealNowFunc(t *testing.T) {
	at := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if got := (clock.Real{NowFunc: func() time.Time { return at }}).Now(); !got.Equal(at) {
		t.Fatalf("Now = %v", got)
	}
	if d := time.Since(clock.Real{}.Now()); d < 0 || d > time.Minute {
		t.Fatalf("zero Real is %v off the wall clock", d)
	}
	fired := make(chan struct{})
	clock.Real{}.AfterFunc(time.Millisecond, func() { close(fired) })
	<-fired
}
