package benchkit

import (
	"context"
	"fmt"
	"os"
	"time"
)

// FsyncResult is the outcome of Fsync.
type FsyncResult struct {
	Mode      string  `json:"mode"` // "fsync"
	Dir       string  `json:"dir"`
	Size      int     `json:"size"`
	DurationS float64 `json:"duration_s"`
	Syncs     uint64  `json:"syncs"`
	P50       float64 `json:"fsync_p50_us"`
	P90       float64 `json:"fsync_p90_us"`
	P99       float64 `json:"fsync_p99_us"`
	P999      float64 `json:"fsync_p999_us"`
	Max       float64 `json:"fsync_max_us"`
	Mean      float64 `json:"fsync_mean_us"`
	LoadAvg   string  `json:"loadavg_start,omitempty"`
	CPUPress  float64 `json:"cpu_pressure_pct"`
	IOPress   float64 `json:"io_pressure_pct"`
}

// Fsync measures the disk baseline the broker's confirm latency is held
// against: append size bytes to a fresh file in dir and fsync it, one at a
// time, for d (the way a log segment grows under storage.fsync = always,
// one record per commit). The file is removed afterwards.
func Fsync(ctx context.Context, dir string, size int, d time.Duration) (*FsyncResult, error) {
	if size <= 0 {
		return nil, fmt.Errorf("size must be positive")
	}
	f, err := os.CreateTemp(dir, "fibrilctl-fsync-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	res := &FsyncResult{Mode: "fsync", Dir: dir, Size: size, LoadAvg: loadAvg()}
	buf := make([]byte, size)
	var h Histogram
	start := Now()
	end := start + int64(d)
	var written int64
	for Now() < end && ctx.Err() == nil {
		t0 := Now()
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		h.Record(Now() - t0)
		written += int64(size)
		if written > 256<<20 { // keep the file bounded on a fast disk
			if err := f.Truncate(0); err != nil {
				return nil, err
			}
			if _, err := f.Seek(0, 0); err != nil {
				return nil, err
			}
			written = 0
		}
	}
	l := summarize(&h)
	res.DurationS = round3(float64(Now()-start) / 1e9)
	res.Syncs = h.Count()
	res.CPUPress, res.IOPress = pressure("cpu"), pressure("io")
	res.P50, res.P90, res.P99, res.P999, res.Max, res.Mean = l.p50, l.p90, l.p99, l.p999, l.max, l.mean
	return res, nil
}
