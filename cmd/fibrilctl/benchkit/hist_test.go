package benchkit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBucketsAreContiguous(t *testing.T) {
	// Every bucket starts right after the previous one ends, and bucketOf
	// maps both ends of a bucket to it.
	prevHigh := int64(-1)
	for i := 0; i < numBuckets; i++ {
		hi := bucketHigh(i)
		lo := uint64(prevHigh + 1)
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: bucketOf(lo)=%d bucketOf(hi)=%d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if i >= subCount {
			if w := hi - lo + 1; float64(w)/float64(lo) > 1.0/128+1e-12 {
				t.Fatalf("bucket %d [%d,%d] wider than 1/128 of its start", i, lo, hi)
			}
		}
		prevHigh = int64(hi)
	}
	if bucketHigh(numBuckets-1) != MaxTrackable {
		t.Fatalf("top bucket ends at %d, want %d", bucketHigh(numBuckets-1), MaxTrackable)
	}
	if bucketOf(1<<62) != numBuckets-1 {
		t.Fatal("huge values do not land in the top bucket")
	}
}

func TestQuantilesWithinBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]uint64, 0, 200000)
	for i := 0; i < cap(vals); i++ {
		// Log-uniform between 100 ns and 10 s.
		v := uint64(100 * math.Pow(1e8, r.Float64()))
		vals = append(vals, v)
		h.Record(int64(v))
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := int(math.Ceil(q*float64(len(vals)))) - 1
		exact := vals[max(0, rank)]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/128+1 {
			t.Errorf("q%.3f: got %d, exact %d (more than 1/128 off, or below)", q, got, exact)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] || h.Count() != uint64(len(vals)) {
		t.Errorf("min/max/count: %d %d %d", h.Min(), h.Max(), h.Count())
	}
}

func TestMergeAndEmpty(t *testing.T) {
	var a, b, empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Fatal("empty histogram should report 0")
	}
	for i := int64(1); i <= 1000; i++ {
		a.Record(i * 1000)
		b.Record(-i) // negative counts as 0
	}
	a.Merge(&b)
	a.Merge(&empty)
	if a.Count() != 2000 || a.Min() != 0 || a.Max() != 1000000 {
		t.Fatalf("merged: count %d min %d max %d", a.Count(), a.Min(), a.Max())
	}
	if q := a.Quantile(0.5); q != 0 {
		t.Fatalf("median of 1000 zeros and 1000 positives = %d, want 0", q)
	}
	if q := a.Quantile(0.75); q < 500000 || q > 500000+500000/128 {
		t.Fatalf("p75 = %d, want ≈ 500000", q)
	}
}

func TestMergedQuantiles(t *testing.T) {
	// Two halves of an exponential sample (~2 ms mean) merged: the
	// quantiles of the whole, within 1 %.
	var a, b Histogram
	vals := make([]uint64, 0, 100000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		v := uint64(rng.ExpFloat64() * 2e6)
		vals = append(vals, v)
		if i%2 == 0 {
			a.Record(int64(v))
		} else {
			b.Record(int64(v))
		}
	}
	a.Merge(&b)
	slices.Sort(vals)
	if a.Count() != 100000 || a.Max() != vals[len(vals)-1] {
		t.Fatalf("count %d max %d", a.Count(), a.Max())
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[int(q*float64(len(vals))+0.999999)-1]
		got := a.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/100 {
			t.Errorf("q%.3f: got %d, exact %d", q, got, exact)
		}
	}
}

func TestQuantileAboveTrackable(t *testing.T) {
	// Values above MaxTrackable share the top bucket; a quantile that
	// falls there reports the exact max, never less than the true value.
	var h Histogram
	h.Record(100e9)
	h.Record(200e9)
	for _, q := range []float64{0.5, 0.99} {
		if got := h.Quantile(q); got != 200e9 {
			t.Fatalf("q%.2f = %d, want the max 200e9", q, got)
		}
	}
	h.Record(1000)
	if got := h.Quantile(0.2); got < 1000 || got > 1000+1000/128 {
		t.Fatalf("q0.2 = %d, want ≈ 1000", got)
	}
}
