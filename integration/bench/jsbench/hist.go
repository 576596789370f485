package main

import (
	"math"
	"math/bits"
)

// Histogram is a log-linear latency histogram over nanoseconds with a
// fixed memory footprint (histBuckets × 8 B ≈ 30 KiB), whatever the
// number of samples. It is not safe for concurrent use: each goroutine
// records into its own and the histograms are merged at the end.
//
// Layout: values below 2·histSub (256 ns) have one bucket each. Above,
// every power of two [2^k, 2^(k+1)) is cut into histSub (128) equal
// buckets, so a bucket is at most 1/128 (0.78 %) of its lower bound wide.
// Quantiles report the upper bound of their bucket (capped at the exact
// maximum), so a reported value is never below the true one and at most
// 0.8 % above it: far below the 1 µs resolution the results are printed
// with, for any latency above 128 µs, and exact to the ns below 256 ns.
// Values above histMax (≈ 68.7 s) are counted in the last bucket; the
// exact min, max and sum are kept aside.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      float64
	min, max int64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	histLinear  = 2 * histSub      // values below this are exact
	histMaxBits = 36               // values < 2^36 ns ≈ 68.7 s are resolved
	histMax     = 1<<histMaxBits - 1
	histBuckets = histLinear + (histMaxBits-histSubBits-1)*histSub
)

// bucketOf maps v (0 ≤ v ≤ histMax) to its bucket.
func bucketOf(v int64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (histSubBits + 1) // ≥ 1
	mant := int(v >> shift)                            // in [histSub, 2·histSub)
	return histLinear + (shift-1)*histSub + mant - histSub
}

// upperOf is the largest value that falls in bucket i.
func upperOf(i int) int64 {
	if i < histLinear {
		return int64(i)
	}
	j := i - histLinear
	shift := j/histSub + 1
	mant := int64(j%histSub + histSub)
	return (mant+1)<<shift - 1
}

// Record adds one sample of v nanoseconds (negative values count as 0).
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
	if v > histMax {
		v = histMax
	}
	h.counts[bucketOf(v)]++
}

// Merge adds the samples of o into h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the exact largest sample (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q (0 < q ≤ 1): the upper bound of
// the bucket holding the ⌈q·n⌉-th smallest sample, capped at the maximum.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(1, min(rank, h.n))
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			if i == histBuckets-1 { // holds the values above histMax too
				return h.max
			}
			return min(upperOf(i), h.max)
		}
	}
	return h.max
}
