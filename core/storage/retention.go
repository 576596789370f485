package storage

import (
	"errors"
	"fmt"
	"os"
)

// Retention deletes whole segments from the head of the log, never the
// active (newest) one, so the retained offsets stay one dense range
// [first, next) and recovery can treat any gap as corruption.
//
// Queue mode deletes the oldest segment once every offset in it is settled
// AND that settlement is fsynced: the journal is fsynced first (under every
// policy — once per deleted segment), so a power loss can never leave a
// confirmed record both deleted and unsettled. A fully settled segment
// behind an unsettled one waits (head-only deletion).
//
// Stream mode deletes the oldest segment while any bound is exceeded
// (S-80): total bytes, record count, or age (the segment's newest record
// timestamp older than MaxAge).
//
// Each deletion is made durable with a directory fsync before the next one,
// so after a power loss the surviving segments are still a dense suffix.

// EnforceRetention runs one retention pass now. It also runs by itself
// after segment rolls and settlements and, with MaxAge, when a timer says
// the oldest sealed segment expires (armed only while one exists).
func (p *Partition) EnforceRetention() error {
	p.mu.Lock()
	err := p.errLocked()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.enforceRetention()
}

func (p *Partition) enforceRetention() error {
	p.retMu.Lock()
	defer p.retMu.Unlock()
	defer func() {
		p.mu.Lock()
		p.armAgeLocked()
		p.mu.Unlock()
	}()
	p.mu.Lock()
	closed := p.closed || p.closing
	p.mu.Unlock()
	if closed {
		return nil
	}
	r := p.opts.Retention
	var durable uint64
	if !r.ByLimits {
		p.mu.Lock()
		if len(p.segs) < 2 {
			p.mu.Unlock()
			return nil
		}
		need := p.segs[1].base
		p.mu.Unlock()
		if p.SettledFrontier() < need {
			return nil // nothing deletable even counting unsynced settlements
		}
		if err := p.j.sync(p.first.Load()); err != nil {
			return p.fail(err)
		}
		p.j.mu.Lock()
		durable = p.j.durable
		p.j.mu.Unlock()
	}
	now := p.opts.Now().UnixMilli()
	for {
		p.mu.Lock()
		if p.closed || p.failErr != nil || len(p.segs) < 2 {
			p.mu.Unlock()
			return nil
		}
		s, nextBase := p.segs[0], p.segs[1].base
		var del bool
		if r.ByLimits {
			del = p.exceededLocked(now)
		} else {
			del = nextBase <= durable
		}
		if !del {
			p.mu.Unlock()
			return nil
		}
		p.segs = append(p.segs[:0:0], p.segs[1:]...)
		p.first.Store(nextBase)
		p.mu.Unlock()
		if err := p.deleteSegment(s); err != nil {
			return err
		}
		p.log.Info("storage: retention deleted segment", "file", s.path, "first", nextBase)
	}
}

// exceededLocked reports whether a stream bound is exceeded. Caller holds mu.
func (p *Partition) exceededLocked(now int64) bool {
	r := p.opts.Retention
	if r.MaxBytes > 0 {
		var total int64
		for _, s := range p.segs {
			total += s.size
		}
		if total > r.MaxBytes {
			return true
		}
	}
	if r.MaxRecords > 0 && p.written-p.segs[0].base > r.MaxRecords {
		return true
	}
	if r.MaxAge > 0 {
		s := p.segs[0]
		if s.hasTs && s.maxTs < now-r.MaxAge.Milliseconds() {
			return true
		}
	}
	return false
}

func (p *Partition) deleteSegment(s *segment) error {
	s.closeFile() // waits for readers still using the file
	if err := p.fs.Remove(s.path); err != nil {
		return fmt.Errorf("storage: remove %s: %w", s.path, err)
	}
	if err := p.fs.Remove(s.idxPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("storage: cannot remove index", "file", s.idxPath, "err", err)
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		return p.fail(fmt.Errorf("fsync dir %s: %w", p.dir, err))
	}
	return nil
}
