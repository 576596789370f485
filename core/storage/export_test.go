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
