package storage

import "fmt"

// Staged segment writes (the "lag"). Under the WAL a commit's records are
// durable once the WAL round holding them is fsynced; their segment write
// is no longer on the confirm path. Written per commit, a partition that
// gets a few records per round (a producer spread over 100 queues) paid a
// pwrite of a few KiB per round, and those dominated the broker's CPU. So a
// committer stages its commits' records in p.lag and writes them to the
// segment in one write once lagFlushBytes have gathered, and also:
// before a roll, before any write or fsync of the segment that does not go
// through the WAL (Sync, Close, a batch too large for the WAL, an inline
// commit), at a WAL checkpoint (walCheckpoint), and when the committer goes
// idle, so an idle partition holds no staged bytes. The WAL's leader stages
// too (takeForWAL) but never writes: a full lag, and the lag of a
// partition that went quiet (WAL.sweepLag), are written by the partition's
// committer (flushLagSoon, lagDue). Until written, staged records are read
// from memory (memRecordLocked), like pending ones.
//
// p.lag is changed under ckMu and mu (the writer appends, whoever flushes
// resets it), so readers under mu and a checkpoint under ckMu see it whole.
const lagFlushBytes = 128 << 10

// stageBatches moves the records of take, written to no file yet, into the
// lag, rolling first when a batch starts a new segment. Writer role.
func (p *Partition) stageBatches(take []*batch) error {
	for _, b := range take {
		if b.newSeg {
			if err := p.flushLag(); err != nil {
				return err
			}
			if err := p.roll(b.first); err != nil {
				return err
			}
		}
		p.ckMu.Lock()
		p.mu.Lock()
		full := p.stageLocked(b)
		p.mu.Unlock()
		var err error
		if full {
			err = p.flushLagLocked()
		}
		p.ckMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// stageLocked moves b's records into the lag and reports whether the lag
// is full (lagFlushBytes). Writer role, ckMu and mu held.
func (p *Partition) stageLocked(b *batch) (full bool) {
	l := &p.lag
	if l.n == 0 {
		l.first = b.first
	}
	base := uint32(len(l.buf))
	for _, pos := range b.pos[:b.n] {
		l.pos = append(l.pos, base+pos)
	}
	l.buf = append(l.buf, b.buf...)
	l.n += b.n
	p.pendBytes -= len(b.buf)
	if p.spaceWaiters > 0 {
		p.space.Broadcast()
	}
	p.logDirty = true
	return len(l.buf) >= lagFlushBytes
}

// flushLagSoon has the committer write the staged records (lagDue).
func (p *Partition) flushLagSoon() {
	p.mu.Lock()
	start := p.flushLagSoonLocked()
	p.mu.Unlock()
	if start {
		go p.commitLoop()
	}
}

// flushLagSoonLocked is flushLagSoon with mu held; like kickLocked, it
// reports whether the caller must start the committer once it has
// released mu.
func (p *Partition) flushLagSoonLocked() bool {
	if p.lag.n == 0 || p.closing || p.closed || p.failErr != nil {
		return false
	}
	p.lagDue = true
	return p.kickLocked()
}

// flushLag writes the staged records to the active segment.
func (p *Partition) flushLag() error {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	return p.flushLagLocked()
}

// flushLagLocked is flushLag with ckMu held. It may run on the WAL's
// checkpointer: it touches the segment's length (reserveFile) only when
// the lag holds records, which only a committer in WAL mode puts there,
// and such a committer writes the segment only through the lag.
func (p *Partition) flushLagLocked() error {
	l := &p.lag
	if l.n == 0 {
		return nil
	}
	act := p.act
	at := act.size
	if err := p.reserveFile(act, at+int64(len(l.buf))); err != nil {
		return p.fail(err)
	}
	if _, err := writeFile(act.f, l.buf, at); err != nil {
		return p.fail(fmt.Errorf("write %s at %d: %w", act.path, at, err))
	}
	statAppends.Add(uint64(l.n))
	every := p.opts.IndexEveryBytes
	p.mu.Lock()
	l.noteWritten(act, at, every)
	p.written = l.first + uint64(l.n)
	l.n, l.buf, l.pos = 0, l.buf[:0], l.pos[:0]
	if cap(l.buf) > 4*lagFlushBytes { // after a large batch: do not keep it
		l.buf, l.pos = nil, nil
	}
	p.mu.Unlock()
	return nil
}
