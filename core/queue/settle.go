package queue

import (
	"errors"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// Ack settles deliveries (S-57). The settlement is written to the state
// journal before the call returns (write-ahead: after a process crash an
// acked message never comes back), and only then does the credit return
// (S-46). Unknown, stale or already settled tags are ignored silently
// (S-61), and so is every ack on an auto-ack subscription (S-53).
//
// The journal write (a syscall) is made without the partition lock, so
// publishers and other consumers of the partition do not wait for it:
// the deliveries are first moved out of flight into settling, where no
// lease expiry, Close or expiry pass can touch them.
func (s *Subscription) Ack(tags ...uint64) {
	p := s.p
	p.mu.Lock()
	if s.opts.AutoAck || s.closed || p.log == nil {
		p.mu.Unlock()
		return
	}
	var buf [8]*inflight
	infs := s.collectLocked(tags, buf[:0])
	if len(infs) == 0 {
		p.mu.Unlock()
		return
	}
	var obuf [8]uint64
	offs := obuf[:0]
	for _, inf := range infs {
		offs = append(offs, inf.off)
		p.releaseLocked(inf)
		p.settling[inf.off] = inf.deadline
	}
	s.settling += len(offs) // their credit returns once the settle is accepted
	p.mu.Unlock()

	err := p.log.Settle(offs...)

	p.mu.Lock()
	s.settling -= len(offs)
	p.journalDirty = true
	for _, off := range offs {
		deadline := p.settling[off]
		delete(p.settling, off)
		if err == nil {
			p.goneLocked(off, deadline)
		} else {
			// Not durable, so not applied: the message is delivered
			// again (at least once).
			p.returnToReadyLocked(off, deadline, p.m.nowMs())
		}
	}
	if err != nil {
		p.logFault("ack", err)
	} else {
		p.m.stats.acked.Add(uint64(len(offs)))
	}
	p.dispatchLocked()
	p.finishLocked()
}

// Nack settles deliveries negatively (S-58, docs/protocol.md#subscriptions):
//   - requeue, no not_before: retry count + 1, Ready again at once;
//   - requeue with not_before: the same, held until that unix-ms time;
//   - a retry of a message whose count already equals max_retries
//     dead-letters it instead (reason retries_exhausted, S-60);
//   - requeue=false: dead-lettered with reason terminal_nack, or
//     discarded without a DLQ policy.
//
// The new retry counts (and delays) are journaled before they take effect.
// not_before without requeue is refused by the session (S-59, no reply:
// docs/protocol.md#answers); should it arrive here anyway nothing is applied.
func (s *Subscription) Nack(tags []uint64, requeue bool, notBefore wire.Option[uint64]) {
	if !requeue && notBefore.Present {
		return
	}
	p := s.p
	p.mu.Lock()
	if s.opts.AutoAck || s.closed || p.closed || p.log == nil {
		p.mu.Unlock()
		return
	}
	var buf [8]*inflight
	infs := s.collectLocked(tags, buf[:0])
	if len(infs) == 0 {
		p.mu.Unlock()
		return
	}
	cfg := p.q.cfg.Load()
	now := p.m.nowMs()
	var at int64
	if nb, ok := notBefore.Get(); ok && nb > uint64(now) {
		at = int64(min(nb, 1<<62))
	}
	var retry []stateRec
	var dead []*inflight
	for _, inf := range infs {
		r := p.retries[inf.off]
		if requeue && r < cfg.maxRetries {
			retry = append(retry, stateRec{off: inf.off, retries: r + 1, at: at})
		} else {
			dead = append(dead, inf)
		}
	}
	if len(retry) > 0 {
		if err := p.appendStateLocked(encodeState(stateRequeue, retry)); err != nil {
			p.logFault("nack", err)
			retry = nil // not journaled, not applied: the leases run out instead
		}
	}
	for _, r := range retry {
		inf := p.inflight[r.off]
		p.releaseLocked(inf)
		p.retries[r.off] = r.retries
		if r.at != 0 {
			p.delayLocked(r.off, r.at)
			if inf.deadline != 0 && inf.deadline <= now {
				p.ttl.Push(due{inf.deadline, r.off})
			}
		} else {
			p.returnToReadyLocked(r.off, inf.deadline, now)
		}
	}
	for _, inf := range dead {
		reason := reasonTerminal
		if requeue {
			reason = reasonExhausted
		}
		p.releaseLocked(inf)
		p.deadLetterLocked(inf.off, inf.deadline, reason, now, nil)
	}
	p.dispatchLocked()
	p.finishLocked()
}

// collectLocked returns the subscription's deliveries named by tags, each
// once, skipping unknown tags.
func (s *Subscription) collectLocked(tags []uint64, out []*inflight) []*inflight {
	if len(tags) > 16 {
		seen := make(map[*inflight]struct{}, len(tags))
		for _, t := range tags {
			if inf := s.held[t]; inf != nil {
				if _, dup := seen[inf]; !dup {
					seen[inf] = struct{}{}
					out = append(out, inf)
				}
			}
		}
		return out
	}
	for _, t := range tags {
		inf := s.held[t]
		if inf == nil {
			continue
		}
		dup := false
		for _, x := range out {
			if x == inf {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, inf)
		}
	}
	return out
}

// settleLocked settles offsets in storage (one journal entry for all).
func (p *Partition) settleLocked(op string, offs []uint64) error {
	err := p.log.Settle(offs...)
	p.journalDirty = true
	if err != nil && !errors.Is(err, storage.ErrClosed) {
		p.logFault(op, err)
	}
	return err
}

// goneLocked forgets a message that was settled (acked, auto-acked,
// discarded, or dead-lettered and then settled).
func (p *Partition) goneLocked(off uint64, deadline int64) {
	if p.unsettled > 0 {
		p.unsettled--
	}
	if deadline != 0 {
		p.ttlLive--
		p.pruneTTLLocked()
	}
	delete(p.retries, off)
}
