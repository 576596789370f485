package storage_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/testkit"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// TestSealedSegmentsDoNotHoldDescriptors: many partitions with several
// sealed segments each, on the real filesystem. Each partition holds its
// active segment and its journal open; sealed segments are opened on
// demand and share a small process-wide cache, so the descriptor count
// stays bounded when the partitions are opened (recovery scans every
// segment), when every record is read, and when segments roll.
func TestSealedSegmentsDoNotHoldDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts /proc/self/fd")
	}
	const (
		parts  = 100
		segs   = 5 // 4 sealed + the active one
		perSeg = 3
		limit  = 32 // sealed-segment cache for this test
	)
	defer storage.SetMaxOpenSealed(storage.SetMaxOpenSealed(limit))
	dir := t.TempDir()
	o := storage.Options{Fsync: storage.FsyncNone, SegmentMaxBytes: segHdr + perSeg*recSize}
	// One partition written for real, copied (cheaply: no fsyncs) into
	// the others.
	tmpl := mustOpen(t, dir+"/template", o)
	for k := range segs * perSeg {
		if _, err := tmpl.Append(payload(k, 100), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := tmpl.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(dir + "/template")
	if err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		d := fmt.Sprintf("%s/q%03d", dir, i)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(dir + "/template/" + f.Name())
			if err == nil {
				err = os.WriteFile(d+"/"+f.Name(), b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	base, cached := openFDs(t), storage.OpenSealed()
	bound := func(what string) {
		t.Helper()
		n := openFDs(t) - base
		// 2 per partition (active segment, journal), the cache, a little
		// slack for the runtime and the test itself.
		if max := 2*parts + limit + 8; n > max {
			t.Fatalf("%s: %d descriptors open beyond the baseline, want at most %d (sealed cached: %d)",
				what, n, max, storage.OpenSealed())
		}
		if c := storage.OpenSealed(); c > limit {
			t.Fatalf("%s: %d sealed segments cached, limit %d", what, c, limit)
		}
		t.Logf("%s: %d descriptors beyond the baseline for %d partitions × %d segments (%d sealed cached)",
			what, n, parts, segs, storage.OpenSealed())
	}
	ps := make([]*storage.Partition, parts)
	for i := range ps {
		ps[i] = mustOpen(t, fmt.Sprintf("%s/q%03d", dir, i), o)
	}
	bound("after opening (recovery)")
	for i, p := range ps {
		for off := uint64(0); off < segs*perSeg; off++ {
			r, err := p.Read(off)
			if err != nil || string(r.Data) != string(payload(int(off), 100)) {
				t.Fatalf("partition %d offset %d: %v", i, off, err)
			}
		}
		n := 0
		if err := p.Scan(0, func(storage.Record) bool { n++; return true }); err != nil || n != segs*perSeg {
			t.Fatalf("partition %d: scan %d records, %v", i, n, err)
		}
	}
	bound("after reading everything")
	for _, p := range ps[:10] { // rolls hand the old active file to the cache
		for k := range 2 * perSeg {
			if _, err := p.Append(payload(k, 100), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	bound("after rolls")
	for _, p := range ps {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := openFDs(t) - base; n > 4 {
		t.Fatalf("%d descriptors left open after Close", n)
	}
	if c := storage.OpenSealed(); c > cached {
		t.Fatalf("%d sealed segments cached after Close, %d before the test", c, cached)
	}
}

// TestSealedReadsRaceRetention: readers of many partitions go through a
// tiny descriptor cache (constant eviction and reopening) while queue
// retention deletes the segments they read. Every read returns the right
// record or ErrTrimmed, never an error from a closed or vanished file.
func TestSealedReadsRaceRetention(t *testing.T) {
	defer storage.SetMaxOpenSealed(storage.SetMaxOpenSealed(2))
	cached := storage.OpenSealed()
	fsys := faultfs.New()
	const parts, recs, perSeg = 4, 300, 3
	o := storage.Options{FS: fsys, Fsync: storage.FsyncNone, SegmentMaxBytes: segHdr + perSeg*recSize, Logger: quietLogger()}
	ps := make([]*storage.Partition, parts)
	for i := range ps {
		ps[i] = mustOpen(t, fmt.Sprintf("/q%d", i), o)
		for k := range recs {
			if _, err := ps[i].Append(payload(i*1000+k, 100), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	var reads, trimmed atomic.Int64
	stop := make(chan struct{})
	for i, p := range ps {
		for r := range 2 {
			wg.Add(1)
			go func() { // readers: random reads and short scans behind the settler
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					off := uint64((k*7 + r*13) % recs)
					rec, err := p.Read(off)
					switch {
					case errors.Is(err, storage.ErrTrimmed):
						trimmed.Add(1)
					case err != nil:
						t.Errorf("partition %d read %d: %v", i, off, err)
						return
					case string(rec.Data) != string(payload(i*1000+int(off), 100)):
						t.Errorf("partition %d read %d: wrong data", i, off)
						return
					}
					reads.Add(1)
					n := 0
					if err := p.Scan(off, func(rec storage.Record) bool {
						if string(rec.Data) != string(payload(i*1000+int(rec.Offset), 100)) {
							t.Errorf("partition %d scan %d: wrong data", i, rec.Offset)
						}
						n++
						return n < 5
					}); err != nil {
						t.Errorf("partition %d scan from %d: %v", i, off, err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // settler: in order, so retention deletes segment after segment
			defer wg.Done()
			for off := uint64(0); off < recs-perSeg; off++ {
				if err := p.Settle(off); err != nil {
					t.Error(err)
					return
				}
				if off%perSeg == perSeg-1 {
					if err := p.EnforceRetention(); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	}
	testkit.EventuallyReport(t, 30*time.Second, func() bool {
		for _, p := range ps {
			if first, _ := p.Bounds(); first < recs-2*perSeg {
				return false
			}
		}
		return true
	}, func() string { first, _ := ps[0].Bounds(); return fmt.Sprintf("retention stuck at %d", first) })
	close(stop)
	wg.Wait()
	t.Logf("%d reads (%d trimmed) while retention deleted %d segments per partition; %d sealed cached",
		reads.Load(), trimmed.Load(), recs/perSeg-2, storage.OpenSealed())
	for _, p := range ps {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if c := storage.OpenSealed(); c > cached {
		t.Fatalf("%d sealed segments cached after Close, %d before the test", c, cached)
	}
}
