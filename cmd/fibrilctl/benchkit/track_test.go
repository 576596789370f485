package benchkit

import (
	"sync"
	"testing"
)

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
