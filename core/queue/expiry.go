package queue

// The expiry worker: one pass per timer firing (partition.go onTimer)
// handles, in order, leases that ran out, delays that are over and TTL
// deadlines that passed. Timing is approximate (S-50): the timer is armed
// at the earliest known deadline, never further than ExpiryPollMin ahead.

// expireLeasesLocked returns every delivery whose lease ran out to Ready.
// The retry count is not touched (S-51) and the tag dies.
func (p *Partition) expireLeasesLocked(now int64) {
	for p.leases.Len() > 0 && p.leases.Peek().lease <= now {
		inf := p.leases.Peek()
		p.releaseLocked(inf)
		p.returnToReadyLocked(inf.off, inf.deadline, now)
	}
}

// releaseDelaysLocked makes delayed messages whose time has come ready.
func (p *Partition) releaseDelaysLocked(now int64) {
	for p.delays.Len() > 0 && p.delays.Peek().at <= now {
		e := p.delays.Pop()
		if at, ok := p.delayed[e.off]; ok && at == e.at {
			delete(p.delayed, e.off)
			p.makeReadyLocked(e.off)
		}
	}
	if p.delays.Len() > 2*len(p.delayed)+1024 {
		p.delays.Filter(func(e due) bool { at, ok := p.delayed[e.off]; return ok && at == e.at })
	}
}

// expiryPassLocked removes up to ExpiryBatchMax messages whose TTL
// deadline passed, following the DLQ policy with reason expired (S-40).
// A message in flight is left alone: when it comes back to Ready its
// deadline is pushed again (returnToReadyLocked), and dispatch never
// delivers an expired message anyway.
func (p *Partition) expiryPassLocked(now int64) {
	batch := p.m.settings().ExpiryBatchMax
	if batch <= 0 {
		batch = DefaultSettings().ExpiryBatchMax
	}
	for n := 0; n < batch && p.ttl.Len() > 0 && p.ttl.Peek().at <= now; {
		e := p.ttl.Pop()
		if p.inflight[e.off] != nil || p.pending[e.off] != nil || p.log.IsSettled(e.off) {
			continue
		}
		if _, ok := p.settling[e.off]; ok {
			continue
		}
		p.expireLocked(e.off, e.at, nil)
		n++
	}
	p.pruneTTLLocked()
}

// pruneTTLLocked drops the TTL entries of settled messages once they
// outnumber the live ones: entries are not removed when a message is
// acked, and an acked stream of messages with a long TTL must not hold
// memory until each deadline. Amortized O(1) per settle.
func (p *Partition) pruneTTLLocked() {
	if p.ttl.Len() > 2*p.ttlLive+4096 {
		p.ttl.Filter(func(e due) bool { return !p.log.IsSettled(e.off) })
	}
}
