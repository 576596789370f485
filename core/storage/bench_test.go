package storage_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// BenchmarkAppend measures confirmed appends of 1 KiB records on the real
// disk (b.TempDir()), with 1, 16 or 256 goroutines each calling Append in a
// loop; b.N appends are split among them. cpu-µs/op is the CPU time of the
// whole process (all goroutines, user + system) per append.
func BenchmarkAppend(b *testing.B) {
	for _, pol := range []storage.FsyncPolicy{storage.FsyncAlways, storage.FsyncInterval, storage.FsyncNone} {
		for _, n := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("%s/appenders=%d", pol, n), func(b *testing.B) {
				p := mustOpen(b, b.TempDir(), storage.Options{Fsync: pol})
				defer p.Close()
				data := make([]byte, 1024)
				for i := range data {
					data[i] = byte(i)
				}
				b.SetBytes(int64(len(data)))
				b.ResetTimer()
				start := time.Now()
				u0, s0 := cpuTimes()
				var left atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				for g := 0; g < n; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for left.Add(-1) >= 0 {
							if _, err := p.Append(data, 0); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				u1, s1 := cpuTimes()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "appends/s")
				reportCPU(b, u1-u0, s1-s0)
			})
		}
	}
}

// BenchmarkRoundTrip mimics the broker's one-message-at-a-time round trip
// (fibrilctl bench --mode rtt) under FsyncAlways: publish = AppendAsync,
// confirm = its done callback, then a second goroutine (the consumer's
// session) reads the record (delivery) and settles it (ack); the next
// round starts once both the confirm and the settle returned. So the ack
// of record n is written just before record n+1 is appended, as in the
// broker. Reports the round latency p50/p99 and the process CPU per round.
//
// "disk" runs on b.TempDir(); "memfs" on faultfs without sync delay, which
// leaves only the software path (locks, goroutine hand-offs, encoding).
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("disk", func(b *testing.B) { benchRoundTrip(b, b.TempDir(), nil) })
	b.Run("memfs", func(b *testing.B) { benchRoundTrip(b, "/d", faultfs.New()) })
}

func benchRoundTrip(b *testing.B, dir string, fsys storage.FS) {
	p := mustOpen(b, dir, storage.Options{Fsync: storage.FsyncAlways, FS: fsys})
	defer p.Close()
	data := make([]byte, 1024)
	deliver := make(chan uint64)
	acked := make(chan error)
	go func() { // the consumer
		for off := range deliver {
			_, err := p.Read(off)
			if err == nil {
				err = p.Settle(off)
			}
			acked <- err
		}
	}()
	defer close(deliver)
	confirmed := make(chan error, 1)
	done := func(_ uint64, err error) { confirmed <- err }
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	u0, s0 := cpuTimes()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		off, err := p.AppendAsync(data, 0, done)
		if err != nil {
			b.Fatal(err)
		}
		if err := <-confirmed; err != nil {
			b.Fatal(err)
		}
		deliver <- off
		if err := <-acked; err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	u1, s1 := cpuTimes()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	reportCPU(b, u1-u0, s1-s0)
}

// reportCPU reports the process CPU time per op, total and its system
// part (on this VM an fsync costs tens of µs of system time by itself).
func reportCPU(b *testing.B, user, sys time.Duration) {
	b.ReportMetric(float64((user+sys).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(sys.Microseconds())/float64(b.N), "sys-µs/op")
}

// BenchmarkRawDiskFsync is the disk's own limit in the same kind of
// directory: append 256 KiB, fsync, repeat.
func BenchmarkRawDiskFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawDiskFsync1K is the latency floor of one confirm: append
// 1 KiB, fsync (or, with fdatasync, what the partition uses on Linux),
// repeat; p50/p99 per write+sync.
func BenchmarkRawDiskFsync1K(b *testing.B) {
	for _, mode := range []string{"fsync", "fdatasync"} {
		b.Run(mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 1024)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			u0, s0 := cpuTimes()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if mode == "fsync" {
					err = f.Sync()
				} else {
					err = rawDataSync(f)
				}
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			u1, s1 := cpuTimes()
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			reportCPU(b, u1-u0, s1-s0)
		})
	}
}

// BenchmarkScan reads 4,096 records of 1 KiB with Scan, from the page
// cache (written) and from memory (pending, as a replication stream reads
// the newest records): allocations per record are what it watches.
//
//	go test -run '^$' -bench Scan -benchmem ./core/storage/
func BenchmarkScan(b *testing.B) {
	for _, pending := range []bool{false, true} {
		name := "written"
		if pending {
			name = "pending"
		}
		b.Run(name, func(b *testing.B) {
			o := storage.Options{Fsync: storage.FsyncNone, Logger: quietLogger()}
			if pending {
				o.Fsync, o.FsyncInterval = storage.FsyncInterval, time.Hour
			}
			p, err := storage.OpenPartition(b.TempDir(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			data := make([]byte, 1024)
			for range 4096 {
				if _, err := p.AppendAsyncDeferred(data, 1, nil); err != nil {
					b.Fatal(err)
				}
			}
			if !pending {
				if err := p.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(4096 * 1024)
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				if err := p.Scan(0, func(storage.Record) bool { n++; return true }); err != nil || n != 4096 {
					b.Fatalf("scanned %d: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkScanTail reads the newest k records of 1 KiB, as a
// replication stream that keeps up does (a few records per batch): the
// bytes allocated per scan should follow what it reads, not a whole chunk.
// (Scan's in-memory path sizes its copy the same way; the committer has
// written these records by the time the loop runs.)
//
//	go test -run '^$' -bench ScanTail -benchmem ./core/storage/
func BenchmarkScanTail(b *testing.B) {
	for _, k := range []int{1, 8} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			p, err := storage.OpenPartition(b.TempDir(), storage.Options{Fsync: storage.FsyncNone, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			data := make([]byte, 1024)
			for range 1024 {
				if _, err := p.AppendAsyncDeferred(data, 1, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Sync(); err != nil {
				b.Fatal(err)
			}
			from := uint64(1024 - k)
			b.SetBytes(int64(k * 1024))
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				if err := p.Scan(from, func(storage.Record) bool { n++; return true }); err != nil || n != k {
					b.Fatalf("scanned %d: %v", n, err)
				}
			}
		})
	}
}
