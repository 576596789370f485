package storage_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/testkit"
)

// An idle partition owns no goroutine and no running timer: the committer
// is started when work arrives and exits when none is left, the interval
// fsync and the MaxAge pass are one-shot timers armed only while they have
// something to do.

func goroutineDump() string {
	buf := make([]byte, 64<<10)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestIdlePartitionsOwnNoGoroutines opens 500 partitions under each
// policy, works a little in each, and checks that once everything settles
// the goroutine count is back to the baseline, nothing is scheduled, the
// data is fsynced (always, interval) — and that the partitions still work.
func TestIdlePartitionsOwnNoGoroutines(t *testing.T) {
	const n = 500
	seg := int64(segHdr + 3*recSize) // 3 records per segment: rolls and retention happen
	cases := []struct {
		name  string
		o     storage.Options
		clean bool // idle implies every log and journal byte is fsynced
		age   bool // sealed segments keep a MaxAge timer armed
	}{
		{"always", storage.Options{Fsync: storage.FsyncAlways}, true, false},
		{"interval", storage.Options{Fsync: storage.FsyncInterval, FsyncInterval: 5 * time.Millisecond}, true, false},
		{"none", storage.Options{Fsync: storage.FsyncNone}, false, false},
		{"stream-maxage", storage.Options{Fsync: storage.FsyncInterval, FsyncInterval: 5 * time.Millisecond,
			Retention: storage.Retention{ByLimits: true, MaxAge: time.Hour}}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			fsys := faultfs.New()
			o := c.o
			o.FS, o.SegmentMaxBytes, o.Logger = fsys, seg, quietLogger()
			ps := make([]*storage.Partition, n)
			for i := range ps {
				ps[i] = mustOpen(t, fmt.Sprintf("/p/%04d", i), o)
			}
			defer func() {
				for _, p := range ps {
					p.Close()
				}
			}()
			settled := func() {
				t.Helper()
				testkit.EventuallyReport(t, 20*time.Second, func() bool {
					for _, p := range ps {
						if !idle(p, c.age) {
							return false
						}
					}
					return runtime.NumGoroutine() <= base+5
				}, func() string {
					busy := 0
					for _, p := range ps {
						if !idle(p, c.age) {
							busy++
						}
					}
					return fmt.Sprintf("%d partitions busy, %d goroutines (baseline %d)\n%s",
						busy, runtime.NumGoroutine(), base, goroutineDump())
				})
				if c.clean {
					if d := dirtyData(fsys); len(d) > 0 {
						t.Fatalf("idle, but unsynced data remains: %v", d)
					}
				}
				for _, p := range ps {
					_, _, a := storage.Scheduled(p)
					first, next := p.Bounds()
					sealed := next-first > 3 // more than one segment retained
					if a != (c.age && sealed) {
						t.Fatalf("MaxAge timer armed=%v with bounds [%d,%d)", a, first, next)
					}
				}
			}
			// Round 1, all partitions at once: sync and async appends (5
			// records: one sealed segment), settlements (queue mode then
			// deletes that segment), engine state.
			now := time.Now().UnixMilli()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for _, p := range ps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range 4 {
						if _, err := p.Append(payload(k, 100), now); err != nil {
							errs <- err
							return
						}
					}
					done := make(chan error, 1)
					if _, err := p.AppendAsync(payload(4, 100), now, func(_ uint64, err error) { done <- err }); err != nil {
						errs <- err
						return
					}
					if err := <-done; err != nil {
						errs <- err
						return
					}
					if err := p.Settle(0, 1, 2); err != nil {
						errs <- err
						return
					}
					if err := p.AppendState([]byte("engine")); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			settled()
			// Round 2: a stopped committer restarts on demand.
			for _, p := range ps {
				off, err := p.Append(payload(5, 100), now)
				if err != nil {
					t.Fatal(err)
				}
				if r, err := p.Read(off); err != nil || string(r.Data) != string(payload(5, 100)) {
					t.Fatalf("read back %d: %v", off, err)
				}
				if err := p.Settle(3); err != nil {
					t.Fatal(err)
				}
			}
			settled()
			for _, p := range ps {
				if err := p.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
			testkit.EventuallyReport(t, 10*time.Second, func() bool { return runtime.NumGoroutine() <= base+5 },
				func() string {
					return fmt.Sprintf("after Close: %d goroutines (baseline %d)", runtime.NumGoroutine(), base)
				})
		})
	}
}

// TestIntervalFsyncWithoutFurtherAppends: under FsyncInterval the data
// written (records, settlements, engine state) is fsynced about one
// interval later with nothing else happening, and an idle interval
// partition schedules nothing and fsyncs nothing.
func TestIntervalFsyncWithoutFurtherAppends(t *testing.T) {
	const iv = 20 * time.Millisecond
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Fsync: storage.FsyncInterval, FsyncInterval: iv, Logger: quietLogger()}
	p := mustOpen(t, "/d", o)
	defer p.Close()
	quiet := func(what string) {
		t.Helper()
		testkit.EventuallyReport(t, 5*time.Second, func() bool { return idle(p, false) }, func() string { return what + ": still busy" })
		syncs := fsys.Syncs()
		// An observation window, not synchronisation: nothing is
		// scheduled, so nothing may happen during ten intervals.
		time.Sleep(10 * iv)
		if s := fsys.Syncs(); s != syncs {
			t.Fatalf("%s: %d fsyncs while idle", what, s-syncs)
		}
		if c, f, a := storage.Scheduled(p); c || f || a {
			t.Fatalf("%s: committer %v, fsync timer %v, age timer %v", what, c, f, a)
		}
	}
	quiet("fresh partition")

	// Each way of writing must schedule the fsync by itself: a direct
	// Append (the appender writes), AppendAsync (the committer writes),
	// Settle and AppendState (journal writes).
	var offs []uint64
	phase := func(what string, write func()) {
		t.Helper()
		start := time.Now()
		write()
		if d := dirtyData(fsys); len(d) == 0 && time.Since(start) < iv/2 {
			t.Fatalf("%s: fsynced at once under interval: the test cannot tell", what)
		}
		testkit.EventuallyReport(t, 5*time.Second, func() bool { return len(dirtyData(fsys)) == 0 },
			func() string { return fmt.Sprintf("%s: still unsynced: %v", what, dirtyData(fsys)) })
		t.Logf("%s: fsynced %v after the write (interval %v)", what, time.Since(start), iv)
		quiet("after " + what)
	}
	phase("Append", func() {
		for i := range 3 {
			off, err := p.Append(payload(i, 100), 0)
			if err != nil {
				t.Fatal(err)
			}
			offs = append(offs, off)
		}
	})
	phase("AppendAsync", func() {
		done := make(chan error, 1)
		if _, err := p.AppendAsync(payload(3, 100), 0, func(_ uint64, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	phase("Settle", func() {
		if err := p.Settle(offs[0]); err != nil {
			t.Fatal(err)
		}
	})
	phase("AppendState", func() {
		if err := p.AppendState([]byte("lease 1")); err != nil {
			t.Fatal(err)
		}
	})

	// What the timer fsynced survives a power loss.
	after := fsys.Crash(rand.New(rand.NewPCG(7, 7)))
	o.FS = after
	q := mustOpen(t, "/d", o)
	defer q.Close()
	if _, next := q.Bounds(); next != 4 {
		t.Fatalf("after power loss next=%d, want 4", next)
	}
	if !q.IsSettled(offs[0]) || q.IsSettled(offs[1]) {
		t.Fatal("settlement not as fsynced")
	}
	var st []string
	q.ReplayState(func(e []byte) error { st = append(st, string(e)); return nil })
	if len(st) != 1 || st[0] != "lease 1" {
		t.Fatalf("engine state after power loss: %q", st)
	}
}

// TestMaxAgeTimerDeletesWithoutCalls: stream retention by age runs by
// itself when the oldest sealed segment expires, and the timer is disarmed
// once no sealed segment is left.
func TestMaxAgeTimerDeletesWithoutCalls(t *testing.T) {
	const maxAge = 300 * time.Millisecond
	p := mustOpen(t, t.TempDir(), storage.Options{
		SegmentMaxBytes: segHdr + 3*recSize,
		Retention:       storage.Retention{ByLimits: true, MaxAge: maxAge},
	})
	defer p.Close()
	start := time.Now()
	appendN(t, p, 0, 7, func(int) int64 { return time.Now().UnixMilli() }) // segments 0, 3, active 6
	testkit.EventuallyReport(t, 5*time.Second, func() bool { _, _, a := storage.Scheduled(p); return a },
		func() string { return "no MaxAge timer with two sealed segments" })
	if first, _ := p.Bounds(); first != 0 && time.Since(start) < maxAge {
		t.Fatalf("deleted before expiry: first %d", first)
	}
	testkit.EventuallyReport(t, 10*time.Second, func() bool { first, _ := p.Bounds(); return first == 6 },
		func() string { first, _ := p.Bounds(); return fmt.Sprintf("first still %d", first) })
	t.Logf("expired segments deleted %v after the appends (MaxAge %v)", time.Since(start), maxAge)
	testkit.EventuallyReport(t, 5*time.Second, func() bool { return idle(p, false) },
		func() string { return "MaxAge timer or committer still active with only the active segment left" })
	// A new sealed segment arms it again.
	appendN(t, p, 7, 3, func(int) int64 { return time.Now().UnixMilli() })
	testkit.EventuallyReport(t, 5*time.Second, func() bool { _, _, a := storage.Scheduled(p); return a },
		func() string { return "no MaxAge timer after a new roll" })
}

// TestMaxAgeTimerDisarmedByOtherBounds: when another bound deletes the
// last sealed segment first, the MaxAge timer is stopped with it.
func TestMaxAgeTimerDisarmedByOtherBounds(t *testing.T) {
	p := mustOpen(t, t.TempDir(), storage.Options{
		SegmentMaxBytes: segHdr + 3*recSize,
		Retention:       storage.Retention{ByLimits: true, MaxAge: time.Hour, MaxRecords: 4},
	})
	defer p.Close()
	now := func(int) int64 { return time.Now().UnixMilli() }
	appendN(t, p, 0, 4, now) // segment 0 sealed, 4 records: within MaxRecords
	testkit.EventuallyReport(t, 5*time.Second, func() bool { _, _, a := storage.Scheduled(p); return a },
		func() string { return "no MaxAge timer for the sealed segment" })
	appendN(t, p, 4, 1, now) // 5 records > MaxRecords (no roll, so no automatic pass)
	if err := p.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if first, _ := p.Bounds(); first != 3 {
		t.Fatalf("first %d, want 3", first)
	}
	testkit.EventuallyReport(t, 5*time.Second, func() bool { return idle(p, false) }, func() string {
		c, f, a := storage.Scheduled(p)
		return fmt.Sprintf("committer %v, fsync timer %v, age timer %v with no sealed segment", c, f, a)
	})
}

// TestCloseWaitsForCommitter: Close returns only after the running
// committer has finished every pending append.
func TestCloseWaitsForCommitter(t *testing.T) {
	for _, pol := range []storage.FsyncPolicy{storage.FsyncAlways, storage.FsyncInterval, storage.FsyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			fsys := faultfs.New()
			fsys.SetSyncDelay(50 * time.Microsecond)
			p := mustOpen(t, "/d", storage.Options{FS: fsys, Fsync: pol, SegmentMaxBytes: 4096})
			var calls atomic.Int64
			const n = 2000
			for i := range n {
				if _, err := p.AppendAsync(payload(i, 50), 0, func(_ uint64, err error) {
					if err != nil {
						t.Error(err)
					}
					calls.Add(1)
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if c := calls.Load(); c != n {
				t.Fatalf("Close returned with %d of %d callbacks run", c, n)
			}
			if d := dirtyData(fsys); len(d) > 0 {
				t.Fatalf("Close left unsynced data: %v", d)
			}
		})
	}
}
