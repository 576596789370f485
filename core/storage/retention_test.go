package storage_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/testkit"
)

func zeroTS(int) int64 { return 0 }

func TestQueueRetentionDeletesOnlySettledSegments(t *testing.T) {
	dir := t.TempDir()
	o := storage.Options{SegmentMaxBytes: segHdr + 3*recSize} // 3 records per segment
	p := mustOpen(t, dir, o)
	appendN(t, p, 0, 10, zeroTS) // segments 0,3,6,9
	if err := p.Settle(0, 1, 2, 3, 5, 6, 7, 8); err != nil {
		t.Fatal(err)
	}
	if err := p.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	// Segment 0 is settled; segment 3 is not (4 is open), and segment 6 is
	// settled but behind it, so it stays.
	if first, _ := p.Bounds(); first != 3 {
		t.Fatalf("first %d, want 3", first)
	}
	if _, err := p.Read(1); !errors.Is(err, storage.ErrTrimmed) {
		t.Fatalf("read trimmed: %v", err)
	}
	if r, err := p.Read(4); err != nil || r.Offset != 4 {
		t.Fatalf("read retained: %v", err)
	}
	if err := p.Settle(4, 9); err != nil {
		t.Fatal(err)
	}
	if err := p.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	// Everything settled, but the active segment (base 9) is never deleted.
	if first, next := p.Bounds(); first != 9 || next != 10 {
		t.Fatalf("bounds %d %d, want 9 10", first, next)
	}
	if !p.IsSettled(2) || p.SettledFrontier() != 10 {
		t.Fatalf("settled state after trimming: frontier %d", p.SettledFrontier())
	}
	p.Close()
	p = mustOpen(t, dir, o)
	defer p.Close()
	if first, next := p.Bounds(); first != 9 || next != 10 || p.SettledFrontier() != 10 {
		t.Fatalf("after reopen: bounds %d %d frontier %d", first, next, p.SettledFrontier())
	}
	if _, err := p.Read(5); !errors.Is(err, storage.ErrTrimmed) {
		t.Fatalf("read trimmed after reopen: %v", err)
	}
}

func TestQueueRetentionRunsAutomatically(t *testing.T) {
	p := mustOpen(t, t.TempDir(), storage.Options{SegmentMaxBytes: segHdr + 3*recSize})
	defer p.Close()
	appendN(t, p, 0, 10, zeroTS)
	if err := p.Settle(0, 1, 2, 3, 4, 5); err != nil {
		t.Fatal(err)
	}
	first := func() uint64 { f, _ := p.Bounds(); return f }
	testkit.EventuallyReport(t, 5*time.Second, func() bool { return first() == 6 },
		func() string { return fmt.Sprintf("first still %d after settling two whole segments", first()) })
}

func TestStreamRetention(t *testing.T) {
	cases := []struct {
		name  string
		r     storage.Retention
		first uint64
	}{
		// 30 records, 3 per segment, active segment base 27.
		{"records", storage.Retention{ByLimits: true, MaxRecords: 10}, 21}, // 30-18 = 12 > 10: one more goes
		{"bytes", storage.Retention{ByLimits: true, MaxBytes: 4 * (segHdr + 3*recSize)}, 18},
		{"age", storage.Retention{ByLimits: true, MaxAge: time.Minute}, 27},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			now := time.UnixMilli(1_000_000_000)
			o := storage.Options{SegmentMaxBytes: segHdr + 3*recSize, Retention: c.r, Now: func() time.Time { return now }}
			p := mustOpen(t, dir, o)
			appendN(t, p, 0, 30, func(i int) int64 { return now.UnixMilli() - int64(30-i)*1000 })
			if c.name == "age" {
				if err := p.EnforceRetention(); err != nil {
					t.Fatal(err)
				}
				if first, _ := p.Bounds(); first != 0 {
					t.Fatalf("nothing is older than a minute yet, but first=%d", first)
				}
				now = now.Add(2 * time.Minute)
			}
			if err := p.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			first, next := p.Bounds()
			if first != c.first || next != 30 {
				t.Fatalf("bounds %d %d, want %d 30", first, next, c.first)
			}
			if _, err := p.Read(first - 1); !errors.Is(err, storage.ErrTrimmed) {
				t.Fatalf("read below first: %v", err)
			}
			n := 0
			p.Scan(0, func(r storage.Record) bool {
				if r.Offset != first+uint64(n) {
					t.Fatalf("scan gave %d", r.Offset)
				}
				n++
				return true
			})
			if uint64(n) != next-first {
				t.Fatalf("scan saw %d records", n)
			}
			p.Close()
			p = mustOpen(t, dir, o)
			defer p.Close()
			if f, nx := p.Bounds(); f != first || nx != next {
				t.Fatalf("after reopen %d %d", f, nx)
			}
		})
	}
}

// slowRemoveFS blocks every Remove of a segment until released, like the
// 40–60 ms unlink of a 64 MiB segment measured on ext4.
type slowRemoveFS struct {
	storage.OSFS
	entered chan struct{}
	release chan struct{}
}

func (f *slowRemoveFS) Remove(name string) error {
	if strings.HasSuffix(name, ".log") {
		f.entered <- struct{}{}
		<-f.release
	}
	return f.OSFS.Remove(name)
}

// Deleting a settled segment must not hold up confirms: retention runs
// beside the committer, not on it.
func TestRetentionDoesNotBlockConfirms(t *testing.T) {
	fsys := &slowRemoveFS{entered: make(chan struct{}, 8), release: make(chan struct{})}
	p := mustOpen(t, t.TempDir(), storage.Options{Fsync: storage.FsyncAlways, SegmentMaxBytes: 4096, FS: fsys})
	defer func() {
		close(fsys.release)
		p.Close()
	}()
	var offs []uint64
	for i := 0; i < 20; i++ { // several segments
		off, err := p.Append(payload(i, 512), 1)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	if err := p.Settle(offs...); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(payload(99, 512), 1); err != nil { // a commit that triggers retention
		t.Fatal(err)
	}
	select {
	case <-fsys.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("retention never tried to delete a settled segment")
	}
	// The deletion is stuck; confirms must go on.
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 5; i++ {
			if _, err := p.Append(payload(i, 64), 1); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("appends were blocked behind a segment deletion")
	}
}
