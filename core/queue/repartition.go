package queue

import (
	"path/filepath"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// Changing a queue's partition count on this broker, for a repartition
// (S-123, S-124; docs/repartition.md) that the cluster's coordination
// drives: it decides the new count and version, and calls GrowQueue or
// ShrinkQueue on every broker. Both are crash-safe in the way a queue's
// creation and its delete are: the partition directories a grow adds are
// made durable before the catalog names them, and the ones a shrink
// retires go only after the catalog stopped naming them. A crash at any
// point leaves the old count or the new one in the catalog. Directories
// of partitions past the catalog's count are leftovers of such a crash:
// a grow empties them before it names them again (emptyDirs), so that no
// partition ever inherits a retired one's messages.

// ReasonRetired is the SUBSCRIPTION_CLOSED reason for the subscriptions
// of a partition ShrinkQueue retired (docs/protocol.md#reason-codes): the
// protocol has no code for a removed partition, and `owner_moved` makes
// an SDK's per-partition supervisor ask for the topology again, which no
// longer lists the partition (S-126). The engine cannot reach the
// sessions; the caller ends their subscriptions, as for a delete.
const ReasonRetired = wire.ReasonOwnerMoved

// GrowQueue raises the queue's partition count to count, a multiple of
// the current one (ErrBadRequest otherwise), and records version as its
// partitioning version. The new partitions are created (directories
// first, then the catalog that names them) and, unless
// Options.LazyPartitions, opened — with the hold Options.Holds gives
// them. The partitions the queue had keep serving throughout. The same
// count changes the version only. An undeclared queue is ErrNotFound.
func (m *Manager) GrowQueue(key Key, count uint32, version uint64) (QueueInfo, error) {
	return m.repartition(key, count, version, true)
}

// ShrinkQueue lowers the queue's partition count to count, a divisor of
// the current one (ErrBadRequest otherwise), and records version as its
// partitioning version. The partitions at and past count are retired:
// they stop (every call on them answers ErrNotFound, their subscriptions
// get nothing more and their acks are ignored — the caller closes the
// sessions' subscriptions with ReasonRetired), the catalog forgets them,
// and their files go with whatever they still hold: the caller retires a
// partition once it has drained (Partition.SettledBelow). A partition to
// retire that is open as a follower's replica is ErrConflict (close the
// replica first). The same count changes the version only.
func (m *Manager) ShrinkQueue(key Key, count uint32, version uint64) (QueueInfo, error) {
	return m.repartition(key, count, version, false)
}

func (m *Manager) repartition(key Key, count uint32, version uint64, grow bool) (QueueInfo, error) {
	key = key.norm()
	q, unlock, err := m.lockQueue(key)
	if err != nil {
		return QueueInfo{}, err
	}
	defer unlock()
	t := q.table()
	have := t.count()
	switch {
	case grow && (count < have || count%have != 0):
		return QueueInfo{}, core.Errorf(core.ErrBadRequest, "queue %s has %d partitions: a grow goes to a multiple of that, not %d", key, have, count)
	case !grow && (count == 0 || have%count != 0):
		return QueueInfo{}, core.Errorf(core.ErrBadRequest, "queue %s has %d partitions: a shrink goes to a divisor of that, not %d", key, have, count)
	}
	c := *q.cfg.Load()
	c.version = version
	if count == have {
		if err := m.setConfigLocked(q, c); err != nil {
			return QueueInfo{}, err
		}
		return q.info(), nil
	}
	info := q.info()
	info.PartitionCount, info.PartitioningVersion = count, version
	if grow {
		err = m.growLocked(q, t, info)
	} else {
		err = m.shrinkLocked(q, t, info)
	}
	if err != nil {
		return QueueInfo{}, err
	}
	q.cfg.Store(&c)
	return q.info(), nil
}

// growLocked adds the partitions of info past t's. Caller holds mu and
// q.openMu.
func (m *Manager) growLocked(q *queue, t *partTable, info QueueInfo) error {
	have := t.count()
	if err := m.emptyDirs(q.key, have, info.PartitionCount); err != nil {
		return err
	}
	for n := have; n < info.PartitionCount; n++ {
		if err := m.fs.MkdirAll(partitionDir(m.opts.Dir, q.key, n), 0o755); err != nil {
			return core.Errorf(core.ErrInternal, "grow queue %s: %v", q.key, err)
		}
	}
	if err := syncParents(m.fs, m.opts.Dir, partitionDir(m.opts.Dir, q.key, have)); err != nil {
		return core.Errorf(core.ErrInternal, "grow queue %s: %v", q.key, err)
	}
	nt := t.resized(info.PartitionCount)
	if err := m.openParts(q, nt, have); err != nil {
		return err
	}
	if err := m.saveCatalogLocked(&info); err != nil {
		closeParts(nt, have)
		return err
	}
	q.parts.Store(nt)
	return nil
}

// shrinkLocked retires the partitions of t at and past info's count.
// Caller holds mu and q.openMu.
func (m *Manager) shrinkLocked(q *queue, t *partTable, info QueueInfo) error {
	count := info.PartitionCount
	for n := count; n < t.count(); n++ {
		if q.replicas[n] != nil {
			return core.Errorf(core.ErrConflict, "partition %d of queue %s is open as a replica; close it before the shrink retires it", n, q.key)
		}
	}
	var retired []*Partition
	for n := count; n < t.count(); n++ {
		if p := t.slots[n].Load(); p != nil {
			retired = append(retired, p)
		}
	}
	dropped := m.closeForGood(retired, func(p *Partition) {
		p.retired = true
		for _, s := range p.subs {
			s.closed = true // its acks are ignored from now on
		}
		p.subs = nil
	})
	if err := m.saveCatalogLocked(&info); err != nil {
		// The queue keeps its count: the retired partitions open again
		// on first use.
		for n := count; n < t.count(); n++ {
			t.slots[n].Store(nil)
		}
		return err
	}
	q.parts.Store(t.resized(count))
	if dropped > 0 {
		m.log.Warn("queue: a shrink retired partitions that still held messages", "queue", q.key.String(), "partitions", count, "messages", dropped)
	}
	if err := m.sweepRetired(q.key, count, t.count()); err != nil {
		// The shrink took effect; the files go at the next Open or grow.
		m.log.Warn("queue: could not remove retired partitions' files", "queue", q.key.String(), "err", err)
	}
	return nil
}

// sweepRetired moves to the trash, and removes, the directories of the
// queue's partitions in [from, to): what a shrink retired. It runs once
// the catalog no longer names them; should it not finish (a crash, an
// error), a grow empties them before it names them again (emptyDirs).
func (m *Manager) sweepRetired(key Key, from, to uint32) error {
	for n := from; n < to; n++ {
		if err := m.trash(partitionDir(m.opts.Dir, key, n)); err != nil {
			return err
		}
	}
	m.emptyTrash()
	return nil
}

// emptyDirs removes, durably, whatever the directories of the queue's
// partitions in [from, to) hold: files a shrink retired, or a grow
// created, before a crash (a partition directory holds files only). A
// grow runs it before the catalog names these partitions, so that none
// of them inherits a retired partition's messages.
func (m *Manager) emptyDirs(key Key, from, to uint32) error {
	for n := from; n < to; n++ {
		dir := partitionDir(m.opts.Dir, key, n)
		names, err := m.fs.ReadDir(dir)
		if err != nil || len(names) == 0 {
			continue // no directory, or an empty one
		}
		for _, name := range names {
			if err := removeTree(m.fs, filepath.Join(dir, name)); err != nil {
				return core.Errorf(core.ErrInternal, "grow queue %s: remove what %s held: %v", key, dir, err)
			}
		}
		if err := m.fs.SyncDir(dir); err != nil {
			return core.Errorf(core.ErrInternal, "grow queue %s: %v", key, err)
		}
	}
	return nil
}
