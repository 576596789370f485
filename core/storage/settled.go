package storage

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
)

// rangeSet is the set of settled offsets, kept as sorted, disjoint,
// non-adjacent half-open ranges [start, end). Acks arrive roughly in order
// with holes (S-57), so the set stays small: one range below the settled
// frontier plus one per hole.
type rangeSet struct {
	r []span
}

type span struct{ start, end uint64 }

// find returns the index of the first span with end > o.
func (s *rangeSet) find(o uint64) int {
	return sort.Search(len(s.r), func(i int) bool { return s.r[i].end > o })
}

func (s *rangeSet) contains(o uint64) bool {
	i := s.find(o)
	return i < len(s.r) && s.r[i].start <= o
}

// add inserts [a, b) and merges neighbours.
func (s *rangeSet) add(a, b uint64) {
	if a >= b {
		return
	}
	// First span that ends at or after a (touching counts, to merge).
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i].end >= a })
	j := i
	for j < len(s.r) && s.r[j].start <= b {
		a = min(a, s.r[j].start)
		b = max(b, s.r[j].end)
		j++
	}
	s.r = slices.Replace(s.r, i, j, span{a, b})
}

// frontierFrom returns the smallest offset >= from that is not in the set.
func (s *rangeSet) frontierFrom(from uint64) uint64 {
	i := s.find(from)
	if i < len(s.r) && s.r[i].start <= from {
		return s.r[i].end
	}
	return from
}

// dropFrom removes every offset >= n and reports whether anything was removed.
func (s *rangeSet) dropFrom(n uint64) bool {
	i := s.find(n)
	if i == len(s.r) {
		return false
	}
	if s.r[i].start < n {
		s.r[i].end = n
		i++
	}
	s.r = s.r[:i]
	return true
}

// appendRanges encodes spans as uvarint count, then (gap from the previous
// end, length) pairs — compact for the dense ranges acks produce.
func appendRanges(b []byte, spans []span) []byte {
	b = binary.AppendUvarint(b, uint64(len(spans)))
	var prev uint64
	for _, sp := range spans {
		b = binary.AppendUvarint(b, sp.start-prev)
		b = binary.AppendUvarint(b, sp.end-sp.start)
		prev = sp.end
	}
	return b
}

var errBadRanges = errors.New("bad range encoding")

// readRanges decodes what appendRanges wrote and returns the rest of b.
func readRanges(b []byte, fn func(a, e uint64)) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBadRanges
	}
	b = b[k:]
	var prev uint64
	for range n {
		gap, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return nil, errBadRanges
		}
		ln, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || ln == 0 || prev+gap < prev || prev+gap+ln < prev+gap {
			return nil, errBadRanges
		}
		b = b[k1+k2:]
		fn(prev+gap, prev+gap+ln)
		prev += gap + ln
	}
	return b, nil
}

// offsetsToSpans sorts offsets (in place) and folds them into spans.
func offsetsToSpans(offs []uint64, dst []span) []span {
	slices.Sort(offs)
	for _, o := range offs {
		if n := len(dst); n > 0 && dst[n-1].end >= o {
			if dst[n-1].end == o {
				dst[n-1].end = o + 1
			}
			continue
		}
		dst = append(dst, span{o, o + 1})
	}
	return dst
}
