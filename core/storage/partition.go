package storage

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Record is one log record.
type Record struct {
	Offset    uint64
	Timestamp int64 // unix milliseconds, set by the appender
	Data      []byte
}

// Partition is one durable partition: a directory holding a segmented
// append-only record log and the state journal beside it, sharing one
// group committer. An idle partition owns no goroutine and no running
// timer (see commit.go). All methods are safe for concurrent use.
type Partition struct {
	dir  string
	opts Options
	fs   FS
	log  *slog.Logger
	j    *journal

	first atomic.Uint64 // first retained offset (mirrors segs[0].base)
	retMu sync.Mutex    // serializes retention passes

	grew growth // fired at appends and events, for replication (events.go)

	// The epoch history (epochs.go), guarded by epochMu (taken before mu).
	epochMu sync.Mutex
	epochs  []EpochStart

	// wmu is the writer role: the committer holds it for a whole commit,
	// and a direct writer (see appendDirect) for its one record. act and
	// logDirty are only touched by the holder.
	wmu      sync.Mutex
	act      *segment // newest segment; also guarded by ckMu (changed at roll)
	logDirty bool     // act has bytes not yet fsynced
	direct   batch    // the direct writer's one-record batch

	// The write-ahead log (Options.WAL under FsyncAlways, else empty key):
	// walKey names this partition in its entries, inc is its incarnation
	// (wal_recover.go). ckMu guards what a WAL checkpoint touches without
	// the writer role — act (switched at roll), act's durSize and dslot,
	// and ckDone (set once Close made everything durable) — see
	// walCheckpoint. Lock order: wmu, ckMu, mu.
	walKey string
	inc    uint64
	ckMu   sync.Mutex
	ckDone bool
	// walPending counts commits handed to the WAL and not yet released
	// (commitWAL, walDone); walIdle (on mu) is broadcast when it drops to
	// zero. Guarded by mu.
	walPending int
	walIdle    sync.Cond
	// lag: records committed through the WAL and not yet written to the
	// segment (lag.go). Changed under ckMu and mu.
	lag batch

	mu           sync.Mutex
	space        sync.Cond // appenders waiting for MaxPendingBytes to drain
	spaceWaiters int
	segs         []*segment // oldest first; the last is the active segment
	next         uint64     // next offset to assign
	written      uint64     // every offset below is in a segment file
	batches      []*batch   // encoded, not yet written (readable from memory)
	cur          *batch     // batch open for appends, or nil
	take         []*batch   // committer scratch
	free         []*batch   // recycled batches
	actSize      int64      // newest segment size counting pending records
	actRecs      int        // records in the newest segment counting pending ones
	pendBytes    int        // bytes encoded and not yet written
	pendRecs     int        // records not yet taken by the committer
	lastTake     int        // records in the last commit (gather target)
	lastWAL      bool       // the last commit went through the WAL: new records are offered to its leader
	walReady     bool       // p is in the WAL's ready list (WAL.offer, takeForWAL)
	lagDue       bool       // the committer is to write the lag (flushLagSoon)
	lagAt        time.Time  // the WAL's leader last staged records (sweepLag)
	syncDur      time.Duration
	syncReqs     []chan error
	retainDue    bool
	retaining    bool           // a retention goroutine runs (startRetention)
	retainAgain  bool           // and must make one more pass
	retWG        sync.WaitGroup // the retention goroutine, for Close
	closing      bool
	closed       bool
	failErr      error
	quarErr      error

	// Committer lifecycle (see commit.go): running is true while a
	// committer goroutine exists (or is being started: see kickLocked);
	// it is started when work is recorded and clears running itself, under
	// mu, when it has found none for committerLinger. waiting: it is
	// blocked in sleep, to be woken through wake. jSyncDue: a journal write
	// awaits its fsync (FsyncAlways), the oldest since jDirtyAt.
	running  bool
	waiting  bool
	inline   bool          // a CommitIfIdle pass runs (it holds wmu, not the committer role)
	idleFrom time.Time     // the last commit, by the committer or inline: the linger counts from it
	wake     chan struct{} // capacity 1
	linger   *time.Timer   // the committer's wait timer (reused)
	jSyncDue bool
	jDirtyAt time.Time
	loopDone chan struct{} // closed by the committer that handled Close

	// Timers, armed only while they have something to do (no ticker).
	ivArmed  bool        // FsyncInterval: an fsync is scheduled
	ivDue    bool        // ... and its time has come: the committer fsyncs
	ivTimer  *time.Timer // reused
	ageArmed bool        // Retention.MaxAge: a retention pass is scheduled
	ageTimer *time.Timer
}

