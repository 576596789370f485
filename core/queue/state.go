package queue

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/fibrilgo/fibril/core/storage"
)

// Engine state in the storage state journal (AppendState / ReplayState /
// CompactState). Settlements are the storage's own; the engine journals
// only what storage cannot know: retry counts and nack delays. Both are
// written before they take effect (Nack), so after a crash a retry count
// never goes backwards and a delayed retry is not delivered early.
//
// Entry format (README.md):
//
//	u8      kind: 1 = requeue, 2 = snapshot
//	uvarint n
//	n × (uvarint offset, uvarint retry count, uvarint not-before unix ms, 0 = none)
//
// A requeue entry sets the state of each offset it names; a snapshot
// (always first after a compaction) replaces everything before it. Leases
// are not journaled: after a restart every unsettled message is
// deliverable again and old tags are dead (S-52). Publish delays and TTL
// deadlines live in the records themselves.
const (
	stateRequeue  = 1
	stateSnapshot = 2
)

// compactMin is the journal size below which the engine never compacts;
// above it, it compacts at 4× the size right after the last compaction
// (settled ranges plus the engine snapshot). A variable for tests.
var compactMin int64 = 4 << 20

var errBadState = errors.New("queue: malformed state entry")

type stateRec struct {
	off     uint64
	retries uint32
	at      int64 // not-before, unix ms; 0 = none
}

func encodeState(kind byte, recs []stateRec) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64*(1+3*len(recs)))
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, r.off)
		b = binary.AppendUvarint(b, uint64(r.retries))
		b = binary.AppendUvarint(b, uint64(max(r.at, 0)))
	}
	return b
}

// decodeState applies one entry to st.
func decodeState(b []byte, st map[uint64]stateRec) error {
	if len(b) < 1 || (b[0] != stateRequeue && b[0] != stateSnapshot) {
		return errBadState
	}
	if b[0] == stateSnapshot {
		clear(st)
	}
	rd := recReader{b: b[1:]}
	n := rd.uvarint()
	if rd.bad || n > uint64(len(rd.b))/3 {
		return errBadState
	}
	for range n {
		off := rd.uvarint()
		r := rd.uvarint()
		at := rd.uvarint()
		if rd.bad {
			return errBadState
		}
		st[off] = stateRec{off: off, retries: uint32(min(r, math.MaxUint32)), at: int64(min(at, 1<<62))}
	}
	return nil
}

// recover rebuilds the partition's engine state from storage (S-25):
// everything not settled is ready again, or delayed while its publish
// delay or nack delay is still ahead; retry counts come back from the
// journal. It reads each unsettled record's fixed header once (TTL
// deadline, not-before) — never its payload into engine state.
func (p *Partition) recover() error {
	st := map[uint64]stateRec{}
	err := p.log.ReplayState(func(e []byte) error {
		if err := decodeState(e, st); err != nil {
			p.m.log.Error("queue: skipping malformed state entry", "queue", p.q.key.String(), "partition", p.index)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, next := p.log.Bounds()
	frontier := p.log.SettledFrontier()
	p.cursor, p.end = frontier, next
	now := p.m.nowMs()
	var rec record
	err = p.log.Scan(frontier, func(r storage.Record) bool {
		if r.Offset >= next {
			return false
		}
		if p.log.IsSettled(r.Offset) {
			return true
		}
		p.unsettled++
		if _, err := decodeMeta(r.Data, &rec); err != nil {
			return true // dispatch reports it
		}
		if rec.Deadline != 0 {
			p.ttl.s = append(p.ttl.s, due{rec.Deadline, r.Offset})
			p.ttlLive++
		}
		if nb := int64(min(rec.NotBefore, 1<<62)); nb > now {
			p.delayLocked(r.Offset, nb)
		}
		return true
	})
	if err != nil {
		return err
	}
	p.ttl.Filter(func(due) bool { return true }) // heapify
	lost := 0
	for off, s := range st {
		// After a crash the journal may name records that did not survive
		// (S-145): a message is deliverable, and so can be NACKed, before
		// its record is durable. Settled ones need nothing.
		if off >= next {
			lost++
			continue
		}
		if p.log.IsSettled(off) {
			continue
		}
		if s.retries > 0 {
			p.retries[off] = s.retries
		}
		if s.at > now && s.at > p.delayed[off] {
			p.delayLocked(off, s.at)
		}
	}
	if lost > 0 {
		// Skipping them is not enough: the next record published takes the
		// same offset, and at a later restart it would inherit their retry
		// count and not-before (held back, dead-lettered at max_retries).
		// The compaction rewrites the journal durably without them before
		// the partition accepts a publish.
		p.m.log.Warn("queue: dropping engine state of records lost in a crash", "queue", p.q.key.String(), "partition", p.index, "entries", lost, "next", next)
		if err := p.log.CompactState(p.snapshotLocked()); err != nil {
			return err
		}
	}
	p.compactAt = max(compactMin, 4*p.log.StateJournalBytes())
	return nil
}

// appendStateLocked journals one engine entry before it takes effect.
func (p *Partition) appendStateLocked(entry []byte) error {
	p.journalDirty = true
	return p.log.AppendState(entry)
}

// maybeCompactLocked rewrites the state journal as one snapshot when it
// has grown (acks add to it all the time). The snapshot is built under mu,
// and every AppendState is made under mu, so it reflects all of them, as
// CompactState requires.
func (p *Partition) maybeCompactLocked() {
	if !p.journalDirty || p.log == nil {
		return
	}
	p.journalDirty = false
	if p.log.StateJournalBytes() <= p.compactAt {
		return
	}
	if err := p.log.CompactState(p.snapshotLocked()); err != nil {
		p.logFault("compact state", err)
		p.compactAt *= 2 // do not retry on every call
		return
	}
	p.compactAt = max(compactMin, 4*p.log.StateJournalBytes())
}

// snapshotLocked encodes the engine state of every unsettled message that
// has any: retry counts and delays.
func (p *Partition) snapshotLocked() []byte {
	recs := make([]stateRec, 0, len(p.retries)+len(p.delayed))
	for off, r := range p.retries {
		recs = append(recs, stateRec{off: off, retries: r, at: p.delayed[off]})
	}
	for off, at := range p.delayed {
		if _, ok := p.retries[off]; !ok {
			recs = append(recs, stateRec{off: off, at: at})
		}
	}
	return encodeState(stateSnapshot, recs)
}
