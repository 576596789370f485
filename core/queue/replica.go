package queue

import (
	"fmt"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
)

// What replication needs of the engine (docs/ARCHITECTURE.md#replication):
// on the owner, a partition's log and a checkpoint consistent with its
// engine state; on a follower, the partition's storage opened in the
// engine's directory with the engine's options but not loaded, so that the
// engine recovers it like after a restart once this broker serves it.

// ReplicationLog returns the partition's storage log, which the owner
// ships to its followers; an error when the partition is quarantined or
// failed.
func (p *Partition) ReplicationLog() (*storage.Partition, error) {
	if err := p.brokenErr(); err != nil {
		return nil, err
	}
	return p.log, nil
}

// ReplicationCheckpoint returns, at one instant, the state a new follower
// installs: the log's event feed position and settled set
// (storage.Partition.EventCheckpoint) and the engine's snapshot — taken
// under the partition's lock, under which every engine entry is written.
func (p *Partition) ReplicationCheckpoint() (eventNext uint64, settled, engine []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	eventNext, settled = p.log.EventCheckpoint(0)
	return eventNext, settled, p.snapshotLocked()
}

// BeginEpoch records, before the owner appends under assignment epoch
// epoch, that the log's records from here on are written in it
// (storage.Partition.BeginEpoch; the epoch history replicas compare). It
// costs an atomic load once the epoch is recorded. An epoch older than the
// history's last is refused: this broker was deposed.
//
// The first call in a process is different: when the history already
// holds epoch (or a later one), an earlier process of this broker wrote
// under it, and the records a crash took from the log may still be on a
// follower; it returns an *EpochUsedError and the caller moves the
// assignment to a new epoch first (cluster.NewEpoch).
func (p *Partition) BeginEpoch(epoch uint64) error {
	cur := p.epoch.Load()
	if cur == epoch {
		return nil
	}
	lg, err := p.ReplicationLog()
	if err != nil {
		return err
	}
	if h := lg.Epochs(); cur == 0 && len(h) > 0 && h[len(h)-1].Epoch >= epoch {
		return &EpochUsedError{Last: h[len(h)-1].Epoch}
	}
	if err := lg.BeginEpoch(epoch); err != nil {
		return core.Errorf(core.ErrUnavailable, "%s: %v", p.name, err)
	}
	p.epoch.Store(epoch)
	return nil
}

// EpochUsedError: the log's history already holds the epoch asked for, up
// to Last, from an earlier process; the owner needs an epoch above Last.
type EpochUsedError struct{ Last uint64 }

func (e *EpochUsedError) Error() string {
	return fmt.Sprintf("epoch %d was already written under by an earlier process", e.Last)
}

// OpenReplica opens, for a follower, the storage of partition n of a
// declared queue, in the directory and with the storage options the
// engine uses, without loading it into the engine. It is refused while the
// engine serves the partition, and while another replica of it is open;
// meanwhile the engine refuses to serve it (ErrUnavailable) until
// CloseReplica.
func (m *Manager) OpenReplica(key Key, n uint32) (*storage.Partition, error) {
	key = key.norm()
	v, ok := m.queues.Load(key)
	if !ok {
		return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	q := v.(*queue)
	if int(n) >= len(q.parts) {
		return nil, core.Errorf(core.ErrNotFound, "queue %s has %d partitions; partition %d does not exist", q.key, len(q.parts), n)
	}
	q.openMu.Lock()
	defer q.openMu.Unlock()
	switch {
	case m.closed.Load():
		return nil, errClosed()
	case q.parts[n].Load() != nil:
		return nil, core.Errorf(core.ErrConflict, "partition %d of queue %s is served by this broker", n, q.key)
	case q.replicas[n] != nil:
		return nil, core.Errorf(core.ErrConflict, "partition %d of queue %s is already open as a replica", n, q.key)
	}
	lg, err := storage.OpenPartition(partitionDir(m.opts.Dir, q.key, n), m.opts.Storage)
	if err != nil {
		return nil, err
	}
	if q.replicas == nil {
		q.replicas = make(map[uint32]*storage.Partition)
	}
	q.replicas[n] = lg
	return lg, nil
}

// CloseReplica closes a replica OpenReplica opened; from then on the
// engine may serve the partition (recovering it from what replication
// wrote).
func (m *Manager) CloseReplica(key Key, n uint32) error {
	v, ok := m.queues.Load(key.norm())
	if !ok {
		return core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	q := v.(*queue)
	q.openMu.Lock()
	defer q.openMu.Unlock()
	lg := q.replicas[n]
	if lg == nil {
		return nil
	}
	delete(q.replicas, n)
	return lg.Close()
}

// TruncateReplica cuts the follower's replica of partition n back so that
// next is its next offset (storage.TruncatePartition): the records a
// former owner or a deposed owner's follower holds beyond what the new
// owner has. The replica is closed, cut and opened again; it returns the
// reopened storage.
func (m *Manager) TruncateReplica(key Key, n uint32, next uint64) (*storage.Partition, error) {
	return m.redoReplica(key, n, func(dir string) error { return storage.TruncatePartition(dir, next, m.opts.Storage) })
}

// ResetReplica empties the follower's replica of partition n and starts
// it at base (storage.ResetPartition): the owner's log starts past the
// replica's end, so the replica copies from the owner's first record on.
// Like TruncateReplica, it returns the reopened storage.
func (m *Manager) ResetReplica(key Key, n uint32, base uint64) (*storage.Partition, error) {
	return m.redoReplica(key, n, func(dir string) error { return storage.ResetPartition(dir, base, m.opts.Storage) })
}

// redoReplica closes the replica of partition n, runs change on its
// directory and opens it again.
func (m *Manager) redoReplica(key Key, n uint32, change func(dir string) error) (*storage.Partition, error) {
	key = key.norm()
	v, ok := m.queues.Load(key)
	if !ok {
		return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	q := v.(*queue)
	q.openMu.Lock()
	defer q.openMu.Unlock()
	lg := q.replicas[n]
	if lg == nil {
		return nil, core.Errorf(core.ErrConflict, "partition %d of queue %s is not open as a replica", n, q.key)
	}
	delete(q.replicas, n)
	if err := lg.Close(); err != nil {
		return nil, err
	}
	dir := partitionDir(m.opts.Dir, q.key, n)
	if err := change(dir); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, errClosed()
	}
	lg, err := storage.OpenPartition(dir, m.opts.Storage)
	if err != nil {
		return nil, err
	}
	q.replicas[n] = lg
	return lg, nil
}

// Release stops serving partition n of a queue this broker no longer owns
// and closes its storage, so that the partition can be opened again — as
// a follower's replica (OpenReplica), or by the engine once it is owned
// here again. Operations on the released *Partition answer ErrUnavailable;
// its subscriptions get nothing more (the caller ends them first). A
// partition that is not open is left as it is.
func (m *Manager) Release(key Key, n uint32) error {
	v, ok := m.queues.Load(key.norm())
	if !ok {
		return nil
	}
	q := v.(*queue)
	if int(n) >= len(q.parts) {
		return nil
	}
	q.openMu.Lock()
	defer q.openMu.Unlock()
	p := q.parts[n].Swap(nil)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.released = true
	p.mu.Unlock()
	p.stop()
	return p.closeStorage()
}