// OpenPartition creates or recovers the partition in dir. A *CorruptionError
// (errors.Is(err, ErrQuarantined)) means the files hold damage that is not
// a torn tail; nothing was modified beyond what recovery itself checks.
func OpenPartition(dir string, opts Options) (*Partition, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Partition{
		dir:      dir,
		opts:     opts,
		fs:       opts.FS,
		log:      opts.Logger,
		wake:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
	}
	p.space.L = &p.mu
	p.walIdle.L = &p.mu
	if err := p.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := readQuarantine(p.fs, dir); err != nil {
		return nil, err
	}
	if opts.WAL != nil && opts.Fsync == FsyncAlways {
		if p.walKey, err = opts.WAL.key(dir); err != nil {
			return nil, err
		}
		if p.inc, err = ensureIncarnation(p.fs, dir); err != nil {
			return nil, err
		}
	}
	names, err := p.fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if err := p.openLog(names); err != nil {
		return nil, err
	}
	if len(opts.replay) > 0 {
		if err := p.replayWAL(opts.replay); err != nil {
			p.closeSegs()
			return nil, err
		}
	}
	act := p.segs[len(p.segs)-1]
	p.act = act
	p.next, p.written = act.next, act.next
	p.actSize, p.actRecs = act.size, int(act.next-act.base)
	p.first.Store(p.segs[0].base)
	if p.epochs, err = readEpochs(p.fs, dir, p.next); err != nil {
		p.closeSegs()
		return nil, err
	}
	j, err := openJournal(p.fs, dir, names, p.log, p.next)
	if err != nil {
		p.closeSegs()
		return nil, err
	}
	p.j = j
	p.j.grew = &p.grew
	p.j.durable = p.j.set.frontierFrom(p.segs[0].base)
	p.mu.Lock()
	p.retainDue = true // first retention pass, in the background
	start := p.kickLocked()
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
	return p, nil
}

// errLocked returns the error that refuses new work. Caller holds mu.
func (p *Partition) errLocked() error {
	switch {
	case p.closing || p.closed:
		return ErrClosed
	case p.quarErr != nil:
		return p.quarErr
	case p.failErr != nil:
		return p.failErr
	}
	return nil
}

// Append appends one record and returns its offset once the policy's
// durability holds: after an fsync covers it (FsyncAlways), or once it is
// written to the OS (FsyncInterval, FsyncNone).
func (p *Partition) Append(data []byte, ts int64) (uint64, error) {
	if p.opts.Fsync != FsyncAlways {
		if off, ok, err := p.appendDirect(data, ts); ok {
			return off, err
		}
	}
	off, sig, err := p.enqueue(data, ts, anyOffset, nil, false)
	if err != nil {
		return 0, err
	}
	<-sig.ch
	if sig.err != nil {
		return 0, sig.err
	}
	return off, nil
}

// AppendAsync assigns and returns the offset at once; the record is
// readable (Read, Scan) immediately, before it is durable (S-143). done is
// called exactly once, from the commit goroutine, when the durability holds
// or with the error; calls happen in offset order; done must not block.
// When AppendAsync itself returns an error, done is never called. It may
// block while MaxPendingBytes are waiting to be written.
func (p *Partition) AppendAsync(data []byte, ts int64, done func(offset uint64, err error)) (uint64, error) {
	if done == nil {
		done = func(uint64, error) {}
	}
	off, _, err := p.enqueue(data, ts, anyOffset, done, false)
	return off, err
}

