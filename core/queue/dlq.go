package queue

import (
	"errors"
	"strconv"
	"strings"

	"github.com/fibrilgo/fibril/core/wire"
)

// Dead-lettering (S-63…S-67). A dead letter is copied into its target
// queue, and the source is settled only once the copy is durable there: a
// crash in between duplicates the message, it never loses it.
//
// The copy is a publish into another partition, possibly this one, so it
// never runs under the source's lock: the decision is made under it (the
// message moves to pending), the copy is started after the lock is
// released (finishLocked → runDeadLetter), and the result comes back on the
// target's storage commit goroutine, which must not block and so only
// queues it; a short-lived goroutine (drainDeadLetters) then applies the
// results under the source's lock.

const (
	reasonExhausted = "retries_exhausted"
	reasonTerminal  = "terminal_nack"
	reasonExpired   = "expired"
)

// dlqPending is a message whose dead-letter copy is under way.
type dlqPending struct {
	deadline int64
	reason   string
}

// dlqJob is one dead-letter copy to make.
type dlqJob struct {
	off     uint64
	target  Key
	reason  string
	retries uint32
	at      int64   // dead_lettered_at_ms
	rec     *record // the message when already in hand, else read from the log
}

type dlqResult struct {
	off uint64
	ok  bool
}

// dlqTargetLocked resolves the queue's policy: a named queue, the
// broker-wide target (S-64), or nothing (discard; also policy "global"
// while no global target is set, S-65).
func (p *Partition) dlqTargetLocked() (Key, bool) {
	d, ok := p.q.cfg.Load().dlq.Get()
	if !ok {
		return Key{}, false
	}
	switch d.Kind {
	case wire.DLQNamed:
		return Key{Topic: d.Topic, Group: d.Group}, true
	case wire.DLQBrokerDLQ:
		if p.m.opts.GlobalDLQ != nil {
			return p.m.opts.GlobalDLQ()
		}
	}
	return Key{}, false
}

// deadLetterLocked removes a message that is neither ready nor in flight
// any more (the caller took it out) per the DLQ policy.
func (p *Partition) deadLetterLocked(off uint64, deadline int64, reason string, now int64, rec *record) {
	target, ok := p.dlqTargetLocked()
	if !ok {
		// If the settle fails the storage is fail-stop (or closing): the
		// message stays unsettled on disk and returns after a restart.
		if p.settleLocked("discard", []uint64{off}) == nil {
			p.goneLocked(off, deadline)
			p.m.stats.discarded.Add(1)
		}
		return
	}
	p.pending[off] = &dlqPending{deadline: deadline, reason: reason}
	p.m.dlqWG.Add(1)
	p.jobs = append(p.jobs, dlqJob{off: off, target: target, reason: reason, retries: p.retries[off], at: now, rec: rec})
}

// expireLocked removes a message whose TTL ran out while it was not in
// flight (S-40), with reason expired.
func (p *Partition) expireLocked(off uint64, deadline int64, rec *record) {
	delete(p.inReq, off) // its requeued-heap entry (if any) goes stale
	delete(p.delayed, off)
	p.m.stats.expired.Add(1)
	p.deadLetterLocked(off, deadline, reasonExpired, p.m.nowMs(), rec)
}

// runDeadLetter makes one copy. It runs without any partition lock held.
func (p *Partition) runDeadLetter(j dlqJob) {
	rec := j.rec
	if rec == nil {
		r, err := p.log.Read(j.off)
		if err != nil {
			p.logFault("dead-letter read", err)
			p.deadLetterDone(j.off, false)
			return
		}
		dec, err := decodeRecord(r.Data)
		if err != nil {
			p.m.log.Error("queue: dead-letter: undecodable record", "queue", p.q.key.String(), "partition", p.index, "offset", j.off)
			p.deadLetterDone(j.off, false)
			return
		}
		rec = &dec
	}
	tq, tp, err := p.m.deadLetterTarget(j.target)
	remote := errors.Is(err, ErrNoLocalPartition) && p.m.opts.RemoteDeadLetter != nil
	if err != nil && !remote {
		p.m.log.Error("queue: dead-letter target unusable", "queue", p.q.key.String(), "target", j.target.String(), "err", err)
		p.deadLetterDone(j.off, false)
		return
	}
	src := p.q.key
	h := make(wire.Headers, 0, len(rec.Headers)+6)
	for _, e := range rec.Headers {
		if !strings.HasPrefix(e.Key, "stroma.dlq.") { // a dead letter of a dead letter gets fresh ones
			h = append(h, e)
		}
	}
	h = append(h, wire.Header{Key: "stroma.dlq.source_topic", Value: src.Topic})
	if g, ok := src.Group.Get(); ok {
		h = append(h, wire.Header{Key: "stroma.dlq.source_group", Value: g})
	}
	h = append(h,
		wire.Header{Key: "stroma.dlq.source_offset", Value: strconv.FormatUint(j.off, 10)},
		wire.Header{Key: "stroma.dlq.retry_count", Value: strconv.FormatUint(uint64(j.retries), 10)},
		wire.Header{Key: "stroma.dlq.reason", Value: j.reason},
		wire.Header{Key: "stroma.dlq.dead_lettered_at_ms", Value: strconv.FormatInt(j.at, 10)},
	)
	cp := record{
		ContentType: rec.ContentType,
		Headers:     h,
		Published:   rec.Published,
		Received:    j.at,
		Payload:     rec.Payload,
	}
	if remote {
		// Another broker owns every partition of the target: it stores
		// the copy (AppendDeadLetter there) and answers when it is
		// confirmed.
		p.m.opts.RemoteDeadLetter(j.target, &Message{ContentType: cp.ContentType, Headers: cp.Headers, Published: cp.Published,
			Received: cp.Received, Payload: cp.Payload}, func(ok bool) { p.deadLetterDone(j.off, ok) })
		return
	}
	if ttl, ok := tq.cfg.Load().defaultTTL.Get(); ok {
		cp.Deadline = ttlDeadline(j.at, ttl)
	}
	err = tp.append(&cp, func(_ uint64, err error) { p.deadLetterDone(j.off, err == nil) }, false)
	if err != nil {
		p.m.log.Error("queue: dead-letter copy refused", "queue", p.q.key.String(), "target", j.target.String(), "err", err)
		p.deadLetterDone(j.off, false)
	}
}

