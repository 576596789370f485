package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// The event feed: what an owner ships its followers besides records —
// every settlement and engine entry its journal records, numbered in the
// order the journal wrote them (core/storage/README.md#events). The
// numbers live in memory only: a follower starts from a checkpoint taken
// with the feed's position (EventCheckpoint) and then applies events in
// order (ApplyEvent). An owner that restarts serves under a new epoch, and
// its followers take a new checkpoint. The feed keeps the newest events
// up to a byte budget; a follower further behind takes a checkpoint too.

// ErrEventsTrimmed: the events asked for are no longer (or not yet) in the
// feed; the follower installs a checkpoint instead.
var ErrEventsTrimmed = errors.New("storage: events no longer in the feed")

// Event is one entry of the event feed: Payload is the journal entry's
// kind byte followed by its payload, which ApplyEvent understands.
type Event struct {
	Seq     uint64
	Payload []byte
}

// DefaultEventFeedBytes is the feed's byte budget when EventCheckpoint
// starts it: enough for about a hundred thousand single acknowledgements.
const DefaultEventFeedBytes = 4 << 20

// eventFeed is the ring of recent events; guarded by the journal's mu.
type eventFeed struct {
	on    bool
	next  uint64 // seq of the next event
	ev    []Event
	bytes int
	max   int
}

// add records one journal entry (settle or engine) if the feed is on.
func (f *eventFeed) add(kind byte, payload []byte) {
	if !f.on {
		return
	}
	b := make([]byte, 1+len(payload))
	b[0] = kind
	copy(b[1:], payload)
	f.ev = append(f.ev, Event{Seq: f.next, Payload: b})
	f.next++
	f.bytes += len(b)
	drop := 0
	for f.bytes > f.max && drop < len(f.ev)-1 {
		f.bytes -= len(f.ev[drop].Payload)
		drop++
	}
	if drop > 0 {
		f.ev = append(f.ev[:0], f.ev[drop:]...)
	}
}

// EventCheckpoint starts the event feed if it is off (keeping up to
// maxBytes of events; 0 means DefaultEventFeedBytes) and returns, taken
// at one instant, the feed's next sequence number and the settled set
// (the encoding InstallState takes). A checkpoint also needs the engine's
// snapshot for the same instant: the engine takes it while no engine
// entry can be appended (under its own lock), before or after this call.
func (p *Partition) EventCheckpoint(maxBytes int) (next uint64, settled []byte) {
	j := p.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.feed.on {
		if maxBytes <= 0 {
			maxBytes = DefaultEventFeedBytes
		}
		j.feed = eventFeed{on: true, next: j.feed.next, max: maxBytes}
	}
	return j.feed.next, appendRanges(nil, j.set.r)
}

// StopEventFeed drops the feed's events and stops recording (no follower
// reads them any more); sequence numbers go on from where they were.
func (p *Partition) StopEventFeed() {
	j := p.j
	j.mu.Lock()
	defer j.mu.Unlock()
	j.feed = eventFeed{next: j.feed.next}
}

// Events returns the feed's events from sequence number from on, up to
// about maxBytes of payload (at least one event when any is there), and
// the sequence number after the last one returned. It returns none when
// from is the feed's next number, and ErrEventsTrimmed when the feed is
// off, from is older than its oldest event, or past its next number.
func (p *Partition) Events(from uint64, maxBytes int) ([]Event, uint64, error) {
	j := p.j
	j.mu.Lock()
	defer j.mu.Unlock()
	f := &j.feed
	if !f.on || from > f.next {
		return nil, from, ErrEventsTrimmed
	}
	if from == f.next {
		return nil, from, nil
	}
	if len(f.ev) == 0 || from < f.ev[0].Seq {
		return nil, from, ErrEventsTrimmed
	}
	var out []Event
	size := 0
	for _, e := range f.ev[from-f.ev[0].Seq:] {
		if len(out) > 0 && size+len(e.Payload) > maxBytes {
			break
		}
		out = append(out, e) // payloads are never modified after add
		size += len(e.Payload)
	}
	return out, out[len(out)-1].Seq + 1, nil
}