// AppendAsyncDeferred is AppendAsync for a caller that calls CommitIfIdle
// right afterwards (before it waits for anything): the record is not
// handed to the committer goroutine yet — no committer is started or woken
// for it — so that CommitIfIdle can commit it on the caller instead. A
// committer that is busy takes it anyway. Until CommitIfIdle is called the
// record may stay uncommitted.
func (p *Partition) AppendAsyncDeferred(data []byte, ts int64, done func(offset uint64, err error)) (uint64, error) {
	if done == nil {
		done = func(uint64, error) {}
	}
	off, _, err := p.enqueue(data, ts, anyOffset, done, true)
	return off, err
}

// anyOffset asks enqueue for the next offset, whatever it is. It is never
// a record's offset: the successor of 2^64-1 would overflow.
const anyOffset = ^uint64(0)

// AppendReplica appends, on a follower, records the partition's owner has
// already given offsets: recs[i] goes to first+i, with its own timestamp,
// and the records' bytes on disk come out as the owner's. first must be
// the next offset here; any other is a gap or an overlap with what this
// replica holds, refused with an *OffsetMismatchError (nothing is
// appended), and the caller resynchronises (from the owner's checkpoint,
// or after TruncatePartition). Only the replication apply writes to a
// follower's partition; should anything else append meanwhile, the batch
// stops with the same error and the records taken before it stay, each at
// its own offset (Bounds tells how far).
//
// done is called once, from the commit goroutine, with the next offset
// after the batch when the policy's durability holds for all of it (a
// follower reports progress only after its own fsync), or with an error;
// it must not block. When AppendReplica returns an error, done is never
// called.
func (p *Partition) AppendReplica(first uint64, recs []Record, done func(next uint64, err error)) error {
	if len(recs) == 0 {
		return nil
	}
	if first > anyOffset-uint64(len(recs)) {
		return fmt.Errorf("%w: replica batch at %d of %d records overflows", ErrOutOfRange, first, len(recs))
	}
	last := len(recs) - 1
	for i, r := range recs {
		var cb func(uint64, error)
		if i == last && done != nil {
			// Callbacks run in offset order and every earlier record's
			// commit is released first: one on the last record covers the
			// batch. An error fails the partition, so it reaches this one.
			cb = func(off uint64, err error) { done(off+1, err) }
		}
		// Only the last record wakes the committer: it takes the batch
		// whole instead of being woken for every record.
		if _, _, err := p.enqueue(r.Data, r.Timestamp, first+uint64(i), cb, i != last); err != nil {
			return err
		}
	}
	return nil
}

// Bounds returns the first retained offset and the next offset to be assigned.
func (p *Partition) Bounds() (first, next uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.segs[0].base, p.next
}

// Size returns the bytes the retained records take in the log, framing
// included, counting those not written to a segment file yet (staged or
// pending). Over Bounds it gives the mean record size, from which a
// follower's lag in records becomes an estimate in bytes.
func (p *Partition) Size() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(len(p.lag.buf) + p.pendBytes)
	for _, s := range p.segs {
		n += s.size - segHeaderLen
	}
	return n
}

