package storage

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

// Group commit.
//
// Appenders encode their record straight into the current batch buffer
// under Partition.mu (no per-record allocation once buffers are warm) and
// wait on the batch's signal; one committer goroutine takes every pending
// batch at once, writes each with a single WriteAt, and — under
// FsyncAlways — fsyncs the log once for all of them before releasing every
// waiter and calling AppendAsync callbacks in offset order. Settle and
// AppendState write their journal entry themselves (so it reaches the OS
// before they return) and leave the journal's fsync to the committer.
//
// Journal fsync under FsyncAlways. A commit that carries records fsyncs
// only the log: that is all its confirms need. A dirty journal (jSyncDue,
// since jDirtyAt) is fsynced by the committer separately, after the
// waiters of the commit in hand were released: once the committer has had
// no work for committerLinger (it is about to exit), or when the journal
// has been dirty for journalSyncDelay, whichever comes first; and with
// every Sync and Close. Retention fsyncs the journal itself before it
// deletes a segment whose settlement it relies on (retention.go). So in a
// publish/ack/publish loop the ack of record n no longer adds a second
// fsync to the commit of record n+1.
//
// Under FsyncAlways the committer also waits briefly before taking a batch
// when fewer records are pending than it committed last time ("gather"):
// right after a commit releases N appenders, the first few of them would
// otherwise be committed alone and pay a full fsync each. The wait is
// bounded by a quarter of the recent fsync time (and 250µs), and a single
// appender never waits.
//
// Lifecycle. The committer goroutine exists only while there is work, and
// for committerLinger after it: an idle partition owns no goroutine and no
// running timer. Work is recorded under mu — records pending (pendRecs),
// Sync requests, a retention pass (retainDue), an interval fsync whose time
// has come (ivDue), Close, and under FsyncAlways a journal write awaiting
// its fsync (jSyncDue) — and in the same critical section kickLocked either
// claims the committer role (no committer is running: the claimer starts
// the goroutine right after unlocking, so the goroutine creation is not
// inside the critical section; a timer callback, already on its own
// goroutine, simply runs the committer loop itself) or, if the running
// committer is waiting for work, wakes it through p.wake.
// The committer loops while work is due; with none it waits on p.wake and
// a timer (no busy wait) until committerLinger has passed since its last
// commit, fsyncs a dirty journal (FsyncAlways), and then, finding nothing
// under mu, clears running and exits. Since both the producer's check and
// the committer's final check happen under mu, a wake-up is never lost and
// there are never two committers. The committer that handles Close closes
// loopDone and leaves running set, so none starts again. Keeping the
// committer for committerLinger spares a goroutine start and exit per
// record when records come one at a time.
//
// FsyncInterval keeps its promise with a one-shot timer instead of a
// ticker: whoever leaves the log or journal dirty (a commit, a direct
// append, Settle/AppendState) arms it unless it is armed already; when it
// fires it marks ivDue and becomes the committer, which fsyncs and re-arms
// only if something was written meanwhile. Retention.MaxAge likewise arms
// a timer after each retention pass for the moment the oldest sealed
// segment expires, and only while there is a sealed segment.

const (
	// committerLinger is how long an idle committer waits for more work
	// before it exits. Long enough to span the gap between the records of
	// a one-at-a-time producer (a network round trip), short enough that
	// an idle partition soon owns no goroutine again.
	committerLinger = 2 * time.Millisecond
	// journalSyncDelay bounds, under FsyncAlways, how long a journal entry
	// (settlement, engine state) may stay written but not fsynced while
	// the committer is busy with records: it is the window of
	// acknowledgements a power loss may forget (those messages are
	// delivered again). It does not affect confirmed records.
	journalSyncDelay = 10 * time.Millisecond
)

// batch is a run of encoded records bound for one segment.
type batch struct {
	first  uint64   // offset of the first record
	n      int      // records in buf
	newSeg bool     // the batch starts a new segment with base first
	buf    []byte   // encoded records
	pos    []uint32 // start of each record in buf
	cbs    []asyncCB
	sig    *commitSignal
}

// span returns where record i of b starts and ends in b.buf.
func (b *batch) span(i int) (start, end int) {
	start, end = int(b.pos[i]), len(b.buf)
	if i+1 < b.n {
		end = int(b.pos[i+1])
	}
	return start, end
}

