package storage

import "time"

// The partition's timers: the FsyncInterval fsync and the Retention.MaxAge
// pass, each a one-shot timer armed only while it has something to do
// (see "Lifecycle" in commit.go).

// armIntervalLocked schedules the FsyncInterval fsync after a write left
// the log or journal dirty, unless one is scheduled or due already (that
// one happens after this write, so it covers it). Caller holds mu.
func (p *Partition) armIntervalLocked() {
	if p.ivArmed || p.ivDue || p.closing || p.closed || p.failErr != nil {
		return
	}
	p.ivArmed = true
	if p.ivTimer == nil {
		p.ivTimer = time.AfterFunc(p.opts.FsyncInterval, p.intervalFired)
	} else {
		p.ivTimer.Reset(p.opts.FsyncInterval)
	}
}

func (p *Partition) intervalFired() {
	p.mu.Lock()
	start := false
	if p.ivArmed { // else stopped by Close
		p.ivArmed = false
		if !p.closing && !p.closed && p.failErr == nil {
			p.ivDue = true
			start = p.kickLocked()
		}
	}
	p.mu.Unlock()
	if start {
		p.commitLoop() // on the timer's own goroutine
	}
}

// Bounds of the MaxAge timer: it fires when the oldest sealed segment
// expires, but at least this often while one exists (record timestamps are
// wall-clock time, the timer is monotonic: a clock step is noticed within
// ageWaitMax), and not more often than ageWaitMin.
const (
	ageWaitMin = 10 * time.Millisecond
	ageWaitMax = time.Minute
)

// armAgeLocked (re)arms the MaxAge timer for the moment the oldest sealed
// segment expires, or stops it when no sealed segment is left. It runs
// after every retention pass. Caller holds mu.
func (p *Partition) armAgeLocked() {
	r := p.opts.Retention
	if !r.ByLimits || r.MaxAge <= 0 {
		return
	}
	if len(p.segs) < 2 || !p.segs[0].hasTs || p.closing || p.closed || p.failErr != nil {
		if p.ageArmed {
			p.ageTimer.Stop()
			p.ageArmed = false
		}
		return
	}
	// exceededLocked deletes once maxTs < now - MaxAge.
	expires := p.segs[0].maxTs + r.MaxAge.Milliseconds() + 1
	d := time.Duration(expires-p.opts.Now().UnixMilli()) * time.Millisecond
	d = min(max(d, ageWaitMin), ageWaitMax)
	p.ageArmed = true
	if p.ageTimer == nil {
		p.ageTimer = time.AfterFunc(d, p.ageFired)
	} else {
		p.ageTimer.Reset(d)
	}
}

func (p *Partition) ageFired() {
	p.mu.Lock()
	start := false
	if p.ageArmed { // else stopped or superseded
		p.ageArmed = false
		if !p.closing && !p.closed && p.failErr == nil {
			p.retainDue = true
			start = p.kickLocked()
		}
	}
	p.mu.Unlock()
	if start {
		p.commitLoop() // on the timer's own goroutine
	}
}

// stopTimersLocked stops both timers (Close). Caller holds mu.
func (p *Partition) stopTimersLocked() {
	if p.ivArmed {
		p.ivTimer.Stop()
		p.ivArmed = false
	}
	if p.ageArmed {
		p.ageTimer.Stop()
		p.ageArmed = false
	}
}
