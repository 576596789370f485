package benchkit

import (
	"math/bits"
	"sync/atomic"
)

// bitset is a lock-free, lazily allocated set of sequence numbers: chunks
// of 2^16 bits are allocated on first use (8 KiB each), so memory follows
// the number of messages actually sent (about 1 bit per message).
type bitset struct {
	chunks [maxChunks]atomic.Pointer[chunk]
}

const (
	chunkShift = 16
	chunkWords = 1 << (chunkShift - 6)
	maxChunks  = 4096

	// MaxSeq bounds the sequence numbers of one producer (2^28 ≈ 268 M
	// messages); a producer stops before reaching it.
	MaxSeq = maxChunks << chunkShift
)

type chunk [chunkWords]atomic.Uint64

func (b *bitset) chunk(i uint64) *chunk {
	slot := &b.chunks[i>>chunkShift]
	c := slot.Load()
	if c == nil {
		c = new(chunk)
		if !slot.CompareAndSwap(nil, c) {
			c = slot.Load()
		}
	}
	return c
}

// set adds i and reports whether it was already present. i < MaxSeq.
func (b *bitset) set(i uint64) (was bool) {
	c := b.chunk(i)
	w := &c[(i>>6)&(chunkWords-1)]
	mask := uint64(1) << (i & 63)
	return w.Or(mask)&mask != 0
}

// andNotCount counts the members of b that are not in o.
func (b *bitset) andNotCount(o *bitset) uint64 {
	var n uint64
	for i := range b.chunks {
		c := b.chunks[i].Load()
		if c == nil {
			continue
		}
		oc := o.chunks[i].Load()
		for j := range c {
			w := c[j].Load()
			if oc != nil {
				w &^= oc[j].Load()
			}
			n += uint64(bits.OnesCount64(w))
		}
	}
	return n
}

// Tracker records, per producer, which sequence numbers were accepted by
// the broker (confirmed, or written when publishing without confirms) and
// which were delivered, so that the end of a run can count losses
// (accepted, never delivered) and duplicates (delivered twice) exactly.
// All methods are safe for concurrent use and allocation-free once a
// chunk exists.
//
// With fan-out every consumer is expected to receive every message: each
// has its own delivered sets, and losses and duplicates are counted per
// consumer and summed.
type Tracker struct {
	accepted  []bitset
	delivered [][]bitset // [consumer][producer]; one consumer without fan-out
}

// NewTracker makes a tracker for producers 0..n-1, one delivered set.
func NewTracker(n int) *Tracker { return NewFanTracker(n, 1) }

// NewFanTracker makes a tracker for producers 0..n-1 and, for fan-out,
// consumers 0..c-1 that each receive every message.
func NewFanTracker(n, c int) *Tracker {
	t := &Tracker{accepted: make([]bitset, n), delivered: make([][]bitset, max(c, 1))}
	for i := range t.delivered {
		t.delivered[i] = make([]bitset, n)
	}
	return t
}

// Copies is how many deliveries each accepted message should have.
func (t *Tracker) Copies() uint64 { return uint64(len(t.delivered)) }

// Accept marks (producer, seq) as accepted by the broker.
func (t *Tracker) Accept(producer uint32, seq uint64) {
	t.accepted[producer].set(seq)
}

// Deliver marks (producer, seq) as delivered and reports whether it had
// been delivered before. The caller has checked the bounds with Valid.
func (t *Tracker) Deliver(producer uint32, seq uint64) (duplicate bool) {
	return t.delivered[0][producer].set(seq)
}

// DeliverTo is Deliver for consumer c of a fan-out tracker.
func (t *Tracker) DeliverTo(c int, producer uint32, seq uint64) (duplicate bool) {
	return t.delivered[c%len(t.delivered)][producer].set(seq)
}

// Valid reports whether (producer, seq) can belong to this run.
func (t *Tracker) Valid(producer uint32, seq uint64) bool {
	return int(producer) < len(t.accepted) && seq < MaxSeq
}

// Lost counts accepted messages that were never delivered (to each
// consumer, with fan-out).
func (t *Tracker) Lost() uint64 {
	var n uint64
	for _, d := range t.delivered {
		for i := range t.accepted {
			n += t.accepted[i].andNotCount(&d[i])
		}
	}
	return n
}

// DeliveredUnaccepted counts delivered messages that were never accepted
// (their publish failed or timed out, yet the broker stored them).
func (t *Tracker) DeliveredUnaccepted() uint64 {
	var n uint64
	for _, d := range t.delivered {
		for i := range d {
			n += d[i].andNotCount(&t.accepted[i])
		}
	}
	return n
}