// bytesIn returns the bytes b's records in [from, to) take.
func (b *batch) bytesIn(from, to uint64) int {
	lo, hi := max(from, b.first), min(to, b.first+uint64(b.n))
	if b.n == 0 || lo >= hi {
		return 0
	}
	start, _ := b.span(int(lo - b.first))
	_, end := b.span(int(hi - 1 - b.first))
	return end - start
}

// record returns a copy of the record at offset if b holds it.
func (b *batch) record(offset uint64, arena []byte) (Record, []byte, bool) {
	if b.n == 0 || offset < b.first || offset >= b.first+uint64(b.n) {
		return Record{}, arena, false
	}
	start, end := b.span(int(offset - b.first))
	h := decodeHeader(b.buf[start:])
	data, arena := copyData(arena, b.buf[start+recHeaderLen:end])
	return Record{Offset: offset, Timestamp: h.ts, Data: data}, arena, true
}

// copyData copies d to the end of arena and returns the copy (capped, so
// that appending to it never reaches the next one) and the arena: Scan
// copies many records with one allocation. A nil arena gives d a copy of
// its own.
func copyData(arena, d []byte) ([]byte, []byte) {
	if arena == nil {
		return append([]byte(nil), d...), nil
	}
	if cap(arena)-len(arena) < len(d) {
		arena = make([]byte, 0, max(len(d), 64<<10))
	}
	n := len(arena)
	arena = append(arena, d...)
	return arena[n:len(arena):len(arena)], arena
}

// noteWritten records in s's bookkeeping (size, index, timestamps) that
// b's records were written to s starting at file position at. Caller holds
// Partition.mu.
func (b *batch) noteWritten(s *segment, at int64, every int) {
	for i := range b.n {
		start, end := b.span(i)
		s.noteRecord(b.first+uint64(i), decodeHeader(b.buf[start:]).ts, at+int64(start), end-start, every)
	}
}

type asyncCB struct {
	off uint64
	fn  func(uint64, error)
}

// commitSignal is allocated per batch (not recycled with the batch), so a
// waiter can read err after the batch itself was reused.
type commitSignal struct {
	ch  chan struct{}
	err error
}

func (p *Partition) newBatchLocked(first uint64, newSeg bool) *batch {
	var b *batch
	if n := len(p.free); n > 0 {
		b, p.free = p.free[n-1], p.free[:n-1]
	} else {
		b = &batch{}
	}
	b.first, b.n, b.newSeg = first, 0, newSeg
	b.buf, b.pos, b.cbs = b.buf[:0], b.pos[:0], b.cbs[:0]
	b.sig = &commitSignal{ch: make(chan struct{})}
	p.batches = append(p.batches, b)
	p.cur = b
	return b
}

// enqueue assigns the next offset and encodes the record into the current
// batch. It blocks while MaxPendingBytes are waiting to be written. With
// deferKick it neither wakes a waiting committer nor starts one: the
// caller calls CommitIfIdle next (see AppendAsyncDeferred).
func (p *Partition) enqueue(data []byte, ts int64, at uint64, cb func(uint64, error), deferKick bool) (uint64, *commitSignal, error) {
	if len(data) > MaxRecordBytes {
		return 0, nil, ErrTooLarge
	}
	n := recHeaderLen + len(data)
	p.mu.Lock()
	for p.pendBytes > 0 && p.pendBytes+n > p.opts.MaxPendingBytes && p.errLocked() == nil {
		p.spaceWaiters++
		p.space.Wait()
		p.spaceWaiters--
	}
	if err := p.errLocked(); err != nil {
		p.mu.Unlock()
		return 0, nil, err
	}
	off := p.next
	if at != anyOffset && at != off {
		p.mu.Unlock()
		return 0, nil, &OffsetMismatchError{Want: at, Next: off}
	}
	b := p.cur
	if p.actRecs > 0 && p.actSize+int64(n) > p.opts.SegmentMaxBytes {
		b = p.newBatchLocked(off, true)
		p.actSize, p.actRecs = segHeaderLen, 0
	} else if b == nil {
		b = p.newBatchLocked(off, false)
	}
	b.pos = append(b.pos, uint32(len(b.buf)))
	b.buf = appendRecord(b.buf, off, ts, data)
	b.n++
	if cb != nil {
		b.cbs = append(b.cbs, asyncCB{off, cb})
	}
	p.next++
	p.actSize += int64(n)
	p.actRecs++
	p.pendBytes += n
	p.pendRecs++
	start, lead := false, false
	switch {
	case p.walReady:
		// The WAL's leader takes these records with the ones before.
	case p.lastWAL && p.opts.WAL.offer(p, &lead):
		p.walReady = true
	case !deferKick:
		start = p.kickLocked()
	}
	sig := b.sig
	p.mu.Unlock()
	p.grew.fire()
	if start {
		go p.commitLoop()
	}
	if lead {
		go p.opts.WAL.lead(false)
	}
	return off, sig, nil
}

