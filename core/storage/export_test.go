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
