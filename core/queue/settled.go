package queue

// SettledBelow reports whether every message at an offset below off is
// settled: acknowledged (or auto-acked), dead-lettered (its copy confirmed
// in the target), discarded after a terminal NACK or max_retries, expired
// (S-40), purged or removed. Offsets not published yet are not settled.
func (p *Partition) SettledBelow(off uint64) bool {
	if p.log == nil {
		return false // quarantined
	}
	return p.log.SettledFrontier() >= off
}

// settledWatch is one OnSettledBelow.
type settledWatch struct {
	off       uint64
	fn        func()
	cancelled bool // under the partition's mu
}

// OnSettledBelow calls fn once, on a goroutine of its own (never under
// the partition's lock, nor on the caller's goroutine), as soon as
// SettledBelow(off) holds — at once when it already does. fn is never
// started once the partition is closed (the engine shutting down, a
// Release, a delete or a ShrinkQueue) or the returned cancel was called;
// a closed partition's watches are dropped, so whoever needs them after a
// restart or a failover registers them again on the partition the engine
// opens then.
func (p *Partition) OnSettledBelow(off uint64, fn func()) (cancel func()) {
	w := &settledWatch{off: off, fn: fn}
	p.mu.Lock()
	if p.closed || p.log == nil {
		p.mu.Unlock()
		return func() {}
	}
	p.watches = append(p.watches, w)
	p.fireWatchesLocked()
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		w.cancelled = true
		p.dropWatchLocked(w)
	}
}

// fireWatchesLocked starts the watches whose offsets are now settled.
// finishLocked calls it after every state change while any is waiting.
func (p *Partition) fireWatchesLocked() {
	frontier := p.log.SettledFrontier()
	kept := p.watches[:0]
	for _, w := range p.watches {
		if frontier < w.off {
			kept = append(kept, w)
			continue
		}
		go p.runWatch(w)
	}
	clear(p.watches[len(kept):])
	p.watches = kept
}

// runWatch calls a watch's function unless the partition closed or the
// watch was cancelled since it fired.
func (p *Partition) runWatch(w *settledWatch) {
	p.mu.Lock()
	gone := p.closed || w.cancelled
	p.mu.Unlock()
	if !gone {
		w.fn()
	}
}

func (p *Partition) dropWatchLocked(w *settledWatch) {
	for i, x := range p.watches {
		if x == w {
			p.watches = append(p.watches[:i], p.watches[i+1:]...)
			return
		}
	}
}
