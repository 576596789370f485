package storage

// InJournal reports whether offset is in the persisted settled set itself
// (IsSettled also counts every trimmed offset as settled). In queue mode
// every trimmed offset must be in it: segments are deleted only after
// their settlement is fsynced.
func InJournal(p *Partition, offset uint64) bool {
	p.j.mu.Lock()
	defer p.j.mu.Unlock()
	return p.j.set.contains(offset)
}

// Scheduled reports what p owns besides its files: a committer goroutine,
// an armed FsyncInterval timer, an armed MaxAge retention timer.
func Scheduled(p *Partition) (committer, fsyncTimer, ageTimer bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running && !p.closed, p.ivArmed, p.ageArmed
}

// SetMaxOpenSealed sets the process-wide bound on open sealed-segment
// files and returns the previous one.
func SetMaxOpenSealed(n int) int { return sealedFDs.setMax(n) }

// OpenSealed returns the number of sealed-segment files held open by the
// process-wide cache.
func OpenSealed() int { return sealedFDs.open() }

// JournalSeq returns the journal's write sequence (bumped by every entry
// written, snapshots included) and the sequence its last successful fsync
// covered: an entry written at or below synced is on disk.
func JournalSeq(p *Partition) (written, synced uint64) {
	p.j.mu.Lock()
	defer p.j.mu.Unlock()
	return p.j.seq, p.j.synced
}

// JournalSyncDelay is the bound (FsyncAlways) on how long a journal entry
// stays written but not fsynced while the partition is busy.
const JournalSyncDelay = journalSyncDelay

// SetMinWALFileBytes sets the smallest WAL file size accepted and returns
// a function that restores it.
func SetMinWALFileBytes(n int64) func() {
	old := minWALFileBytes
	minWALFileBytes = n
	return func() { minWALFileBytes = old }
}

// WALReplayed returns the number of live WAL files OpenWAL found (and
// replayed).
func WALReplayed(w *WAL) int { return w.replayed }

// SetWALAlways makes every commit of w's partitions go through it, also a
// lone partition's (which otherwise fsyncs its own segment: useWAL).
func SetWALAlways(w *WAL) { w.always = true }

// WALTaken returns how many commits w's leader took from partitions itself
// (takeForWAL) rather than from their committers.
func WALTaken(w *WAL) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.taken
}

// LagRecords returns how many records p holds staged for a segment write.
func LagRecords(p *Partition) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag.n
}
