package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
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

func TestStampRoundTrip(t *testing.T) {
	buf := make([]byte, 40)
	s := Stamp{Sent: 123456789, Run: 0xdeadbeef, Producer: 7, Seq: 1 << 40}
	s.Put(buf)
	got, ok := ReadStamp(buf)
	if !ok || got != s {
		t.Fatalf("got %+v, %v", got, ok)
	}
	if _, ok := ReadStamp(buf[:HeaderSize-1]); ok {
		t.Fatal("short payload accepted")
	}
}

func TestTrackerLossAndDuplicates(t *testing.T) {
	tr := NewTracker(2)
	for seq := uint64(0); seq < 200000; seq++ {
		tr.Accept(0, seq)
	}
	tr.Accept(1, 5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	dups := 0
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			// Every worker delivers the even sequence numbers: each one is
			// a first delivery exactly once across the workers.
			for seq := uint64(0); seq < 200000; seq += 2 {
				if tr.Deliver(0, seq) {
					n++
				}
			}
			mu.Lock()
			dups += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if dups != 3*100000 {
		t.Fatalf("duplicates = %d, want %d", dups, 3*100000)
	}
	tr.Deliver(1, 9) // delivered, never accepted
	if lost := tr.Lost(); lost != 100000+1 {
		t.Fatalf("lost = %d, want %d", lost, 100001)
	}
	if n := tr.DeliveredUnaccepted(); n != 1 {
		t.Fatalf("delivered-unaccepted = %d, want 1", n)
	}
	if tr.Valid(2, 0) || tr.Valid(0, MaxSeq) || !tr.Valid(1, MaxSeq-1) {
		t.Fatal("Valid bounds")
	}
}

func TestAdmitWaitsForDeliveries(t *testing.T) {
	r := &run{cfg: Config{MaxAhead: 4}}
	r.gateCond = sync.NewCond(&r.gateMu)
	for i := 0; i < 4; i++ {
		if !r.admit() {
			t.Fatal("admit refused below the bound")
		}
	}
	admitted := make(chan bool)
	go func() { admitted <- r.admit() }()
	select {
	case <-admitted:
		t.Fatal("admitted beyond --max-ahead")
	case <-time.After(50 * time.Millisecond):
	}
	r.delivered.Add(1)
	r.wake()
	select {
	case ok := <-admitted:
		if !ok {
			t.Fatal("admit returned false")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a delivery did not wake the waiting producer")
	}
	go func() { admitted <- r.admit() }()
	time.Sleep(20 * time.Millisecond)
	r.stop()
	select {
	case ok := <-admitted:
		if ok {
			t.Fatal("admit after stop returned true")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not release the waiting producer")
	}
}
