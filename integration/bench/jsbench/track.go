package main

import (
	"math/bits"
	"sync/atomic"
)

// seqSet is a concurrent set of sequence numbers, one bit each, held in
// lazily allocated 8 KiB pages of 65 536 bits: memory follows the number
// of messages actually sent.
type seqSet struct {
	pages [setPages]atomic.Pointer[setPage]
}

const (
	pageBits  = 16
	pageWords = 1 << (pageBits - 6)
	setPages  = 4096

	// MaxSeq bounds a producer's sequence numbers (2^28); a producer stops
	// before reaching it.
	MaxSeq = setPages << pageBits
)

type setPage [pageWords]atomic.Uint64

func (s *seqSet) page(i uint64, create bool) *setPage {
	slot := &s.pages[i>>pageBits]
	p := slot.Load()
	if p == nil && create {
		slot.CompareAndSwap(nil, new(setPage)) // a loser uses the winner's page
		p = slot.Load()
	}
	return p
}

// add inserts i (< MaxSeq) and reports whether it was already there.
func (s *seqSet) add(i uint64) (had bool) {
	w := &s.page(i, true)[(i>>6)%pageWords]
	bit := uint64(1) << (i % 64)
	return w.Or(bit)&bit != 0
}

// minus counts the members of s that are not in o.
func (s *seqSet) minus(o *seqSet) uint64 {
	var n uint64
	for i := range s.pages {
		p := s.pages[i].Load()
		if p == nil {
			continue
		}
		q := o.pages[i].Load()
		for j := range p {
			w := p[j].Load()
			if q != nil {
				w &^= q[j].Load()
			}
			n += uint64(bits.OnesCount64(w))
		}
	}
	return n
}

// Tracker knows, per producer, which sequence numbers the server accepted
// (PubAck received, or written when unconfirmed) and which were delivered,
// so that losses (accepted, never delivered) and duplicates (delivered
// again) are counted exactly. Safe for concurrent use.
type Tracker struct {
	accepted, delivered []seqSet
}

func NewTracker(producers int) *Tracker {
	return &Tracker{accepted: make([]seqSet, producers), delivered: make([]seqSet, producers)}
}

func (t *Tracker) Valid(producer uint32, seq uint64) bool {
	return int(producer) < len(t.accepted) && seq < MaxSeq
}

func (t *Tracker) Accept(producer uint32, seq uint64) { t.accepted[producer].add(seq) }

// Deliver records a delivery and reports whether it is a duplicate.
func (t *Tracker) Deliver(producer uint32, seq uint64) bool { return t.delivered[producer].add(seq) }

// Lost counts accepted messages never delivered.
func (t *Tracker) Lost() uint64 {
	var n uint64
	for i := range t.accepted {
		n += t.accepted[i].minus(&t.delivered[i])
	}
	return n
}

// DeliveredUnaccepted counts messages delivered although their publish
// failed (or timed out) on the client's side.
func (t *Tracker) DeliveredUnaccepted() uint64 {
	var n uint64
	for i := range t.delivered {
		n += t.delivered[i].minus(&t.accepted[i])
	}
	return n
}
