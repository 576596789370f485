package lograte

import (
	"testing"
	"time"
)

// One line per key and interval; the next allowed line reports how many
// were held back in between; keys do not share their budget.
func TestLimiter(t *testing.T) {
	l := Limiter[string]{Every: time.Second}
	t0 := time.Unix(1000, 0)
	if ok, skipped := l.Allow("a", t0); !ok || skipped != 0 {
		t.Fatalf("first line: %v %d", ok, skipped)
	}
	for i := range 3 {
		if ok, _ := l.Allow("a", t0.Add(time.Duration(i+1)*100*time.Millisecond)); ok {
			t.Fatal("a second line within the interval got through")
		}
	}
	if ok, _ := l.Allow("b", t0.Add(time.Millisecond)); !ok {
		t.Fatal("another key must have its own budget")
	}
	if ok, skipped := l.Allow("a", t0.Add(time.Second)); !ok || skipped != 3 {
		t.Fatalf("after the interval: %v, skipped %d, want true, 3", ok, skipped)
	}
	if ok, skipped := l.Allow("a", t0.Add(2100*time.Millisecond)); !ok || skipped != 0 {
		t.Fatalf("the count must start again: %v %d", ok, skipped)
	}
}
