package queue

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// StreamSubscribeOptions are the parameters of one SUBSCRIBE_STREAM (S-72).
type StreamSubscribeOptions struct {
	DurableName string           // "" = ephemeral; else the cursor's name (S-74)
	Start       wire.StreamStart // ephemeral subscriptions only (S-73)
	Filter      []wire.FilterClause
	Prefetch    uint32 // durable manual-ack subscriptions: most records delivered past the last ack; 0 = no limit
	AutoAck     bool
	// Paused starts the subscription paused: nothing is delivered until
	// Resume (for a caller that must finish its own setup first).
	Paused bool
}

// A StreamSubscription reads one stream partition for one consumer, in
// order and without gaps (S-81: a subscriber that falls behind reads from
// the log; only retention skips records). Its reader goroutine runs only
// while there is something to deliver and the consumer takes it.
//
// Flow control: a durable manual-ack subscription stops while Prefetch
// deliveries are unacknowledged (acks are cumulative, S-75; records its
// filter skipped take no credit). Every subscription also
// stops when the consumer's Deliver answers false (the session's queue of
// deliveries is full) until Resume — the bound for the others, whose acks
// carry no credit (S-75: ignored).
type StreamSubscription struct {
	p    *StreamPartition
	c    Consumer
	opts StreamSubscribeOptions

	mu      sync.Mutex
	pos     uint64   // next offset to read
	acked   uint64   // durable manual ack: every offset below is acknowledged
	unacked []uint64 // durable manual ack: offsets delivered and not acknowledged, ascending (the credit in use)
	paused  bool
	closed  bool
	kick    chan struct{} // cap 1: Resume, Ack and Close wake the reader
	done    chan struct{} // closed when the reader has stopped for good
}

// Subscribe starts a subscription for c (S-72 … S-75). Deliveries carry
// Tag = Offset (S-75). It fails with ErrUnavailable on a closed partition.
func (p *StreamPartition) Subscribe(c Consumer, o StreamSubscribeOptions) (*StreamSubscription, error) {
	s := &StreamSubscription{p: p, c: c, opts: o, paused: o.Paused, kick: make(chan struct{}, 1), done: make(chan struct{})}
	if o.DurableName != "" {
		first, _ := p.log.Bounds()
		s.pos = first // a new name starts at the earliest retained record (S-74)
		if next, ok := p.Cursor(o.DurableName); ok {
			s.pos = max(next, first)
		}
	} else {
		pos, err := p.startOffset(o.Start)
		if err != nil {
			return nil, err
		}
		s.pos = pos
	}
	s.acked = s.pos
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, core.Errorf(core.ErrUnavailable, "%s is closed", p.name)
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	go s.run()
	return s, nil
}

// Position returns the next offset the subscription will read.
func (s *StreamSubscription) Position() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

// Options returns the subscription's parameters.
func (s *StreamSubscription) Options() StreamSubscribeOptions { return s.opts }

// Ack acknowledges delivered offsets (tags are offsets, S-75). On a
// durable manual-ack subscription it commits the name's cursor to the
// highest tag + 1 and returns that much prefetch credit; elsewhere acks
// are ignored. Tags past what was delivered are ignored (S-61).
func (s *StreamSubscription) Ack(tags ...uint64) {
	if s.opts.DurableName == "" || s.opts.AutoAck || len(tags) == 0 {
		return
	}
	s.mu.Lock()
	hi := s.acked
	for _, t := range tags {
		if t < s.pos && t+1 > hi {
			hi = t + 1
		}
	}
	moved := hi > s.acked
	s.acked = hi
	n := 0
	for n < len(s.unacked) && s.unacked[n] < hi {
		n++
	}
	s.unacked = append(s.unacked[:0], s.unacked[n:]...)
	s.mu.Unlock()
	if !moved {
		return
	}
	s.commit(hi)
	s.wake()
}

// Nack is ignored on a stream (S-78: a stream has no requeue).
func (s *StreamSubscription) Nack([]uint64, bool, wire.Option[uint64]) {}

// Pause stops deliveries until Resume.
func (s *StreamSubscription) Pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// Resume continues after Pause or after the consumer's Deliver answered
// false.
func (s *StreamSubscription) Resume() {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	s.wake()
}

// Close ends the subscription and waits until its reader has stopped, so
// no Deliver call happens after Close returns.
func (s *StreamSubscription) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wake()
	<-s.done
	s.p.mu.Lock()
	delete(s.p.subs, s)
	s.p.mu.Unlock()
}