// Read returns the record at offset: ErrOutOfRange if it is not assigned
// yet, ErrTrimmed if retention deleted it, a *CorruptionError if the bytes
// on disk fail their checksum (the partition is then quarantined).
func (p *Partition) Read(offset uint64) (Record, error) {
	p.mu.Lock()
	if p.quarErr != nil {
		defer p.mu.Unlock()
		return Record{}, p.quarErr
	}
	if p.closed {
		p.mu.Unlock()
		return Record{}, ErrClosed
	}
	if offset >= p.next {
		p.mu.Unlock()
		return Record{}, fmt.Errorf("%w: offset %d, next %d", ErrOutOfRange, offset, p.next)
	}
	if offset < p.segs[0].base {
		first := p.segs[0].base
		p.mu.Unlock()
		return Record{}, fmt.Errorf("%w: offset %d, first %d", ErrTrimmed, offset, first)
	}
	if offset >= p.written {
		defer p.mu.Unlock()
		if p.failErr != nil {
			return Record{}, p.failErr
		}
		r, _, err := p.memRecordLocked(offset, nil)
		return r, err
	}
	s := p.segs[p.segIndexLocked(offset)]
	e := s.lookup(offset)
	end := s.size
	s.ioMu.RLock()
	p.mu.Unlock()
	f, err := s.readFile(p.fs)
	var rec Record
	if err == nil {
		rec, err = s.readOne(f, int64(e.pos), s.base+uint64(e.rel), offset, end)
		if _, bad := err.(*CorruptionError); bad && e.pos != segHeaderLen {
			// The index is only an accelerator (it can be stale after a
			// power loss): before calling the log corrupt, walk it from
			// the header.
			rec, err = s.readOne(f, segHeaderLen, s.base, offset, end)
		}
	}
	s.ioMu.RUnlock()
	if err != nil {
		return Record{}, p.readErr(err, offset)
	}
	return rec, nil
}

// readErr maps a failed file read: a read racing with retention becomes
// ErrTrimmed, detected corruption quarantines the partition.
func (p *Partition) readErr(err error, offset uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if offset < p.segs[0].base {
		return fmt.Errorf("%w: offset %d, first %d", ErrTrimmed, offset, p.segs[0].base)
	}
	if ce, ok := err.(*CorruptionError); ok {
		if p.quarErr == nil {
			p.quarErr = ce
			p.log.Error("storage: partition quarantined", "dir", p.dir, "err", ce)
		}
		return p.quarErr
	}
	return err
}

