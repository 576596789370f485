package queue

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// tagSeq hands out delivery tags: one process-wide increasing counter, so
// a tag is unique in the process and never reused (S-48, docs/protocol.md#subscriptions).
// It starts at a random point (tagBase): a late ACK or NACK that reaches
// another process — a partition's new owner after a failover, or this
// broker after a restart, through a gateway relaying the client's settles —
// must not name one of that process's tags and settle a different message.
// Two processes' ranges overlap only if their bases fall within the
// number of deliveries of each other, out of 2^63.
var tagSeq = func() *atomic.Uint64 {
	var s atomic.Uint64
	s.Store(tagBase())
	return &s
}()

// tagBase is a random start for tagSeq below 2^63, so that no process
// comes near wrapping around; never 0 (a tag is never 0).
func tagBase() uint64 { return rand.Uint64()>>1 | 1 }

// dispatchRound bounds the deliveries made under one hold of the
// partition lock. Manual-ack subscriptions are bounded by their prefetch
// anyway; auto-ack ones are not (their credit returns at once, WIRE
// docs/protocol.md#subscriptions), so a long backlog is handed out in rounds and a session can
// Pause between them to apply backpressure.
const dispatchRound = 512

// Subscription is one consumer of one partition (S-43). Its fields are
// guarded by the partition's mutex.
type Subscription struct {
	p        *Partition
	c        Consumer
	opts     SubscribeOptions
	window   int                  // prefetch, 0 raised to 1 (S-46)
	held     map[uint64]*inflight // tag → unsettled delivery
	settling int                  // acked deliveries whose journal write is in progress
	paused   bool
	standby  bool // a cohort member's subscription to a partition not assigned to it (S-90)
	closed   bool
}

// Subscribe attaches a consumer. Deliveries start at once (from within
// this call) if messages are ready.
func (p *Partition) Subscribe(c Consumer, opts SubscribeOptions) (*Subscription, error) {
	if c == nil {
		return nil, core.Errorf(core.ErrBadRequest, "subscribe to %s: no consumer", p.name)
	}
	p.mu.Lock()
	if err := p.usableLocked(); err != nil {
		p.mu.Unlock()
		return nil, err
	}
	s := &Subscription{p: p, c: c, opts: opts, window: int(max(opts.Prefetch, 1)), held: map[uint64]*inflight{}, standby: opts.Standby}
	p.subs = append(p.subs, s)
	p.dispatchLocked()
	p.finishLocked()
	return s, nil
}

// Options returns the options the subscription was made with (prefetch
// as requested, unclamped: SUBSCRIBE_OK echoes it, wire.SubscribeOK).
func (s *Subscription) Options() SubscribeOptions { return s.opts }

// Pause stops deliveries to a dormant session's subscription (S-56). Its
// unsettled deliveries stay leased (their leases still run out normally)
// and can be settled after Resume.
func (s *Subscription) Pause() {
	s.p.mu.Lock()
	s.paused = true
	s.p.mu.Unlock()
}

// Resume restarts deliveries after Pause, or after Deliver asked for a
// pause by returning false.
func (s *Subscription) Resume() {
	p := s.p
	p.mu.Lock()
	if s.closed || !s.paused {
		p.mu.Unlock()
		return
	}
	s.paused = false
	p.dispatchLocked()
	p.finishLocked()
}

// Close ends the subscription: every unsettled delivery it holds returns
// to Ready at once, retry counts unchanged (S-54). Its tags are dead.
func (s *Subscription) Close() {
	p := s.p
	p.mu.Lock()
	if s.closed {
		p.mu.Unlock()
		return
	}
	s.closed = true
	for i, x := range p.subs {
		if x == s {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			if p.rr > i {
				p.rr--
			}
			break
		}
	}
	if p.rr >= len(p.subs) {
		p.rr = 0
	}
	now := p.m.nowMs()
	for _, inf := range s.held {
		p.releaseLocked(inf)
		p.returnToReadyLocked(inf.off, inf.deadline, now)
	}
	p.dispatchLocked()
	p.finishLocked()
}

