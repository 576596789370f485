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
