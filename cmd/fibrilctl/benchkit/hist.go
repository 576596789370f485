package benchkit

import (
	"math"
	"math/bits"
)

// Histogram is a log-bucketed latency histogram in the spirit of
// HdrHistogram: values (nanoseconds) below 256 are counted exactly, and
// above that every power of two is split into 128 equal buckets, so a
// reported value is never more than 1/128 (0.8 %) above the recorded one,
// and never below it (sub-microsecond resolution up to ~32 µs, better than
// 1 µs up to ~128 µs). Values above MaxTrackable (~68.7 s) land in the top
// bucket; the exact maximum is kept separately. It is a fixed array (30
// KiB), so memory does not grow with the number of samples.
//
// A Histogram is not safe for concurrent use: give each goroutine its own
// and Merge them at the end.
type Histogram struct {
	counts   [numBuckets]uint64
	n        uint64
	sum      uint64
	min, max uint64
}

const (
	subBits    = 8
	subCount   = 1 << subBits // exact values below this
	halfCount  = subCount / 2 // buckets per power of two above it
	topBits    = 36
	maxShift   = topBits - subBits
	numBuckets = subCount + maxShift*halfCount

	// MaxTrackable is the largest value with its own bucket (ns).
	MaxTrackable = 1<<topBits - 1
)

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	if v > MaxTrackable {
		v = MaxTrackable
	}
	k := bits.Len64(v) - subBits // ≥ 1
	return subCount + (k-1)*halfCount + int(v>>uint(k)) - halfCount
}

// bucketHigh is the largest value that falls into bucket i.
func bucketHigh(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	j := i - subCount
	k := j/halfCount + 1
	sub := j%halfCount + halfCount
	return uint64(sub+1)<<uint(k) - 1
}

// Record adds one value in nanoseconds; negative values count as 0.
func (h *Histogram) Record(ns int64) {
	v := uint64(0)
	if ns > 0 {
		v = uint64(ns)
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the exact largest recorded value (ns).
func (h *Histogram) Max() uint64 { return h.max }

// Min is the exact smallest recorded value (ns).
func (h *Histogram) Min() uint64 { return h.min }

// Mean is the exact mean (ns), 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.n)
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Quantile returns the value at quantile q (0 ≤ q ≤ 1) in nanoseconds:
// the top of the bucket holding the ceil(q·n)-th smallest sample, clamped
// to the exact min and max (the exact max for the top bucket, whose values
// may lie above MaxTrackable), so never below the true value. 0 when
// empty.
func (h *Histogram) Quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(1, min(rank, h.n))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == numBuckets-1 { // holds the values above MaxTrackable too
				return h.max
			}
			return min(max(bucketHigh(i), h.min), h.max)
		}
	}
	return h.max
}