// SetStandby makes the subscription an exclusive consumer group's hot
// standby (on) or its partition's active member (off) — the gate that
// lets at most one member of a cohort take deliveries from a partition
// (S-90). A standby keeps what it holds: its unsettled deliveries settle
// and their leases run out as usual.
func (s *Subscription) SetStandby(on bool) {
	p := s.p
	p.mu.Lock()
	if s.closed || s.standby == on {
		p.mu.Unlock()
		return
	}
	s.standby = on
	if on {
		p.mu.Unlock()
		return
	}
	p.dispatchLocked()
	p.finishLocked()
}

// Unsettled returns how many deliveries the subscription holds unsettled
// (0 once it is closed): a cohort hands a partition to another member
// only once the member it leaves holds none of its deliveries, so that
// the partition's order holds across the move.
func (s *Subscription) Unsettled() int {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if s.closed {
		return 0
	}
	return len(s.held) + s.settling
}

func (s *Subscription) hasCredit() bool {
	return !s.paused && !s.standby && !s.closed && (s.opts.AutoAck || len(s.held)+s.settling < s.window)
}

// creditLocked reports whether any subscription could take a delivery.
func (p *Partition) creditLocked() bool {
	for _, s := range p.subs {
		if s.hasCredit() {
			return true
		}
	}
	return false
}

// nextSubLocked picks the next subscription with credit, round-robin
// (S-47: fair, unordered across consumers).
func (p *Partition) nextSubLocked() *Subscription {
	n := len(p.subs)
	for i := range n {
		j := (p.rr + i) % n
		if s := p.subs[j]; s.hasCredit() {
			p.rr = (j + 1) % n
			return s
		}
	}
	return nil
}

// peekReadyLocked returns the next message to deliver: requeued ones
// first, lowest offset first, then never-delivered ones in offset order
// (S-24), none at or past a hold (SetHold). fresh says which. The cursor steps over offsets that left the
// never-delivered region by other ways (settled, delayed, dead-lettering).
func (p *Partition) peekReadyLocked() (off uint64, fresh, ok bool) {
	held := p.heldFromLocked()
	for p.requeued.Len() > 0 {
		off := p.requeued.Peek()
		if _, ok := p.inReq[off]; ok {
			if off >= held {
				break // held, and so is every other requeued one (all higher) and the cursor (higher still)
			}
			return off, false, true
		}
		p.requeued.Pop() // stale: expired or dead-lettered while ready
	}
	for p.cursor < min(p.end, p.deliverable, held) {
		off := p.cursor
		_, delayed := p.delayed[off]
		_, pending := p.pending[off]
		if !delayed && !pending && !p.log.IsSettled(off) {
			return off, true, true
		}
		p.cursor++
	}
	return 0, false, false
}

// takeLocked removes the message peekReadyLocked returned from Ready.
func (p *Partition) takeLocked(off uint64, fresh bool) {
	if fresh {
		p.cursor = off + 1
		return
	}
	p.requeued.Pop()
	delete(p.inReq, off)
}

// makeReadyLocked returns a message to Ready. An offset still in the
// never-delivered region needs nothing: the cursor will reach it.
func (p *Partition) makeReadyLocked(off uint64) {
	if off >= p.cursor {
		return
	}
	if _, ok := p.inReq[off]; ok {
		return
	}
	p.inReq[off] = struct{}{}
	p.requeued.Push(off)
	if p.requeued.Len() > 2*len(p.inReq)+1024 {
		p.requeued.Filter(func(o uint64) bool { _, ok := p.inReq[o]; return ok })
	}
}

// returnToReadyLocked makes a released delivery ready again. If its TTL
// ran out while it was in flight (when the expiry pass had to leave it
// alone, S-40), the TTL heap gets it back so the next pass removes it.
func (p *Partition) returnToReadyLocked(off uint64, deadline, now int64) {
	p.makeReadyLocked(off)
	if deadline != 0 && deadline <= now {
		p.ttl.Push(due{deadline, off})
	}
}

// delayLocked holds a message out of delivery until at (unix ms).
func (p *Partition) delayLocked(off uint64, at int64) {
	p.delayed[off] = at
	p.delays.Push(due{at, off})
}

// releaseLocked ends a delivery's lease and returns its credit.
func (p *Partition) releaseLocked(inf *inflight) {
	delete(inf.sub.held, inf.tag)
	delete(p.inflight, inf.off)
	if inf.idx >= 0 {
		p.leases.Remove(inf.idx)
	}
}