// segIndexLocked returns the index of the segment holding offset (which is
// retained and written). Caller holds mu.
func (p *Partition) segIndexLocked(offset uint64) int {
	lo, hi := 0, len(p.segs)
	for lo < hi {
		m := (lo + hi) / 2
		if p.segs[m].base <= offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// memRecordLocked copies a record that is still in a pending batch.
func (p *Partition) memRecordLocked(offset uint64, arena []byte) (Record, []byte, error) {
	if r, arena, ok := p.lag.record(offset, arena); ok { // staged (lag.go)
		return r, arena, nil
	}
	for _, b := range p.batches {
		if r, arena, ok := b.record(offset, arena); ok {
			return r, arena, nil
		}
	}
	// Unreachable while the invariant holds (every offset in [written,
	// next) is in a batch unless the partition failed); never guess.
	return Record{}, arena, fmt.Errorf("%w: offset %d is neither written nor pending", ErrFailed, offset)
}

// memBytesLocked bounds the bytes the records in [from, to), all in
// memory, take (framing included): Scan sizes its copy by it, so that a
// stream reading the newest record or two does not allocate a whole chunk.
func (p *Partition) memBytesLocked(from, to uint64) int {
	n := p.lag.bytesIn(from, to)
	for _, b := range p.batches {
		n += b.bytesIn(from, to)
	}
	return n
}

// Scan calls fn for each record from offset from (clamped up to the first
// retained offset) in order, until fn returns false or the tail is
// reached. Records appended during the scan may be included. fn runs
// without partition locks held and may keep rec.Data; the records of one
// chunk share one allocation (one per chunk, not one per record), so a
// kept Data keeps its chunk's (64 KiB or more) alive.
func (p *Partition) Scan(from uint64, fn func(Record) bool) error {
	var recs []Record
	for {
		recs = recs[:0]
		p.mu.Lock()
		if p.quarErr != nil {
			defer p.mu.Unlock()
			return p.quarErr
		}
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		from = max(from, p.segs[0].base)
		if from >= p.next {
			p.mu.Unlock()
			return nil
		}
		if from >= p.written {
			if p.failErr != nil {
				defer p.mu.Unlock()
				return p.failErr
			}
			to := min(p.next, from+256)
			arena := make([]byte, 0, min(p.memBytesLocked(from, to), 64<<10))
			for o := from; o < to; o++ {
				var r Record
				var err error
				r, arena, err = p.memRecordLocked(o, arena)
				if err != nil {
					p.mu.Unlock()
					return err
				}
				recs = append(recs, r)
			}
			p.mu.Unlock()
		} else {
			s := p.segs[p.segIndexLocked(from)]
			e := s.lookup(from)
			end, segNext := s.size, s.next
			s.ioMu.RLock()
			p.mu.Unlock()
			f, err := s.readFile(p.fs)
			if err == nil {
				recs, err = scanChunk(s, f, e, from, segNext, end, recs)
				if _, bad := err.(*CorruptionError); bad && e.pos != segHeaderLen {
					recs, err = scanChunk(s, f, idxEntry{0, segHeaderLen}, from, segNext, end, recs[:0])
				}
			}
			s.ioMu.RUnlock()
			if err != nil {
				return p.readErr(err, from)
			}
		}
		for _, r := range recs {
			if !fn(r) {
				return nil
			}
			from = r.Offset + 1
		}
	}
}

// scanChunk reads up to ~1 MiB of records of s (through its read handle f)
// starting at offset from.
func scanChunk(s *segment, f File, e idxEntry, from, segNext uint64, end int64, out []Record) ([]Record, error) {
	r := newRecReader(f, int64(e.pos), end)
	bytes := 0
	arena := make([]byte, 0, min(end-int64(e.pos), 64<<10))
	for off := s.base + uint64(e.rel); off < segNext && bytes < 1<<20; off++ {
		rec, pos, bad, err := r.next(off)
		if err != nil {
			return out, fmt.Errorf("storage: read %s at %d: %w", s.path, pos, err)
		}
		if bad != "" {
			return out, s.corrupt(pos, off, bad)
		}
		if off >= from {
			h := decodeHeader(rec)
			var data []byte
			data, arena = copyData(arena, rec[recHeaderLen:])
			out = append(out, Record{Offset: off, Timestamp: h.ts, Data: data})
			bytes += len(rec)
		}
	}
	return out, nil
}

// Settle records offsets as settled (acked, dead-lettered or expired). The
// journal entry is written to the OS before Settle returns, so a process
// crash never loses it; it is fsynced by the committer within
// journalSyncDelay (FsyncAlways, see commit.go), by the interval fsync it
// schedules (FsyncInterval), or only by Sync, retention and Close
// (FsyncNone). Offsets not yet assigned are refused with ErrOutOfRange;
// already settled offsets are ignored.
func (p *Partition) Settle(offsets ...uint64) error {
	next, err := p.usableNext()
	if err != nil {
		return err
	}
	for _, o := range offsets {
		if o >= next {
			return fmt.Errorf("%w: settle offset %d, next %d", ErrOutOfRange, o, next)
		}
	}
	wrote, frontier, err := p.j.settle(offsets, p.first.Load())
	if err != nil {
		return p.fail(err)
	}
	if wrote {
		p.noteJournal(true, frontier)
	}
	return nil
}

// noteJournal runs after a journal write: it makes sure a committer will
// fsync it (FsyncAlways: one is running, it needs no wake-up) or schedules
// the interval fsync (FsyncInterval), and after settlements that complete
// the oldest segment (frontier past the second segment's base) has a queue
// retention pass run.
func (p *Partition) noteJournal(settled bool, frontier uint64) {
	queueMode := settled && !p.opts.Retention.ByLimits
	if !queueMode && p.opts.Fsync == FsyncNone {
		return
	}
	p.mu.Lock()
	start := false
	if queueMode && len(p.segs) > 1 && frontier >= p.segs[1].base {
		p.retainDue = true
		start = p.kickLocked()
	}
	switch p.opts.Fsync {
	case FsyncAlways:
		if !p.jSyncDue {
			p.jSyncDue, p.jDirtyAt = true, time.Now()
		}
		if !p.running { // a running committer fsyncs it in time unwoken
			start = p.kickLocked()
		}
	case FsyncInterval:
		p.armIntervalLocked()
	}
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
}

// usableNext returns the next offset, or why the partition takes no work.
func (p *Partition) usableNext() (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next, p.errLocked()
}

// IsSettled reports whether offset is settled; trimmed offsets count as
// settled.
func (p *Partition) IsSettled(offset uint64) bool {
	if offset < p.first.Load() {
		return true
	}
	p.j.mu.Lock()
	defer p.j.mu.Unlock()
	return p.j.set.contains(offset)
}

// SettledFrontier returns the smallest unsettled offset: every offset below
// it is settled (S-57 settled_until).
func (p *Partition) SettledFrontier() uint64 {
	first := p.first.Load()
	p.j.mu.Lock()
	defer p.j.mu.Unlock()
	return p.j.set.frontierFrom(first)
}

// AppendState appends an opaque engine state event to the journal, under
// the same write-ahead rule as Settle.
func (p *Partition) AppendState(entry []byte) error {
	if len(entry) > MaxRecordBytes {
		return ErrTooLarge
	}
	p.mu.Lock()
	err := p.errLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := p.j.appendEngine(entry); err != nil {
		return p.fail(err)
	}
	p.noteJournal(false, 0)
	return nil
}

// ReplayState calls fn with the engine snapshot (if any), then every state
// entry appended after it, in order. fn receives its own copy of each entry
// and must not call CompactState. Settlements are not replayed: they are
// already applied (IsSettled, SettledFrontier).
func (p *Partition) ReplayState(fn func(entry []byte) error) error {
	p.mu.Lock()
	err := p.errLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.j.replay(fn)
}

// CompactState rewrites the journal crash-safely as [settlement snapshot +
// engineSnapshot]; older entries are dropped. engineSnapshot must reflect
// every AppendState that returned before CompactState was called. A
// failure is fail-stop (the old generation stays authoritative on disk).
func (p *Partition) CompactState(engineSnapshot []byte) error {
	if len(engineSnapshot) > MaxRecordBytes {
		return ErrTooLarge
	}
	p.mu.Lock()
	err := p.errLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := p.j.compact(engineSnapshot, p.first.Load()); err != nil {
		return p.fail(err)
	}
	return nil
}

// StateJournalBytes returns the size of the current journal generation, so
// the engine can decide when to CompactState.
func (p *Partition) StateJournalBytes() int64 { return p.j.bytes() }

// Sync forces an fsync of everything written so far (log and journal),
// whatever the policy, and waits for it.
func (p *Partition) Sync() error {
	ch := make(chan error, 1)
	p.mu.Lock()
	if err := p.errLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	p.syncReqs = append(p.syncReqs, ch)
	start := p.kickLocked()
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
	return <-ch
}

// Close completes pending appends, fsyncs log and journal, writes the
// active segment's index and closes the files. It returns the fail-stop
// error if the partition had failed.
func (p *Partition) Close() error {
	p.mu.Lock()
	if p.closing || p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closing = true
	p.space.Broadcast()
	start := p.kickLocked() // else the running committer sees closing before it exits
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
	// Wait for the committer that handles closing; none starts after it
	// (running stays set).
	<-p.loopDone
	p.retWG.Wait() // a background retention pass in progress
	p.retMu.Lock() // an EnforceRetention call in progress
	defer p.retMu.Unlock()
	p.mu.Lock()
	p.closed = true
	p.stopTimersLocked()
	err := p.failErr
	segs := p.segs
	p.mu.Unlock()
	// Under ckMu: a WAL checkpoint that began before closed was set
	// (possible only after a failure; a clean close sets ckDone first)
	// must not find the active segment's file closed under it.
	p.ckMu.Lock()
	for _, s := range segs {
		if cerr := s.closeFile(); cerr != nil && err == nil {
			err = cerr
		}
	}
	p.ckMu.Unlock()
	if cerr := p.j.close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