// kickLocked makes sure a committer will see the work the caller has just
// recorded. If a committer is running it will (it re-checks for work under
// mu before it waits or exits): kickLocked wakes it if it is waiting and
// returns false. Otherwise it marks one running and returns true, and the
// caller must start it with go p.commitLoop() once it has released mu.
// Caller holds mu.
func (p *Partition) kickLocked() bool {
	if !p.running {
		p.running = true
		return true
	}
	if p.waiting {
		p.waiting = false
		select {
		case p.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	return false
}

// workLocked reports whether the committer has something to do now (a
// dirty journal under FsyncAlways waits; see journalDueLocked). Caller
// holds mu.
func (p *Partition) workLocked() bool {
	return p.pendRecs > 0 || len(p.syncReqs) > 0 || p.ivDue || p.retainDue || p.lagDue || p.closing
}

// journalDueLocked reports whether the journal's fsync (FsyncAlways) can
// wait no longer. Caller holds mu.
func (p *Partition) journalDueLocked(now time.Time) bool {
	return p.jSyncDue && now.Sub(p.jDirtyAt) >= journalSyncDelay
}

// commitLoop is the committer goroutine: it commits while work is due,
// lingers for committerLinger without work, then exits (see "Lifecycle"
// above).
func (p *Partition) commitLoop() {
	p.mu.Lock()
	p.idleFrom = time.Now()
	p.mu.Unlock()
	for {
		p.mu.Lock()
		p.waiting = false
		now := time.Now()
		jsync := p.journalDueLocked(now)
		if !jsync && !p.workLocked() {
			// idleFrom also moves with inline commits (CommitIfIdle): a
			// committer kept for the journal lingers while they go on.
			until := p.idleFrom.Add(committerLinger)
			if j := p.jDirtyAt.Add(journalSyncDelay); p.jSyncDue && j.Before(until) {
				until = j
			}
			if wait := until.Sub(now); wait > 0 {
				p.waiting = true
				p.mu.Unlock()
				p.sleep(wait)
				continue
			}
			if p.lag.n > 0 {
				// Going idle: write what is staged (lag.go).
				p.mu.Unlock()
				p.wmu.Lock()
				p.flushLag() // a failure fails the partition; the loop sees it
				p.wmu.Unlock()
				continue
			}
			if !p.jSyncDue {
				p.running = false
				p.mu.Unlock()
				return
			}
			jsync = true // quiet: fsync the journal before exiting
		}
		pend := p.pendRecs > 0
		p.mu.Unlock()
		if pend && p.walKey != "" {
			if ch := p.opts.WAL.queued(p); ch != nil {
				<-ch
			}
		}
		if pend && p.opts.Fsync == FsyncAlways {
			p.gather()
		}
		p.wmu.Lock()
		closing := p.commitOnce(jsync, false)
		p.wmu.Unlock()
		if closing {
			close(p.loopDone)
			return
		}
		p.mu.Lock()
		p.idleFrom = time.Now()
		p.mu.Unlock()
	}
}

// CommitIfIdle commits the records pending now on the calling goroutine
// when no committer is busy, and reports whether it did. It is meant for
// an appender that has nothing else to do until its records are durable —
// a connection's reader that has drained its input — and saves the
// hand-off to the committer goroutine: on a small VM, waking a goroutine
// and having another core pick it up costs tens of microseconds, a large
// part of a one-message-at-a-time round trip.
//
// The inline pass is one commit of records only: it writes every pending
// batch, fsyncs the log as the policy demands and releases the waiters and
// AppendAsync callbacks (of every appender, not only the caller's), on the
// caller. Everything else (Sync, Close, retention, interval and journal
// fsyncs) stays with the committer goroutine, and so does the work when a
// committer is busy, when another inline pass runs, or when the last
// commit carried more than one record (appenders are pipelining: the
// committer overlaps their next batch with the fsync of this one, which a
// caller that stops reading for the fsync would not). In those cases
// CommitIfIdle only makes sure a committer takes the records (it kicks
// one, which AppendAsyncDeferred did not) and returns false.
//
// Appends made while an inline pass runs are taken by the committer
// goroutine after it (the writer role, wmu, orders the two); the inline
// caller kicks one when it finds work left. A lingering committer is left
// asleep, its linger counted from the inline commit, so one that is kept
// for the journal fsync does not exit between inline commits.
func (p *Partition) CommitIfIdle() bool {
	p.mu.Lock()
	if p.pendRecs == 0 || p.inline || p.walReady {
		// Nothing to do, or the running inline pass re-checks for work
		// when it ends, or the WAL's leader takes the records.
		p.mu.Unlock()
		return false
	}
	if (p.running && !p.waiting) || p.lastTake > 1 || len(p.syncReqs) > 0 || p.ivDue || p.retainDue || p.closing || p.failErr != nil {
		start := p.kickLocked()
		p.mu.Unlock()
		if start {
			go p.commitLoop()
		}
		return false
	}
	p.inline = true
	p.mu.Unlock()

	p.wmu.Lock()
	p.commitOnce(false, true)
	p.wmu.Unlock()

	p.mu.Lock()
	p.inline = false
	p.idleFrom = time.Now()
	start := false
	if p.workLocked() {
		start = p.kickLocked()
	}
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
	return true
}

// sleep blocks until kickLocked wakes the committer or d has passed. Only
// the committer calls it (there is one at a time), so the timer is its own.
func (p *Partition) sleep(d time.Duration) {
	if p.linger == nil {
		p.linger = time.NewTimer(d)
	} else {
		p.linger.Reset(d)
	}
	select {
	case <-p.wake:
	case <-p.linger.C:
	}
	p.linger.Stop()
}

// gather waits (bounded) until as many records are pending as the last
// commit carried, at most a quarter of the recent fsync time. See the
// comment at the top of the file.
func (p *Partition) gather() {
	p.mu.Lock()
	target := p.lastTake
	if target <= 1 || p.lastWAL || p.pendRecs == 0 || p.pendRecs >= target || p.closing || len(p.syncReqs) > 0 || p.failErr != nil {
		p.mu.Unlock()
		return
	}
	d := min(p.syncDur/4, 250*time.Microsecond)
	p.mu.Unlock()
	// Yield rather than sleep: Go timers are often ~1ms coarse, longer than
	// the whole wait should be. Yielding also lets the just-released
	// appenders run on this core (the machine may have only two).
	for t0 := time.Now(); time.Since(t0) < d; {
		runtime.Gosched()
		p.mu.Lock()
		n, stop := p.pendRecs, p.closing || len(p.syncReqs) > 0
		p.mu.Unlock()
		if n >= target || stop {
			return
		}
	}
}

// commitOnce writes every pending batch, fsyncs as the policy demands,
// releases waiters, fsyncs the journal when jsync (FsyncAlways: see the top
// of the file) or when a Sync, Close or interval fsync demands it, and runs
// retention when due. It reports whether the partition is closing (the
// loop then exits). Every work item it takes is cleared here, under mu,
// before it is acted on, so work recorded later is seen by workLocked.
//
// An inline commit (CommitIfIdle) takes the pending records only and
// leaves every other work item to the committer goroutine.
func (p *Partition) commitOnce(jsync, inline bool) bool {
	p.mu.Lock()
	take := append(p.take[:0], p.batches...)
	p.cur = nil
	p.pendRecs = 0
	err := p.failErr
	var reqs []chan error
	closing, retain, interval := false, false, false
	if !inline {
		reqs = p.syncReqs
		p.syncReqs = nil
		closing = p.closing
		retain = p.retainDue
		p.retainDue = false
		interval = p.ivDue
		p.ivDue = false
	}
	// Everything but a records-only FsyncAlways commit covers the journal.
	jsync = jsync || len(reqs) > 0 || closing || interval
	if jsync {
		p.jSyncDue = false
	}
	lagDue := p.lagDue && !inline
	if lagDue {
		p.lagDue = false
	}
	p.mu.Unlock()

	if err == nil && lagDue {
		err = p.flushLag() // a failure has failed the partition
	}

	// Through the WAL when other partitions commit at the same time (see
	// useWAL); a committer then stages the records for a later segment
	// write (lag.go); anything else writes them now, after what is staged.
	viaWAL := err == nil && len(take) > 0 && p.walKey != "" && len(reqs) == 0 && !closing && p.useWAL(take)
	if err == nil && len(take) > 0 {
		staged := viaWAL && !inline
		var werr error
		if staged {
			werr = p.stageBatches(take)
		} else if werr = p.flushLag(); werr == nil {
			werr = p.writeBatches(take)
		}
		if werr != nil {
			err = p.fail(werr)
		}
	}
	if err == nil && closing {
		// A cleanly closed log keeps no reserved space (the sync below
		// covers the truncation).
		if terr := p.trimReserve(p.act); terr != nil {
			err = p.fail(terr)
		}
	}
	if err != nil {
		viaWAL = false // released below, with the error
	}
	if err == nil {
		// The log: what the confirms of this commit need — through the
		// WAL (one fsync shared with the other partitions committing
		// now), or by an fsync of the segment.
		switch {
		case viaWAL:
			if werr := p.commitWAL(take); werr != nil {
				err = p.fail(werr)
				viaWAL = false // released below, with the error
			}
		case p.logDirty && (len(reqs) > 0 || closing || interval || (p.opts.Fsync == FsyncAlways && len(take) > 0)):
			if serr := p.syncLog(); serr != nil {
				err = p.fail(serr)
			}
		}
	}

	recs := 0
	for _, b := range take {
		recs += b.n
	}
	if !viaWAL && len(take) > 0 {
		// Confirms go out in offset order: commits handed to the WAL
		// earlier are released first (walDone).
		p.awaitWAL()
		for _, b := range take {
			b.sig.err = err
			close(b.sig.ch)
			for _, cb := range b.cbs {
				cb.fn(cb.off, err)
			}
		}
	}

	// The journal, after the records' waiters were released: its fsync
	// delays no confirm of this commit.
	if err == nil && jsync {
		if serr := p.j.sync(p.first.Load()); serr != nil {
			err = p.fail(serr)
		}
	}
	if err == nil && closing {
		if serr := p.settleSlots(); serr != nil {
			err = p.fail(serr)
		}
	}
	if err == nil && closing {
		p.ckMu.Lock()
		p.ckDone = true // everything is durable in the partition's own files
		p.ckMu.Unlock()
	}
	// Whatever is still dirty (written without an fsync in this commit, or
	// journal writes racing with it) gets its interval fsync scheduled. A
	// journal write after the dirty check arms the timer itself
	// (noteJournal).
	if err == nil && p.opts.Fsync == FsyncInterval && (p.logDirty || p.j.dirty()) {
		p.mu.Lock()
		p.armIntervalLocked()
		p.mu.Unlock()
	}
	for _, r := range reqs {
		r <- err
	}

	p.mu.Lock()
	p.retireLocked(take, recs, viaWAL)
	if err != nil { // failed: nothing will be written any more
		p.pendBytes = 0
		p.space.Broadcast()
	}
	p.mu.Unlock()

	if err == nil && retain && !closing {
		p.startRetention()
	}
	if closing {
		if err == nil {
			p.mu.Lock()
			act := p.segs[len(p.segs)-1]
			ents := append([]idxEntry(nil), act.index...)
			p.mu.Unlock()
			if ierr := writeIndexFile(p.fs, act.idxPath, act.base, ents); ierr != nil {
				p.log.Warn("storage: cannot write index", "file", act.idxPath, "err", ierr)
			}
		}
		return true
	}
	return false
}

// retireLocked drops the batches of a commit (take, the oldest pending
// ones) from p.batches, recycles their buffers and notes what the commit
// carried (gather, CommitIfIdle, and whether the next records go to the
// WAL's leader: enqueue). Caller holds mu and the writer role.
func (p *Partition) retireLocked(take []*batch, recs int, viaWAL bool) {
	p.batches = p.batches[:copy(p.batches, p.batches[len(take):])]
	for i, b := range take {
		if cap(b.buf) <= 4<<20 && len(p.free) < 4 {
			b.sig = nil
			p.free = append(p.free, b)
		}
		take[i] = nil
	}
	p.take = take[:0]
	if p.opts.Fsync == FsyncAlways && len(take) > 0 {
		p.lastTake = recs
		p.lastWAL = viaWAL
	}
}

// writeBatches writes each batch with one WriteAt (rolling to a new segment
// first when the batch starts one) and publishes the new file extents.
func (p *Partition) writeBatches(take []*batch) error {
	every := p.opts.IndexEveryBytes
	for _, b := range take {
		if b.newSeg {
			if err := p.roll(b.first); err != nil {
				return err
			}
		}
		act := p.act
		at := act.size // only the committer changes size
		if err := p.reserve(act, at+int64(len(b.buf))); err != nil {
			return err
		}
		if _, err := writeFile(act.f, b.buf, at); err != nil {
			return fmt.Errorf("write %s at %d: %w", act.path, at, err)
		}
		statAppends.Add(uint64(b.n))
		p.logDirty = true
		p.mu.Lock()
		b.noteWritten(act, at, every)
		p.written = b.first + uint64(b.n)
		p.pendBytes -= len(b.buf)
		if p.spaceWaiters > 0 {
			p.space.Broadcast()
		}
		p.mu.Unlock()
	}
	return nil
}

// roll seals the active segment and starts a new one at base. The sealed
// segment is fsynced before the new file is created, under every policy:
// then a newer segment on disk always implies a complete older one, and
// recovery may treat any damage in an older segment as corruption.
func (p *Partition) roll(base uint64) error {
	if err := p.flushLag(); err != nil {
		return err
	}
	old := p.act
	if err := p.trimReserve(old); err != nil {
		return err
	}
	if p.logDirty {
		p.ckMu.Lock()
		err := syncFile(old.f)
		if err == nil {
			old.durSize = old.size
		}
		p.ckMu.Unlock()
		if err != nil {
			return fmt.Errorf("fsync %s: %w", old.path, err)
		}
		p.logDirty = false
	}
	p.mu.Lock()
	ents := append([]idxEntry(nil), old.index...)
	p.mu.Unlock()
	if err := writeIndexFile(p.fs, old.idxPath, old.base, ents); err != nil {
		p.log.Warn("storage: cannot write index", "file", old.idxPath, "err", err)
	}
	s := newSegment(p.dir, base)
	f, err := p.fs.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	s.setFile(f)
	if _, err := writeFile(f, encodeSegHeader(base), 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	// The header is durable before any record is written after it (one
	// fsync per roll): otherwise a power loss could lose the header's page
	// and keep records after it, which recovery could not tell from a
	// damaged header; now a bad header with records after it is
	// corruption, and one with nothing after it a torn creation.
	if err := syncFile(f); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", s.path, err)
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		f.Close()
		return fmt.Errorf("fsync dir %s: %w", p.dir, err)
	}
	p.ckMu.Lock()
	// Sealed before the new segment is published under mu: from then on
	// retention may delete (and close) the old one on its own goroutine.
	old.seal() // its file now lives in the cache of sealed segments
	p.mu.Lock()
	p.segs = append(p.segs, s)
	p.retainDue = true
	p.mu.Unlock()
	p.act = s
	p.ckMu.Unlock()
	return nil
}

// Reserved space. The active segment's file is kept longer than its data:
// when a write would pass the end of the file, the file is first extended
// (Truncate, which adds a hole that reads as zeros) by reserveAhead or an
// eighth of its size, whichever is more, up to SegmentMaxBytes. An fsync
// after an append that grows the file must commit the file system's
// journal to record the new size; a write inside the file's length needs
// no such commit, and its fdatasync is much cheaper: 1 KiB + fdatasync
// took ~215 µs appending and ~130-150 µs inside the file on this project's
// ext4 test machines. So one fsync in a few hundred records pays for the
// size change instead of every one. The hole costs no disk blocks.
//
// The reserved zeros are never part of the log: a sealed segment is trimmed
// to its data before its fsync at roll (older segments stay exact, so any
// damage in one is corruption), the active one at Close, and after a crash
// recovery finds the first record that does not parse where the zeros
// begin, and truncates there as for a torn tail (quietly when everything
// after it is zero).
const reserveAhead = 256 << 10

// reserve makes s's file at least end bytes long. Writer role.
func (p *Partition) reserve(s *segment, end int64) error {
	if end <= s.alloc {
		return nil
	}
	if err := p.reserveFile(s, end); err != nil {
		return err
	}
	p.logDirty = true
	return nil
}

// reserveFile is reserve without the writer's logDirty (flushLagLocked may
// run on the WAL's checkpointer).
func (p *Partition) reserveFile(s *segment, end int64) error {
	if end <= s.alloc {
		return nil
	}
	n := min(end+max(reserveAhead, end/8), p.opts.SegmentMaxBytes)
	n = max(n, end)
	if err := s.f.Truncate(n); err != nil {
		return fmt.Errorf("reserve %s to %d: %w", s.path, n, err)
	}
	s.alloc = n
	return nil
}

// trimReserve drops s's reserved space: the file ends at its data again.
// The caller fsyncs (logDirty). Writer role.
func (p *Partition) trimReserve(s *segment) error {
	if s.alloc <= s.size {
		return nil
	}
	if err := s.f.Truncate(s.size); err != nil {
		return fmt.Errorf("trim %s to %d: %w", s.path, s.size, err)
	}
	s.alloc = s.size
	p.logDirty = true
	return nil
}

// slotLagBytes is how far the log's durable slot may trail the durable
// size before a commit rewrites it. Rewriting it puts a second page (at
// the start of the file, away from the records) into that commit's fsync:
// +14% on the median 1 KiB append + fdatasync on this project's ext4 VM
// (145 → 165 µs). At 64 KiB a saturated producer (~20 KiB per commit)
// paid it every third commit, ~7% of confirmed-publish throughput
// (integration/bench/before-after.sh); at 1 MiB it is one commit in about
// fifty there and one in a thousand for a one-message-at-a-time producer.
// The price is precision: damage in the last < 1 MiB (plus one commit)
// before a crash cannot be told from a torn write
// (core/storage/README.md#recovery).
const slotLagBytes = 1 << 20

// rideSlotLocked rewrites act's durable slot with the size an earlier
// fsync made durable (act.durSize) once the slot trails it by lag or
// more, for the fsync the caller makes next to carry (see syncLog).
// Caller holds ckMu.
func rideSlotLocked(act *segment, lag int64) error {
	if !act.dslotOK || (act.dslot >= 0 && act.durSize-act.dslot < lag) {
		return nil
	}
	if err := writeDurable(act.f, segMagic, act.base, act.durSize); err != nil {
		return fmt.Errorf("write %s: %w", act.path, err)
	}
	act.dslot = act.durSize
	return nil
}

// syncLog fsyncs the active segment (written since its last fsync) and
// keeps the recent fsync time for gather.
//
// Before the fsync it rewrites the header's durable slot (record.go) with
// the size the previous fsync made durable, once the slot lags by
// slotLagBytes or more: the same fsync carries it, so recording the
// durable size costs no fsync of its own. The slot never claims bytes this
// fsync is still making durable — a power loss during it may keep the new
// slot and lose some of those bytes — and recovery relies only on what it
// claims (core/storage/README.md#recovery).
func (p *Partition) syncLog() error {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	if err := p.flushLagLocked(); err != nil {
		return err
	}
	act := p.act
	if err := rideSlotLocked(act, slotLagBytes); err != nil {
		return err
	}
	size := act.size // only the writer role changes it
	start := time.Now()
	if err := syncFile(act.f); err != nil {
		return fmt.Errorf("fsync %s: %w", act.path, err)
	}
	act.durSize = max(act.durSize, size)
	p.logDirty = false
	d := time.Since(start)
	p.mu.Lock()
	p.syncDur = (3*p.syncDur + d) / 4
	p.mu.Unlock()
	return nil
}

// settleSlots runs at Close, after the last fsyncs: the durable slots of
// the active segment and the journal, which trail the durable size (see
// syncLog and journal.sync), catch up with one more fsync each (only when
// they lag). After a clean shutdown
// recovery then knows every byte was durable, and judges damage anywhere
// as corruption. Writer role.
func (p *Partition) settleSlots() error {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	act := p.act
	if act.dslotOK && act.dslot != act.durSize && !p.logDirty {
		if err := writeDurable(act.f, segMagic, act.base, act.durSize); err != nil {
			return fmt.Errorf("write %s: %w", act.path, err)
		}
		if err := syncFile(act.f); err != nil {
			return fmt.Errorf("fsync %s: %w", act.path, err)
		}
		act.dslot = act.durSize
	}
	return p.j.settleSlot()
}

// fail moves the partition into the fail-stop state and returns the error
// every caller will see from now on. It never retries an fsync: after a
// failed fsync the kernel may have dropped the dirty pages, so only a
// reopen (which re-reads what is really on disk) can tell what survived.
func (p *Partition) fail(cause error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failLocked(cause)
}

func (p *Partition) failLocked(cause error) error {
	if p.failErr == nil {
		p.failErr = fmt.Errorf("%w: %w", ErrFailed, cause)
		p.log.Error("storage: partition failed; reopen required", "dir", p.dir, "err", cause)
		p.space.Broadcast()
	}
	return p.failErr
}

// appendDirect is the uncontended fast path for Append under FsyncInterval
// and FsyncNone: when nothing is pending and no one holds the writer role,
// the appender writes its own record (one WriteAt) instead of handing it to
// the committer and waiting to be woken, which costs more than the write.
// It reports ok=false when the fast path does not apply.
func (p *Partition) appendDirect(data []byte, ts int64) (off uint64, ok bool, err error) {
	n := recHeaderLen + len(data)
	if len(data) > MaxRecordBytes || !p.wmu.TryLock() {
		return 0, false, nil
	}
	defer p.wmu.Unlock()
	p.mu.Lock()
	if len(p.batches) > 0 || p.errLocked() != nil || (p.actRecs > 0 && p.actSize+int64(n) > p.opts.SegmentMaxBytes) {
		p.mu.Unlock()
		return 0, false, nil
	}
	off = p.next
	b := &p.direct
	b.first, b.n = off, 1
	b.pos = append(b.pos[:0], 0)
	b.buf = appendRecord(b.buf[:0], off, ts, data)
	p.batches = append(p.batches, b) // readable from memory until written
	p.next++
	p.actSize += int64(n)
	p.actRecs++
	p.mu.Unlock()
	p.grew.fire()

	act := p.act
	at := act.size
	werr := p.reserve(act, at+int64(len(b.buf)))
	if werr == nil {
		_, werr = writeFile(act.f, b.buf, at)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if werr != nil {
		// Fail before the record leaves memory, so no reader ever finds
		// an offset that is neither written nor pending.
		err = p.failLocked(fmt.Errorf("write %s at %d: %w", act.path, at, werr))
	} else {
		act.noteRecord(off, ts, at, len(b.buf), p.opts.IndexEveryBytes)
		statAppends.Add(1)
		p.written = off + 1
		p.logDirty = true
		if p.opts.Fsync == FsyncInterval {
			p.armIntervalLocked()
		}
	}
	p.batches = p.batches[:copy(p.batches, p.batches[1:])]
	return off, true, err
}

// startRetention runs a retention pass on its own goroutine, never on the
// committer: deleting a sealed segment unlinks a file of up to
// SegmentMaxBytes, which took 40–60 ms for 64 MiB on ext4 here — long
// enough to show in every confirm waiting behind it. A request that comes
// while a pass runs makes that pass go round once more. The goroutine
// lives only while there is retention work, so an idle partition still
// holds none; Close waits for it.
func (p *Partition) startRetention() {
	p.mu.Lock()
	if p.closing || p.closed {
		p.mu.Unlock()
		return
	}
	if p.retaining {
		p.retainAgain = true
		p.mu.Unlock()
		return
	}
	p.retaining = true
	p.retWG.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.retWG.Done()
		for {
			if err := p.enforceRetention(); err != nil {
				p.log.Warn("storage: retention", "dir", p.dir, "err", err)
			}
			p.mu.Lock()
			again := p.retainAgain && !p.closing
			p.retainAgain = false
			if !again {
				p.retaining = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
	}()
}
