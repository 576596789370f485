package storage

import "time"

// The WAL's leader taking busy partitions' records itself (see "The
// leader takes the records itself" in
// core/storage/README.md#write-ahead-log): a partition whose last commit
// went through the WAL offers itself instead of waking its committer, the
// leader takes every offered partition's records into its next round
// (Partition.takeForWAL, wal_commit.go), and what it staged is written to
// the segments by the partitions' committers once they go quiet
// (sweepLag).

// walTake is what the leader takes from ready partitions (takeForWAL)
// before it adds it to the next round under mu in one go.
type walTake struct {
	buf     []byte
	ends    []int
	users   []*Partition
	waiters []walWaiter
}

// offer puts p in the ready list, whose partitions the leader asks for
// their pending records at the start of its next round (takeForWAL), and
// reports false when the WAL takes nothing (failed or closed). It sets
// *lead when no round runs: the caller then starts a leader (go
// w.lead(false)) after it has released p.mu. Caller holds p.mu (lock
// order: p.mu, w.mu).
func (w *WAL) offer(p *Partition, lead *bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.errLocked() != nil {
		return false
	}
	w.ready = append(w.ready, p)
	*lead = !w.leading
	w.leading = true
	return true
}

// takeReady has the partitions in the ready list (offer) hand their
// pending records to the next round (takeForWAL). Leader only.
// It takes mu twice whatever the number of partitions (the appenders
// offering partitions need it too): once for the list and the sharing
// window (shared), once to add what it took to the next round. The add
// never waits for room (the leader is the one who makes room) and never
// refuses: the round fails every waiter if the WAL has failed.
func (w *WAL) takeReady() {
	now := time.Now()
	w.mu.Lock()
	ready := w.ready
	if len(ready) == 0 {
		w.mu.Unlock()
		return
	}
	w.ready = w.spareRdy[:0]
	share := w.always
	for _, p := range ready {
		share = w.sharedLocked(p, now) || share
	}
	w.mu.Unlock()
	t := &w.take
	for i, p := range ready {
		if p.takeForWAL(t, share) {
			t.users = append(t.users, p) // its writer role is held: see takeForWAL
		}
		ready[i] = nil
	}
	w.mu.Lock()
	w.spareRdy = ready[:0]
	if len(w.buf) == 0 { // the usual case: hand the buffers over, no copy
		w.buf, t.buf = t.buf, w.buf
		w.ends, t.ends = t.ends, w.ends
	} else {
		base := len(w.buf)
		w.buf = append(w.buf, t.buf...)
		for _, e := range t.ends {
			w.ends = append(w.ends, base+e)
		}
	}
	for _, p := range t.users {
		w.users[p] = true
		w.lagged[p] = true
	}
	w.waiters = append(w.waiters, t.waiters...)
	w.taken += len(t.waiters)
	w.mu.Unlock()
	for _, p := range t.users {
		p.wmu.Unlock()
	}
	clear(t.users)
	clear(t.waiters)
	t.buf, t.ends, t.users, t.waiters = t.buf[:0], t.ends[:0], t.users[:0], t.waiters[:0]
}

// walLagQuiet is how long a partition whose records the leader staged
// (takeForWAL) may get none before its lag is written (sweepLag): the
// WAL's stand-in for the write a committer makes when it goes idle, so a
// quiet partition holds no staged bytes for long.
const walLagQuiet = 10 * time.Millisecond

// sweepLag writes the lag of every partition in lagged that has been quiet
// for walLagQuiet. The leader calls it after each round (it acts at most
// once per walLagQuiet), the sweep timer (force) once the leader stopped.
func (w *WAL) sweepLag(force bool) {
	now := time.Now()
	w.mu.Lock()
	if w.closed || len(w.lagged) == 0 || !force && now.Sub(w.swept) < walLagQuiet {
		w.mu.Unlock()
		return
	}
	w.swept = now
	cands := make([]*Partition, 0, len(w.lagged))
	for p := range w.lagged {
		cands = append(cands, p)
	}
	w.mu.Unlock()
	for _, p := range cands {
		p.mu.Lock()
		quiet := now.Sub(p.lagAt) >= walLagQuiet
		p.mu.Unlock()
		if !quiet {
			continue
		}
		// Forget p before the write: records staged after it put p back.
		w.mu.Lock()
		delete(w.lagged, p)
		w.mu.Unlock()
		p.flushLagSoon()
	}
}

// armSweepLocked starts the sweep timer when the leader stops with staged
// records left. Caller holds mu.
func (w *WAL) armSweepLocked() {
	if w.sweepOn || w.closed || len(w.lagged) == 0 {
		return
	}
	w.sweepOn = true
	if w.sweepT == nil {
		w.sweepT = time.AfterFunc(walLagQuiet, w.sweepTimer)
	} else {
		w.sweepT.Reset(walLagQuiet)
	}
}

// sweepTimer sweeps while no leader runs, again until nothing is staged.
func (w *WAL) sweepTimer() {
	w.sweepLag(true)
	w.mu.Lock()
	w.sweepOn = false
	if !w.leading {
		w.armSweepLocked()
	}
	w.mu.Unlock()
}
