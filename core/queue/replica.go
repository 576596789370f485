package queue

import (
	"fmt"
	"sync"
	"sync/atomic"

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
	return beginEpoch(&p.epoch, p.ReplicationLog, p.name, epoch)
}

// beginEpoch is BeginEpoch for a queue's or a stream's partition: cur
// holds the epoch recorded by this process (0: none yet).
func beginEpoch(cur *atomic.Uint64, log func() (*storage.Partition, error), name string, epoch uint64) error {
	had := cur.Load()
	if had == epoch {
		return nil
	}
	lg, err := log()
	if err != nil {
		return err
	}
	if h := lg.Epochs(); had == 0 && len(h) > 0 && h[len(h)-1].Epoch >= epoch {
		return &EpochUsedError{Last: h[len(h)-1].Epoch}
	}
	if err := lg.BeginEpoch(epoch); err != nil {
		return core.Errorf(core.ErrUnavailable, "%s: %v", name, err)
	}
	cur.Store(epoch)
	return nil
}

// EpochUsedError: the log's history already holds the epoch asked for, up
// to Last, from an earlier process; the owner needs an epoch above Last.
type EpochUsedError struct{ Last uint64 }

func (e *EpochUsedError) Error() string {
	return fmt.Sprintf("epoch %d was already written under by an earlier process", e.Last)
}

