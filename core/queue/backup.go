package queue

import (
	"path/filepath"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
)

// What a backup needs of the engine (docs/deploy.md#backup-and-restore):
// a partition's storage opened under another root with the engine's
// layout and options — its own fsyncs, not the broker's WAL — for a
// replica to be written into, and the catalog written there too. Opened
// again under the engine's own root (a restore), such a directory
// recovers like a follower's copy after a failover.

// OpenBackupPartition opens, under root, the storage of partition n of
// the queue or stream key names (a stream's key has no group), at the
// path the engine itself uses under its directory.
func (m *Manager) OpenBackupPartition(root string, key Key, n uint32) (*storage.Partition, error) {
	slot, err := m.replicaSlot(key, n)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(m.opts.Dir, slot.dir)
	if err != nil {
		return nil, core.Errorf(core.ErrInternal, "backup: %v", err)
	}
	dir := filepath.Join(root, rel)
	if err := makeDirsDurable(storage.OSFS{}, root, dir); err != nil {
		return nil, core.Errorf(core.ErrInternal, "backup: create %s: %v", dir, err)
	}
	opts := slot.opts
	opts.WAL = nil
	opts.FS = nil
	return storage.OpenPartition(dir, opts)
}

// WriteBackupCatalog writes the engine's catalog under root, where a
// restored engine reads it.
func (m *Manager) WriteBackupCatalog(root string) error {
	m.mu.Lock()
	c := m.catalogLocked(nil)
	m.mu.Unlock()
	if err := writeCatalog(storage.OSFS{}, root, c); err != nil {
		return core.Errorf(core.ErrInternal, "backup: write the catalog in %s: %v", root, err)
	}
	return nil
}