// credited reports whether prefetch credit applies: a durable
// subscription without auto-ack (the others' acks are ignored, S-75).
func (s *StreamSubscription) credited() bool {
	return s.opts.DurableName != "" && !s.opts.AutoAck && s.opts.Prefetch > 0
}

// hasCreditLocked reports whether another record may be delivered. Caller
// holds mu.
func (s *StreamSubscription) hasCreditLocked() bool {
	return !s.credited() || len(s.unacked) < int(s.opts.Prefetch)
}

func (s *StreamSubscription) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *StreamSubscription) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *StreamSubscription) commit(next uint64) {
	if err := s.p.commitCursor(s.opts.DurableName, next); err != nil {
		slog.Warn("stream cursor commit failed", "stream", s.p.name, "name", s.opts.DurableName, "next", next, "err", err)
	}
}

// run is the reader: it delivers from pos up to the tier's visible end,
// within the credit, and sleeps until one of them moves.
func (s *StreamSubscription) run() {
	defer close(s.done)
	for {
		end := s.p.end()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		limit := end
		idle := s.paused || s.pos >= limit || !s.hasCreditLocked()
		waitData := !s.paused && s.pos >= end // only new records can move it
		from := s.pos
		s.mu.Unlock()
		if idle {
			var changed <-chan struct{}
			if waitData {
				var now uint64
				if now, changed = s.p.watch(); now != end {
					continue // it moved meanwhile
				}
			}
			select {
			case <-changed: // nil (never) unless waiting for records
			case <-s.kick:
			}
			continue
		}
		if err := s.deliverRange(from, limit); err != nil {
			// The log failed (fail-stop) or was closed: nothing more can be
			// read; wait to be closed.
			if !errors.Is(err, storage.ErrClosed) {
				slog.Warn("stream subscription stopped", "stream", s.p.name, "err", err)
			}
			for !s.isClosed() {
				<-s.kick
			}
			return
		}
	}
}

// deliverRange reads [from, limit) in order and hands the records that
// pass the filter to the consumer, stopping early when it is closed,
// paused, or asks for no more.
func (s *StreamSubscription) deliverRange(from, limit uint64) error {
	first, _ := s.p.log.Bounds()
	if from < first { // retention moved the head past us (S-80)
		from = first
		s.mu.Lock()
		s.pos = max(s.pos, first)
		s.acked = max(s.acked, first)
		s.mu.Unlock()
	}
	var derr error
	pos := from
	err := s.p.log.Scan(from, func(r storage.Record) bool {
		if r.Offset >= limit {
			return false
		}
		rec, err := decodeRecord(r.Data)
		if err != nil {
			derr = core.Errorf(core.ErrInternal, "%s: record %d: %v", s.p.name, r.Offset, err)
			return false
		}
		matched := matchFilter(s.opts.Filter, rec.Headers)
		// The record counts as delivered before it is handed over: the
		// consumer's ACK can come back before Deliver returns, and Ack
		// ignores tags at or past pos and settles only recorded credit.
		pos = r.Offset + 1
		s.mu.Lock()
		s.pos = pos
		if matched && s.credited() {
			s.unacked = append(s.unacked, r.Offset)
		}
		s.mu.Unlock()
		more := true
		if matched {
			more = s.c.Deliver(s.delivery(r.Offset, &rec))
			s.p.stats.streamDelivered.Add(1)
			s.p.counts.delivered.Add(1)
		}
		// One lock per record after Deliver: the checks for the next record
		// (run made them for the first).
		s.mu.Lock()
		if !more {
			s.paused = true
		}
		more = more && !s.closed && !s.paused && s.hasCreditLocked()
		s.mu.Unlock()
		return more
	})
	if s.opts.DurableName != "" && s.opts.AutoAck && pos > from {
		s.commit(pos) // auto-ack advances the cursor along what was delivered (S-75)
	}
	if derr != nil {
		return derr
	}
	return err
}

func (s *StreamSubscription) delivery(off uint64, r *record) *Delivery {
	h := r.Headers
	if s.p.info.Durability == wire.DurabilitySpeculative {
		h = append(h, wire.Header{Key: streamHeaderSpeculative, Value: "1"})
	}
	return &Delivery{Key: Key{Topic: s.p.info.Topic}, Partition: s.p.index, Offset: off, Tag: off,
		Published: r.Published, Received: r.Received, ContentType: r.ContentType, Headers: h, Payload: r.Payload}
}
