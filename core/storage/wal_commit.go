package storage

import "time"

// A partition's side of the write-ahead log (wal.go): whether a commit
// goes through it, handing the batches over, and their release.

// useWAL reports whether a commit of take goes through the WAL: only when
// it pays. A round costs a second write of every record (segment and WAL)
// and its checkpoints fsync the segment again later; against that it
// shares one fsync among every partition committing at the same time. A
// partition that commits alone — the only busy one — does better with its
// own fsync, as before the WAL (measured with every commit through the
// WAL, against the build before it: 0.85x publishing, 0.75x end to end).
// So a commit joins the WAL when at least two partitions committed within
// the last ~10 ms (WAL.shared), or when this partition's earlier WAL
// commits are not released yet (so that it keeps pipelining); else it
// fsyncs its segment.
func (p *Partition) useWAL(take []*batch) bool {
	if !p.fitsWAL(take) {
		return false
	}
	w := p.opts.WAL
	if w.shared(p) || w.always {
		return true
	}
	p.mu.Lock()
	pending := p.walPending > 0
	p.mu.Unlock()
	return pending
}

// commitWAL hands the batches of take, written to the segment, to the WAL:
// their signals and callbacks are released by the WAL round that makes
// them durable (walDone), on the round leader's goroutine, so that this
// committer goes on with the next records meanwhile. If no round is
// running, this committer leads one on its own goroutine first (no
// hand-off for a lone producer). Writer role.
func (p *Partition) commitWAL(take []*batch) error {
	lead, err := p.opts.WAL.enqueue(p, take, p.walWaiter(take))
	if err != nil {
		p.walReleased()
		return err
	}
	if lead {
		p.opts.WAL.lead(true)
	}
	return nil
}

// walWaiter returns what the commit of take waits for in a WAL round and
// counts it in walPending.
func (p *Partition) walWaiter(take []*batch) walWaiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.walWaiterLocked(take)
}

// walWaiterLocked is walWaiter with mu held.
func (p *Partition) walWaiterLocked(take []*batch) walWaiter {
	ww := walWaiter{p: p}
	for _, b := range take {
		ww.sigs = append(ww.sigs, b.sig)
		ww.cbs = append(ww.cbs, b.cbs...)
	}
	p.walPending++
	return ww
}

// takeForWAL is the WAL's leader taking p's pending records into the round
// it is about to write — what p's committer does in commitOnce when the
// commit goes through the WAL, without waking it: with many partitions
// each holding a few records per round, waking one committer per partition
// per round cost more CPU than the rest of the commit (enqueue offered p
// to the leader). It stages the records (lag.go) and encodes their entries
// into t in one critical section; a full lag is left to the committer
// (flushLagSoon), so that no segment write delays a round. Anything but
// such a plain commit (a Sync, Close, a roll, a batch too large for the
// WAL, a partition no longer sharing the WAL) is handed back to p's
// committer, and so are the records when another holds the writer role
// (it takes them before it lets go) or a checkpoint holds ckMu (the round
// would wait for its fsync). share: the WAL is shared now (WAL.shared).
//
// It reports whether it took records; then it keeps the writer role,
// which the leader gives back (wmu.Unlock) once the entries are in the
// round: a commit of p's next records by its committer must not reach the
// WAL before them (recovery replays a partition's entries in file order
// and a gap quarantines it). Leader only.
func (p *Partition) takeForWAL(t *walTake, share bool) (took bool) {
	if !p.wmu.TryLock() {
		p.handBack()
		return false
	}
	if !p.ckMu.TryLock() {
		// A checkpoint is fsyncing p's segment: the committer waits for
		// it, not the round.
		p.wmu.Unlock()
		p.handBack()
		return false
	}
	p.mu.Lock()
	p.walReady = false
	plain := (share || p.walPending > 0) && p.failErr == nil && !p.closing &&
		len(p.syncReqs) == 0 && !p.ivDue && !p.retainDue && p.fitsWAL(p.batches)
	for _, b := range p.batches {
		plain = plain && !b.newSeg
	}
	start, full := false, false
	switch {
	case p.pendRecs == 0:
	case !plain:
		start = p.kickLocked()
	default:
		took = true
		t.waiters = append(t.waiters, p.walWaiterLocked(p.batches))
		t.buf, t.ends = p.appendWALEntries(t.buf, t.ends, p.batches)
		recs := 0
		for _, b := range p.batches {
			recs += b.n
			full = p.stageLocked(b) || full
		}
		p.cur = nil
		p.pendRecs = 0
		p.lagAt = time.Now()
		p.retireLocked(append(p.take[:0], p.batches...), recs, true)
		if full {
			start = p.flushLagSoonLocked()
		}
	}
	p.mu.Unlock()
	p.ckMu.Unlock()
	if !took {
		p.wmu.Unlock()
	}
	if start {
		go p.commitLoop()
	}
	return took
}

// handBack gives p's pending records back to its committer.
func (p *Partition) handBack() {
	p.mu.Lock()
	p.walReady = false
	start := false
	if p.pendRecs > 0 {
		start = p.kickLocked()
	}
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
}

// walDone releases a commit the WAL made durable (or failed: err).
func (p *Partition) walDone(ww *walWaiter, err error) {
	if err != nil {
		err = p.fail(err)
	}
	for _, sig := range ww.sigs {
		sig.err = err
		close(sig.ch)
	}
	for _, cb := range ww.cbs {
		cb.fn(cb.off, err)
	}
	p.walReleased()
}

// walReleased counts one commit handed to the WAL as released (or never
// taken) and wakes awaitWAL when none is left.
func (p *Partition) walReleased() {
	p.mu.Lock()
	p.walPending--
	if p.walPending == 0 {
		p.walIdle.Broadcast()
	}
	p.mu.Unlock()
}

// awaitWAL waits until every commit handed to the WAL was released.
func (p *Partition) awaitWAL() {
	p.mu.Lock()
	for p.walPending > 0 {
		p.walIdle.Wait()
	}
	p.mu.Unlock()
}

// fitsWAL reports whether every batch of take fits in one WAL entry (a
// file of the WAL); a larger one is made durable by the segment's fsync.
func (p *Partition) fitsWAL(take []*batch) bool {
	for _, b := range take {
		if walEntryLen(p.walKey, b) > p.opts.WAL.maxEntry() {
			return false
		}
	}
	return true
}