// ErrNoLocalPartition is what Options.DeadLetterPartition wraps when this
// broker owns no partition of the target: the copy then goes to the
// target's owner through Options.RemoteDeadLetter.
var ErrNoLocalPartition = errors.New("no partition of the dead-letter target is owned here")

// AppendDeadLetter stores a dead-letter copy that another broker made
// (Options.RemoteDeadLetter there): the message keeps its stroma.dlq.*
// headers, which a client's publish may not carry, and gets the queue's
// default TTL as a local copy would. done runs once it is confirmed
// (under the partition's gate, like any publish).
func (p *Partition) AppendDeadLetter(msg *Message, done func(offset uint64, err error)) error {
	if err := p.brokenErr(); err != nil {
		return err
	}
	cp := record{ContentType: msg.ContentType, Headers: msg.Headers, Published: msg.Published, Received: msg.Received, Payload: msg.Payload}
	if ttl, ok := p.q.cfg.Load().defaultTTL.Get(); ok {
		cp.Deadline = ttlDeadline(msg.Received, ttl)
	}
	return p.append(&cp, done, false)
}

// deadLetterDone records a copy's outcome. It runs on a storage commit
// goroutine (or the job's own), so it only queues the result.
func (p *Partition) deadLetterDone(off uint64, ok bool) {
	p.dlqMu.Lock()
	p.dlqResults = append(p.dlqResults, dlqResult{off, ok})
	start := !p.dlqDrain
	p.dlqDrain = true
	p.dlqMu.Unlock()
	if start {
		go p.drainDeadLetters()
	}
}

// drainDeadLetters applies copy outcomes: a durable copy settles the
// source; a failed one puts the message back.
func (p *Partition) drainDeadLetters() {
	for {
		p.dlqMu.Lock()
		res := p.dlqResults
		p.dlqResults = nil
		if len(res) == 0 {
			p.dlqDrain = false
			p.dlqMu.Unlock()
			return
		}
		p.dlqMu.Unlock()

		p.mu.Lock()
		var offs []uint64
		for _, r := range res {
			if r.ok {
				offs = append(offs, r.off)
			}
		}
		settled := len(offs) == 0 || p.settleLocked("dead-letter settle", offs) == nil
		now := p.m.nowMs()
		for _, r := range res {
			pd := p.pending[r.off]
			delete(p.pending, r.off)
			if pd == nil {
				continue
			}
			if r.ok && settled {
				p.goneLocked(r.off, pd.deadline)
				p.m.stats.deadLettered.Add(1)
				p.counts.deadLettered.Add(1)
				continue
			}
			if pd.reason == reasonExpired {
				// Never deliver it (it expired); try again a little later
				// rather than spinning on a target that refuses.
				retry := now + 1000
				p.delayLocked(r.off, retry)
				p.ttl.Push(due{retry, r.off})
			} else {
				p.makeReadyLocked(r.off)
			}
		}
		p.dispatchLocked()
		p.finishLocked()
		for range res {
			p.m.dlqWG.Done()
		}
	}
}

// deadLetterTarget picks the queue and partition a dead letter goes to:
// through Options.DeadLetterPartition in a cluster (a partition this node
// owns), else round-robin over the target's partitions, creating the
// target when needed (standalone).
func (m *Manager) deadLetterTarget(target Key) (*queue, *Partition, error) {
	pick := m.opts.DeadLetterPartition
	tq, err := m.lookupOrCreate(target, pick == nil)
	if err != nil && pick == nil {
		return nil, nil, err
	}
	if pick == nil {
		tp, err := m.part(tq, uint32(m.dlqRR.Add(1)%uint64(tq.table().count())))
		return tq, tp, err
	}
	n, err := pick(target)
	if err != nil {
		return nil, nil, err
	}
	if tq, err = m.lookupOrCreate(target, false); err != nil {
		return nil, nil, err
	}
	tp, err := m.part(tq, n)
	return tq, tp, err
}