// loadLocked returns a message's record bytes: the one just published is
// still in hand; anything else is read from the log.
func (p *Partition) loadLocked(off uint64) ([]byte, error) {
	if off == p.hotOff && p.hotData != nil {
		d := p.hotData
		p.hotData = nil
		return d, nil
	}
	r, err := p.log.Read(off)
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// dispatchLocked hands ready messages to subscriptions with credit until
// one of the two runs out. Expired messages met on the way are removed
// instead of delivered (S-40), delayed ones are set aside (S-38).
func (p *Partition) dispatchLocked() {
	if p.closed || len(p.subs) == 0 || p.brokenErr() != nil {
		return
	}
	now := p.m.nowMs()
	var lease int64
	for n := 0; p.creditLocked(); {
		if n == dispatchRound {
			p.continueDispatchLocked()
			break
		}
		off, fresh, ok := p.peekReadyLocked()
		if !ok {
			break
		}
		data, err := p.loadLocked(off)
		if err != nil {
			p.logFault("deliver", err)
			break
		}
		rec, err := decodeRecord(data)
		p.takeLocked(off, fresh)
		if err != nil {
			// Not something this engine wrote; it stays unsettled (and
			// is retried after a restart) rather than being dropped.
			p.m.log.Error("queue: undecodable record skipped", "queue", p.q.key.String(), "partition", p.index, "offset", off)
			continue
		}
		if rec.Deadline != 0 && rec.Deadline <= now {
			p.expireLocked(off, rec.Deadline, &rec)
			continue
		}
		if nb := rec.NotBefore; nb != 0 && int64(min(nb, 1<<62)) > now {
			p.delayLocked(off, int64(min(nb, 1<<62)))
			continue
		}
		if lease == 0 {
			lease = now + p.m.settings().InflightTTL.Milliseconds()
		}
		p.deliverLocked(p.nextSubLocked(), off, &rec, fresh, lease)
		n++
	}
	p.flushAutoAcksLocked()
}

// continueDispatchLocked finishes a long dispatch on another goroutine,
// after the lock has been released once.
func (p *Partition) continueDispatchLocked() {
	if p.redispatchQ {
		return
	}
	p.redispatchQ = true
	go func() {
		p.mu.Lock()
		p.redispatchQ = false
		p.dispatchLocked()
		p.finishLocked()
	}()
}

// deliverLocked hands one message to s.
func (p *Partition) deliverLocked(s *Subscription, off uint64, rec *record, fresh bool, lease int64) {
	retries := p.retries[off]
	h := rec.Headers
	if retries > 0 {
		h = append(h, wire.Header{Key: "fibril.retries", Value: strconv.FormatUint(uint64(retries), 10)})
	}
	d := &Delivery{
		Key:         p.q.key,
		Partition:   p.index,
		Offset:      off,
		Tag:         tagSeq.Add(1),
		Published:   rec.Published,
		Received:    rec.Received,
		ContentType: rec.ContentType,
		Headers:     h,
		Payload:     rec.Payload,
	}
	p.m.stats.delivered.Add(1)
	p.counts.delivered.Add(1)
	if !fresh || retries > 0 {
		p.m.stats.redelivered.Add(1)
	} else if rec.Received > 0 {
		p.m.deliverLatency.Observe(time.Duration(p.m.nowMs()-rec.Received) * time.Millisecond)
	}
	if s.opts.AutoAck {
		// S-53: settled right after the hand-off; the settle itself is
		// batched with the rest of this round (flushAutoAcksLocked).
		if !s.c.Deliver(d) {
			s.paused = true // the session's queue is full: wait for its Resume
		}
		p.autoAcked = append(p.autoAcked, off)
		p.goneLocked(off, rec.Deadline)
		return
	}
	inf := &inflight{off: off, tag: d.Tag, sub: s, lease: lease, deadline: rec.Deadline}
	s.held[d.Tag] = inf
	p.inflight[off] = inf
	p.leases.Push(inf)
	if !s.c.Deliver(d) {
		s.paused = true
	}
}

// flushAutoAcksLocked settles the auto-ack deliveries of this round.
func (p *Partition) flushAutoAcksLocked() {
	if len(p.autoAcked) == 0 {
		return
	}
	if err := p.settleLocked("auto-ack", p.autoAcked); err == nil {
		p.m.stats.acked.Add(uint64(len(p.autoAcked)))
	}
	p.autoAcked = p.autoAcked[:0]
}
