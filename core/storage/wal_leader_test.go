package storage_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/testkit"
)

// pipeline appends n records to p without waiting for each, and returns
// a function that waits for every confirm and fails the test unless they
// came without error and in offset order.
func pipeline(t *testing.T, p *storage.Partition, id, n int) func() {
	t.Helper()
	var (
		mu   sync.Mutex
		last = -1
		got  int
		bad  error
		done = make(chan struct{})
	)
	for i := range n {
		if _, err := p.AppendAsync(payload(id*10000+i, 1000), 0, func(off uint64, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && bad == nil {
				bad = err
			}
			if int(off) <= last && bad == nil {
				bad = fmt.Errorf("confirm of offset %d came after offset %d", off, last)
			}
			last = int(off)
			if got++; got == n {
				close(done)
			}
		}); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	return func() {
		t.Helper()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("partition %d: confirms missing", id)
		}
		mu.Lock()
		defer mu.Unlock()
		if bad != nil {
			t.Fatalf("partition %d: %v", id, bad)
		}
	}
}

// pipelineAll runs bursts of n pipelined appends on every partition of c
// at once, waiting for each burst's confirms: from the second burst on,
// the partitions' records are offered to the WAL's leader (their last
// commit went through the WAL).
func pipelineAll(t *testing.T, c *walCluster, bursts, n int) {
	t.Helper()
	for range bursts {
		var waits []func()
		for k, p := range c.parts {
			waits = append(waits, pipeline(t, p, k, n))
		}
		for _, w := range waits {
			w()
		}
	}
}

// Partitions whose appenders pipeline while WAL rounds run have their
// records taken into the rounds by the WAL's leader itself (no committer
// woken per partition per round): every confirm arrives, in offset order,
// and every record reads back, also after a power loss that leaves the
// records in the WAL only.
func TestWALLeaderTakesRecordsInOrder(t *testing.T) {
	fsys := faultfs.New()
	fsys.SetSyncDelay(500 * time.Microsecond) // rounds last long enough to overlap appends
	c := openWALCluster(t, fsys, 6, storage.WALOptions{})
	const bursts, n = 12, 20 // a burst rarely crosses a 64 KiB segment (a roll is the committer's)
	pipelineAll(t, c, bursts, n)
	if storage.WALTaken(c.w) == 0 {
		t.Fatal("the WAL's leader took no commit itself: every round went through the committers")
	}
	check := func() {
		t.Helper()
		want := make([]int, bursts*n)
		for k := range c.parts {
			for i := range want {
				want[i] = k*10000 + i%n
			}
			c.checkRecords(k, want)
		}
	}
	check()
	// A power loss that keeps only what was fsynced: the segments' records
	// come back from the WAL, replayed per partition in file order.
	after := fsys.CrashSyncing(func(string) bool { return false })
	c.abandon()
	c = openWALCluster(t, after, 6, storage.WALOptions{})
	defer c.close()
	check()
}

// Records the leader staged for a partition (takeForWAL) are written to
// its segment once the partition goes quiet, as a committer writes its
// own staged records when it goes idle: a quiet partition keeps no staged
// bytes in memory while the others stay busy or the WAL sits idle.
func TestWALQuietPartitionWritesWhatTheLeaderStaged(t *testing.T) {
	fsys := faultfs.New()
	fsys.SetSyncDelay(500 * time.Microsecond)
	c := openWALCluster(t, fsys, 4, storage.WALOptions{})
	defer c.close()
	pipelineAll(t, c, 2, 20)
	// Let every committer go idle (they write what they staged), then one
	// more burst that the leader takes: only the sweep writes it.
	time.Sleep(50 * time.Millisecond)
	pipelineAll(t, c, 1, 10)
	if storage.WALTaken(c.w) == 0 {
		t.Fatal("the WAL's leader took no commit itself")
	}
	testkit.EventuallyReport(t, 5*time.Second, func() bool {
		for _, p := range c.parts {
			if storage.LagRecords(p) > 0 {
				return false
			}
		}
		return true
	}, func() string {
		s := "records still staged per partition:"
		for _, p := range c.parts {
			s += fmt.Sprintf(" %d", storage.LagRecords(p))
		}
		return s
	})
}
