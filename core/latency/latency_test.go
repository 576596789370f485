package latency

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	h := New(0.001, 0.01, 0.1)
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, time.Second, -time.Second} {
		h.Observe(d)
	}
	b, n, sum := h.Snapshot()
	if b[0.001] != 3 || b[0.01] != 4 || b[0.1] != 5 || n != 6 {
		t.Fatalf("buckets %v, count %d", b, n)
	}
	if want := 0.0005 + 0.001 + 0.005 + 0.05 + 1; sum < want-1e-9 || sum > want+1e-9 {
		t.Fatalf("sum %v, want %v", sum, want)
	}
	if e := Exponential(0.001, 2, 3); e[0] != 0.001 || e[2] != 0.004 {
		t.Fatalf("Exponential %v", e)
	}
}
