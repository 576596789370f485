package storage_test

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/testkit"
)

// Inline commits: AppendAsyncDeferred leaves the record for the caller's
// CommitIfIdle, which commits on the caller when no committer is busy.

// onCaller reports whether the stack of the goroutine running a
// callback shows CommitIfIdle (the commit ran on the caller) rather than
// the committer loop.
func onCaller() bool {
	buf := make([]byte, 16<<10)
	st := string(buf[:runtime.Stack(buf, false)])
	return strings.Contains(st, "CommitIfIdle") && !strings.Contains(st, "commitLoop")
}

func TestCommitIfIdleCommitsOnCaller(t *testing.T) {
	for _, pol := range []storage.FsyncPolicy{storage.FsyncAlways, storage.FsyncInterval, storage.FsyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := mustOpen(t, dir, storage.Options{Fsync: pol})
			testkit.EventuallyReport(t, 5*time.Second, func() bool { return idle(p, true) }, func() string { return "the first retention pass never ended" })
			var got []uint64
			var inline []bool
			for i := range 5 {
				off, err := p.AppendAsyncDeferred(payload(i, 100), int64(i), func(off uint64, err error) {
					if err != nil {
						t.Errorf("offset %d: %v", off, err)
					}
					got = append(got, off)
					inline = append(inline, onCaller())
				})
				if err != nil {
					t.Fatal(err)
				}
				if off != uint64(i) {
					t.Fatalf("offset %d, want %d", off, i)
				}
				// One record at a time, nothing else running: the commit
				// runs here, and the callback has run when it returns.
				if !p.CommitIfIdle() {
					t.Fatalf("record %d: CommitIfIdle did not commit on an idle partition", i)
				}
				if len(got) != i+1 || got[i] != uint64(i) || !inline[i] {
					t.Fatalf("record %d: callbacks %v, on the caller %v", i, got, inline)
				}
			}
			if p.CommitIfIdle() {
				t.Fatal("CommitIfIdle committed with nothing pending")
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			p = mustOpen(t, dir, storage.Options{Fsync: pol})
			defer p.Close()
			for i := range 5 {
				r, err := p.Read(uint64(i))
				if err != nil || !bytes.Equal(r.Data, payload(i, 100)) {
					t.Fatalf("record %d after reopen: %v", i, err)
				}
			}
		})
	}
}

// After a commit of many records (appenders are pipelining) the committer
// keeps the work, overlapping the next batch with the fsync of this one:
// CommitIfIdle hands it over and reports false, and the record still
// becomes durable.
func TestCommitIfIdleLeavesPipelinesToCommitter(t *testing.T) {
	p := mustOpen(t, t.TempDir(), storage.Options{Fsync: storage.FsyncAlways})
	defer p.Close()
	done := make(chan error, 64)
	for i := range 64 {
		if _, err := p.AppendAsync(payload(i, 10), 0, func(_ uint64, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 64 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Unless the committer took the 64 one by one, its last commit carried
	// more than one record.
	var onCallerToo bool
	off, err := p.AppendAsyncDeferred(payload(64, 10), 0, func(_ uint64, err error) {
		onCallerToo = onCaller()
		done <- err
	})
	if err != nil {
		t.Fatal(err)
	}
	committed := p.CommitIfIdle()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("record %d never committed (CommitIfIdle: %v)", off, committed)
	}
	if committed != onCallerToo {
		t.Fatalf("CommitIfIdle reported %v, the callback ran on the caller: %v", committed, onCallerToo)
	}
}

// Many goroutines mixing deferred appends with inline commits, plain
// AppendAsync, Append and Sync: every callback runs exactly once with its
// own offset, and everything is there after a reopen.
func TestCommitIfIdleConcurrent(t *testing.T) {
	dir := t.TempDir()
	o := storage.Options{Fsync: storage.FsyncAlways, SegmentMaxBytes: 64 << 10}
	p := mustOpen(t, dir, o)
	const workers, per = 6, 300
	var mu sync.Mutex
	calls := map[uint64]int{}
	cb := func(off uint64, err error) {
		if err != nil {
			t.Errorf("offset %d: %v", off, err)
		}
		mu.Lock()
		calls[off]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				var err error
				switch (w + i) % 4 {
				case 0, 1:
					_, err = p.AppendAsyncDeferred(payload(i, 200), 0, cb)
					p.CommitIfIdle()
				case 2:
					_, err = p.AppendAsync(payload(i, 200), 0, cb)
				case 3:
					var off uint64
					off, err = p.Append(payload(i, 200), 0)
					cb(off, err)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if i%97 == 0 {
					if err := p.Sync(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	// No record is stranded waiting for a commit nobody runs: every
	// callback comes without a Sync or Close to prompt it.
	testkit.EventuallyReport(t, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == workers*per
	}, func() string { return "some records were never committed" })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(calls) != workers*per {
		t.Fatalf("%d offsets called back, want %d", len(calls), workers*per)
	}
	for off, n := range calls {
		if n != 1 || off >= workers*per {
			t.Fatalf("offset %d called back %d times", off, n)
		}
	}
	p = mustOpen(t, dir, o)
	defer p.Close()
	n := 0
	if err := p.Scan(0, func(storage.Record) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != workers*per {
		t.Fatalf("%d records after reopen, want %d", n, workers*per)
	}
}

// A deferred append made while an inline commit runs (here: from that
// commit's own callback) is not stranded: its CommitIfIdle finds the pass
// running and leaves the record to it, and the pass hands it to a
// committer when it ends.
func TestCommitIfIdleDuringInlinePass(t *testing.T) {
	p := mustOpen(t, t.TempDir(), storage.Options{Fsync: storage.FsyncAlways})
	defer p.Close()
	testkit.EventuallyReport(t, 5*time.Second, func() bool { return idle(p, true) }, func() string { return "the first retention pass never ended" })
	second := make(chan error, 1)
	var nested bool
	_, err := p.AppendAsyncDeferred(payload(0, 10), 0, func(_ uint64, err error) {
		if err != nil {
			t.Error(err)
		}
		if _, err := p.AppendAsyncDeferred(payload(1, 10), 0, func(_ uint64, err error) { second <- err }); err != nil {
			t.Error(err)
		}
		nested = p.CommitIfIdle()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !p.CommitIfIdle() {
		t.Fatal("no inline commit on an idle partition")
	}
	if nested {
		t.Fatal("a second inline pass ran inside the first")
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the record appended during the inline pass was never committed")
	}
}
