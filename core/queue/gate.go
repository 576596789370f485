package queue

import (
	"math"

	"github.com/fibrilgo/fibril/core/storage"
)

// ConfirmGate holds back the confirms of a replicated partition's records
// until the partition's durability policy holds
// (docs/ARCHITECTURE.md#replication). The engine calls Confirm for every
// record it appended — published or dead-lettered — once the record is
// durable on this broker, on the storage commit goroutine and in offset
// order; Confirm calls done once the policy holds for off, or with the
// error that keeps it from holding. done may run on another goroutine
// and must not block; Confirm must not block either.
//
// Deliveries under a replica-gated policy stop at the replicated
// watermark (S-143); whoever runs the gate moves that limit with
// Partition.SetDeliverable.
type ConfirmGate interface {
	Confirm(off uint64, done func(error))
}

// Gated is a partition a ConfirmGate governs: a queue's (*Partition) or
// a durable stream's (*StreamPartition). Whoever runs the gate reads the
// log it replicates and moves the delivery limit with the watermark.
type Gated interface {
	// Ref names the partition: a stream's key has no group.
	Ref() (Key, uint32)
	ReplicationLog() (*storage.Partition, error)
	SetDeliverable(limit uint64)
	RaiseDeliverable(limit uint64)
}

// Unlimited is the delivery limit of a partition whose deliveries are not
// gated on replication.
const Unlimited = math.MaxUint64

// SetDeliverable sets the end of the offsets that may be delivered for
// the first time: a replica-gated partition delivers only records below
// its replicated watermark (S-143), one without a gate any record the log
// holds (Unlimited). Raising the limit starts the deliveries it allows.
// Records delivered before a lowered limit stay delivered.
func (p *Partition) SetDeliverable(limit uint64) {
	p.mu.Lock()
	raised := limit > p.deliverable
	p.deliverable = limit
	if raised && p.creditLocked() {
		p.dispatchLocked()
	}
	p.finishLocked()
}

// RaiseDeliverable is SetDeliverable for a limit that only grows: a lower
// value than the current limit (a late call) changes nothing.
func (p *Partition) RaiseDeliverable(limit uint64) {
	p.mu.Lock()
	if limit <= p.deliverable {
		p.mu.Unlock()
		return
	}
	p.deliverable = limit
	if p.creditLocked() {
		p.dispatchLocked()
	}
	p.finishLocked()
}

// Ref names the partition: its queue and index.
func (p *Partition) Ref() (Key, uint32) { return p.q.key, p.index }

// gated wraps an append's done so that it waits for the gate, when the
// partition has one.
func (p *Partition) gated(done func(uint64, error)) func(uint64, error) {
	g := p.gate
	if g == nil {
		return done
	}
	return func(off uint64, err error) {
		if err != nil {
			if done != nil {
				done(off, err)
			}
			return
		}
		g.Confirm(off, func(err error) {
			if done != nil {
				done(off, err)
			}
		})
	}
}
