package main

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBucketBounds(t *testing.T) {
	// Every value maps to a bucket whose upper bound is ≥ it, ≤ 0.8 % above
	// it, and below the next bucket's lower end.
	prev := -1
	for _, v := range []int64{0, 1, 255, 256, 257, 511, 512, 1000, 1 << 20, 123456789, histMax} {
		b := bucketOf(v)
		if b < prev || b >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d (prev %d, %d buckets)", v, b, prev, histBuckets)
		}
		prev = b
		up := upperOf(b)
		if up < v || float64(up-v) > float64(v)/128+0.5 {
			t.Fatalf("value %d: bucket %d upper %d", v, b, up)
		}
		if b > 0 && upperOf(b-1) >= v {
			t.Fatalf("value %d also fits bucket %d (upper %d)", v, b-1, upperOf(b-1))
		}
	}
	if bucketOf(histMax) != histBuckets-1 {
		t.Fatalf("last bucket %d, want %d", bucketOf(histMax), histBuckets-1)
	}
	for i := 1; i < histBuckets; i++ {
		if upperOf(i) <= upperOf(i-1) || bucketOf(upperOf(i)) != i || bucketOf(upperOf(i-1)+1) != i {
			t.Fatalf("bucket %d not contiguous", i)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var a, b Histogram
	vals := make([]int64, 0, 100000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		v := int64(rng.ExpFloat64() * 2e6) // ~2 ms mean, in ns
		vals = append(vals, v)
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
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
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Fatal("empty histogram")
	}
	var big Histogram
	big.Record(100e9) // above the resolved range: kept as the exact max
	if big.Quantile(0.99) != 100e9 {
		t.Fatalf("overflow quantile %d", big.Quantile(0.99))
	}
}

func TestTracker(t *testing.T) {
	tr := NewTracker(2)
	for i := uint64(0); i < 200000; i += 2 {
		tr.Accept(1, i)
	}
	for i := uint64(0); i < 200000; i += 4 {
		if tr.Deliver(1, i) {
			t.Fatal("first delivery reported as duplicate")
		}
	}
	if !tr.Deliver(1, 0) {
		t.Fatal("second delivery not a duplicate")
	}
	tr.Deliver(0, 7) // delivered, never accepted
	if got := tr.Lost(); got != 50000 {
		t.Fatalf("lost %d, want 50000", got)
	}
	if got := tr.DeliveredUnaccepted(); got != 1 {
		t.Fatalf("delivered-unaccepted %d, want 1", got)
	}
}

func TestStamp(t *testing.T) {
	buf := make([]byte, 64)
	want := Stamp{Sent: 123456789, Run: 7, Producer: 3, Seq: 1 << 40}
	want.Put(buf)
	got, ok := ReadStamp(buf)
	if !ok || got != want {
		t.Fatalf("got %+v", got)
	}
	if _, ok := ReadStamp(buf[:10]); ok {
		t.Fatal("short payload decoded")
	}
}
