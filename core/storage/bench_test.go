package storage_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
)

// BenchmarkAppend measures confirmed appends of 1 KiB records on the real
// disk (b.TempDir()), with 1, 16 or 256 goroutines each calling Append in a
// loop; b.N appends are split among them.
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
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "appends/s")
			})
		}
	}
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