// ApplyEvent applies, on a follower, one event of its owner's feed: a
// settlement through Settle (so it is refused with ErrOutOfRange while a
// settled offset is not in this replica's log yet: apply the records
// first), an engine entry through AppendState. A malformed payload is an
// error that changes nothing.
func (p *Partition) ApplyEvent(payload []byte) error {
	if len(payload) == 0 {
		return errors.New("storage: empty event")
	}
	switch body := payload[1:]; payload[0] {
	case kindSettle:
		var offs []uint64
		var n uint64
		if _, err := readRanges(body, func(a, e uint64) {
			n += e - a
			if n <= maxEventOffsets {
				for o := a; o < e; o++ {
					offs = append(offs, o)
				}
			}
		}); err != nil {
			return fmt.Errorf("storage: malformed settle event: %w", err)
		}
		if n > maxEventOffsets {
			return fmt.Errorf("storage: settle event of %d offsets, more than %d", n, maxEventOffsets)
		}
		return p.Settle(offs...)
	case kindEngine:
		return p.AppendState(body)
	default:
		return fmt.Errorf("storage: unknown event kind %d", payload[0])
	}
}

// maxEventOffsets bounds the offsets one settle event may name: an owner
// settles what one operation settled (a few thousand at most), so a larger
// one is malformed, and expanding it must not exhaust memory.
const maxEventOffsets = 1 << 20

// InstallState replaces, on a follower, the partition's settled set and
// engine snapshot with its owner's checkpoint (settled as EventCheckpoint
// encodes it), crash-safely as CompactState does: the journal's next
// generation starts with them. Settled offsets at or past this replica's
// log end are refused (install the records first).
func (p *Partition) InstallState(settled []byte, engine []byte) error {
	if len(engine) > MaxRecordBytes {
		return ErrTooLarge
	}
	var set rangeSet
	var last uint64
	if _, err := readRanges(settled, func(a, e uint64) {
		set.add(a, e)
		last = max(last, e)
	}); err != nil {
		return fmt.Errorf("storage: malformed settled set: %w", err)
	}
	next, err := p.usableNext()
	if err != nil {
		return err
	}
	if last > next {
		return fmt.Errorf("%w: checkpoint settles offsets up to %d, log next %d", ErrOutOfRange, last-1, next)
	}
	if err := p.j.install(set, engine, p.first.Load()); err != nil {
		return p.fail(err)
	}
	return nil
}

// install makes set the settled set and starts a new generation with it
// and engine as the snapshot.
func (j *journal) install(set rangeSet, engine []byte, first uint64) error {
	j.swapMu.Lock()
	defer j.swapMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	old := j.set
	j.set = set
	if err := j.create(j.gen+1, engine, true); err != nil {
		j.set = old
		return err
	}
	j.durable = j.set.frontierFrom(first)
	return nil
}

// growth wakes replication streams waiting for a partition to grow: its
// channel is closed, and replaced, at the next append or event. Appenders
// pay one atomic load when nobody waits.
type growth struct {
	mu sync.Mutex
	ch atomic.Pointer[chan struct{}]
}

// wait returns a channel closed at the next growth.
func (g *growth) wait() <-chan struct{} {
	if c := g.ch.Load(); c != nil {
		return *c
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.ch.Load(); c != nil {
		return *c
	}
	c := make(chan struct{})
	g.ch.Store(&c)
	return c
}

// fire wakes the waiters, if any.
func (g *growth) fire() {
	if g.ch.Load() == nil {
		return
	}
	g.mu.Lock()
	if c := g.ch.Swap(nil); c != nil {
		close(*c)
	}
	g.mu.Unlock()
}

// Grown returns a channel closed the next time a record is appended or an
// event recorded (with the feed on): a replication stream that has sent
// everything waits on it instead of polling.
func (p *Partition) Grown() <-chan struct{} { return p.grew.wait() }
