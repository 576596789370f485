// Package latency is a fixed-bucket, lock-free latency histogram for hot
// paths that must not import a metrics library (the storage engine, the
// queue engine): Observe is a few atomic adds, and the broker turns a
// Snapshot into a Prometheus histogram at scrape time.
package latency

import (
	"math"
	"sync/atomic"
	"time"
)

// Histogram counts observations per upper bound (in seconds).
type Histogram struct {
	bounds []float64 // ascending upper bounds, seconds
	counts []atomic.Uint64
	n      atomic.Uint64
	sumNs  atomic.Uint64
}

// New makes a histogram with the given ascending upper bounds in seconds
// (observations above the last one count only in the total).
func New(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds))}
}

// Exponential returns n bounds from start, each factor times the last.
func Exponential(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start * math.Pow(factor, float64(i))
	}
	return b
}

// Observe records one duration (negative ones count as zero).
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	s := d.Seconds()
	for i, b := range h.bounds {
		if s <= b {
			h.counts[i].Add(1)
			break
		}
	}
	h.n.Add(1)
	h.sumNs.Add(uint64(d))
}

// Snapshot returns the cumulative count per bound (Prometheus' form), the
// total count and the sum in seconds. Concurrent observations may land
// between the reads: the numbers are each exact, not mutually atomic.
func (h *Histogram) Snapshot() (buckets map[float64]uint64, count uint64, sum float64) {
	buckets = make(map[float64]uint64, len(h.bounds))
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		buckets[b] = cum
	}
	count = max(h.n.Load(), cum)
	return buckets, count, float64(h.sumNs.Load()) / 1e9
}