// OpenReplica opens, for a follower, the storage of partition n of a
// declared queue or stream (a stream's key has no group), in the
// directory and with the storage options the engine uses, without loading
// it into the engine. It is refused while the engine serves the
// partition, and while another replica of it is open; meanwhile the
// engine refuses to serve it (ErrUnavailable) until CloseReplica.
func (m *Manager) OpenReplica(key Key, n uint32) (*storage.Partition, error) {
	slot, err := m.replicaSlot(key, n)
	if err != nil {
		return nil, err
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	switch {
	case m.closed.Load():
		return nil, errClosed()
	case slot.gone != nil && slot.gone():
		return nil, core.Errorf(core.ErrNotFound, "%s was retired by a repartition", slot.what)
	case slot.served():
		return nil, core.Errorf(core.ErrConflict, "%s is served by this broker", slot.what)
	case slot.get() != nil:
		return nil, core.Errorf(core.ErrConflict, "%s is already open as a replica", slot.what)
	}
	if err := makeDirsDurable(m.fs, m.opts.Dir, slot.dir); err != nil {
		return nil, core.Errorf(core.ErrInternal, "create %s: %v", slot.dir, err)
	}
	lg, err := storage.OpenPartition(slot.dir, slot.opts)
	if err != nil {
		return nil, err
	}
	slot.put(lg)
	return lg, nil
}

// CloseReplica closes a replica OpenReplica opened; from then on the
// engine may serve the partition (recovering it from what replication
// wrote).
func (m *Manager) CloseReplica(key Key, n uint32) error {
	slot, err := m.replicaSlot(key, n)
	if err != nil {
		return err
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	lg := slot.get()
	if lg == nil {
		return nil
	}
	slot.put(nil)
	return lg.Close()
}

// TruncateReplica cuts the follower's replica of partition n back so that
// next is its next offset (storage.TruncatePartition): the records a
// former owner or a deposed owner's follower holds beyond what the new
// owner has. The replica is closed, cut and opened again; it returns the
// reopened storage.
func (m *Manager) TruncateReplica(key Key, n uint32, next uint64) (*storage.Partition, error) {
	return m.redoReplica(key, n, func(dir string, opts storage.Options) error { return storage.TruncatePartition(dir, next, opts) })
}

// ResetReplica empties the follower's replica of partition n and starts
// it at base (storage.ResetPartition): the owner's log starts past the
// replica's end, so the replica copies from the owner's first record on.
// Like TruncateReplica, it returns the reopened storage.
func (m *Manager) ResetReplica(key Key, n uint32, base uint64) (*storage.Partition, error) {
	return m.redoReplica(key, n, func(dir string, opts storage.Options) error { return storage.ResetPartition(dir, base, opts) })
}

// redoReplica closes the replica of partition n, runs change on its
// directory and opens it again.
func (m *Manager) redoReplica(key Key, n uint32, change func(dir string, opts storage.Options) error) (*storage.Partition, error) {
	slot, err := m.replicaSlot(key, n)
	if err != nil {
		return nil, err
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	lg := slot.get()
	if lg == nil {
		return nil, core.Errorf(core.ErrConflict, "%s is not open as a replica", slot.what)
	}
	slot.put(nil)
	if err := lg.Close(); err != nil {
		return nil, err
	}
	if err := change(slot.dir, slot.opts); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, errClosed()
	}
	lg, err = storage.OpenPartition(slot.dir, slot.opts)
	if err != nil {
		return nil, err
	}
	slot.put(lg)
	return lg, nil
}

// replicaSlot is where one partition's replica is kept while this broker
// follows it, for a queue's partition or a stream's alike.
type replicaSlot struct {
	what   string      // "partition 2 of queue q", for errors
	mu     sync.Locker // serialises opening and closing the partition's storage
	dir    string
	opts   storage.Options
	served func() bool // the engine has the partition open (under mu)
	gone   func() bool // nil, or whether a shrink retired the partition since (under mu)
	get    func() *storage.Partition
	put    func(*storage.Partition) // nil forgets it
}

// replicaSlot finds partition n of the queue or stream key names.
func (m *Manager) replicaSlot(key Key, n uint32) (replicaSlot, error) {
	key = key.norm()
	if !key.Group.Present {
		m.mu.Lock()
		info, ok := m.streams[key.Topic]
		m.mu.Unlock()
		if ok {
			if n >= info.PartitionCount {
				return replicaSlot{}, core.Errorf(core.ErrNotFound, "stream %s has %d partitions; partition %d does not exist", key.Topic, info.PartitionCount, n)
			}
			k := streamPartKey{key.Topic, n}
			slot := replicaSlot{
				what: fmt.Sprintf("partition %d of stream %s", n, key.Topic), mu: &m.mu,
				dir: streamPartitionDir(m.opts.Dir, key.Topic, n), opts: streamStorageOptions(m.opts.Storage, info),
				served: func() bool { return m.sparts[k] != nil },
			}
			slot.get, slot.put = entry(&m.sreplicas, k)
			return slot, nil
		}
	}
	v, ok := m.queues.Load(key)
	if !ok {
		return replicaSlot{}, core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	q := v.(*queue)
	if t := q.table(); n >= t.count() {
		return replicaSlot{}, q.noPartition(t, n)
	}
	slot := replicaSlot{
		what: fmt.Sprintf("partition %d of queue %s", n, q.key), mu: &q.openMu,
		dir: partitionDir(m.opts.Dir, q.key, n), opts: m.opts.Storage,
		gone:   func() bool { return n >= q.table().count() },
		served: func() bool { t := q.table(); return n < t.count() && t.slots[n].Load() != nil },
	}
	slot.get, slot.put = entry(&q.replicas, n)
	return slot, nil
}

// entry reads and writes k's value in the map *m (made on first put; a
// nil value deletes k).
func entry[K comparable](m *map[K]*storage.Partition, k K) (get func() *storage.Partition, put func(*storage.Partition)) {
	get = func() *storage.Partition { return (*m)[k] }
	put = func(lg *storage.Partition) {
		switch {
		case lg == nil:
			delete(*m, k)
		case *m == nil:
			*m = map[K]*storage.Partition{k: lg}
		default:
			(*m)[k] = lg
		}
	}
	return get, put
}

// Release stops serving partition n of a queue this broker no longer owns
// and closes its storage, so that the partition can be opened again — as
// a follower's replica (OpenReplica), or by the engine once it is owned
// here again. Operations on the released *Partition answer ErrUnavailable;
// its subscriptions get nothing more (the caller ends them first). A
// partition that is not open is left as it is.
func (m *Manager) Release(key Key, n uint32) error {
	key = key.norm()
	if kind, ok := m.Kind(key.Topic); ok && kind == KindStream && !key.Group.Present {
		return m.releaseStream(streamPartKey{key.Topic, n})
	}
	v, ok := m.queues.Load(key)
	if !ok {
		return nil
	}
	q := v.(*queue)
	q.openMu.Lock()
	defer q.openMu.Unlock()
	t := q.table()
	if n >= t.count() {
		return nil
	}
	p := t.slots[n].Swap(nil)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.released = true
	p.mu.Unlock()
	p.stop()
	return p.closeStorage()
}

// releaseStream is Release for a stream's partition: its subscriptions
// end and its log closes, under the lock that opening it takes, so that
// nothing opens the directory while it is still open.
func (m *Manager) releaseStream(k streamPartKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.sparts[k]
	if sp == nil {
		return nil
	}
	delete(m.sparts, k)
	return sp.Close()
}
