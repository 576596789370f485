package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
)

// Deleting a queue or a stream on a standalone broker
// (docs/admin.md#delete). The order makes a crash at any step safe: the
// partitions stop, the catalog forgets the name, the directory moves into
// the trash (one rename) and the trash is emptied — at once, or at the
// next Open. A crash before the rename leaves a directory no catalog
// entry names: a standalone broker that creates a queue or stream moves
// such leftovers to the trash first (leftovers), so a name declared again
// never inherits the old files.

// trashDir holds directories of deleted queues and streams until they are
// removed.
const trashDir = ".trash"

// DeleteReport is what a delete removed.
type DeleteReport struct {
	Partitions int    `json:"partitions"`
	Messages   uint64 `json:"messages"` // unsettled messages dropped (queues)
	Records    uint64 `json:"records"`  // retained records dropped (streams)
}

// DeleteQueue removes a queue: its partitions stop (their subscriptions
// get nothing more; the caller tells the clients), its files go, and the
// name may be declared again — as a queue (S-22). Messages in flight refuse it with ErrConflict unless
// force. An unknown queue is ErrNotFound.
func (m *Manager) DeleteQueue(key Key, force bool) (DeleteReport, error) {
	key = key.norm()
	q, unlock, err := m.lockQueue(key)
	if err != nil {
		return DeleteReport{}, err
	}
	defer unlock()
	parts := q.opened()
	var rep DeleteReport
	for _, p := range parts {
		d := p.Depth()
		if d.Inflight > 0 && !force {
			return DeleteReport{}, core.Errorf(core.ErrConflict, "queue %s has %d messages in flight (partition %d); let the consumers settle them, or delete with force",
				key, d.Inflight, p.index)
		}
	}
	rep.Messages = m.closeForGood(parts, func(p *Partition) { p.released = true })
	t := q.table()
	for n := range t.slots {
		t.slots[n].Store(nil)
	}
	rep.Partitions = len(t.slots)
	group := "@default"
	if g, ok := key.Group.Get(); ok {
		group = g
	}
	m.queues.Delete(key) // the topic's kind stays: it may come back as a queue only (S-22)
	if err := m.saveCatalogLocked(nil); err != nil {
		return rep, err
	}
	if err := m.trash(filepath.Join(m.opts.Dir, "q", key.Topic, group)); err != nil {
		return rep, err
	}
	m.emptyTrash()
	return rep, nil
}

// DeleteStream removes a stream: its partitions close (subscriptions end;
// the caller tells the clients), its records and durable cursors go, and
// the name may be declared again — as a stream (S-22).
func (m *Manager) DeleteStream(topic string) (DeleteReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() || m.sparts == nil {
		return DeleteReport{}, errClosed()
	}
	si, ok := m.streams[topic]
	if !ok {
		return DeleteReport{}, core.Errorf(core.ErrNotFound, "stream %s is not declared", topic)
	}
	rep := DeleteReport{Partitions: int(si.PartitionCount)}
	for n := range si.PartitionCount {
		k := streamPartKey{topic, n}
		if sp := m.sparts[k]; sp != nil {
			first, next := sp.log.Bounds()
			rep.Records += next - first
			_ = sp.Close()
			delete(m.sparts, k)
		}
	}
	delete(m.streams, topic) // the topic's kind stays: it may come back as a stream only (S-22)
	if err := m.saveCatalogLocked(nil); err != nil {
		return rep, err
	}
	if err := m.trash(filepath.Join(m.opts.Dir, "s", topic)); err != nil {
		return rep, err
	}
	m.emptyTrash()
	return rep, nil
}

// lockQueue finds a declared queue and takes the locks that changing its
// partitions needs: the manager's mu, then the queue's openMu. unlock
// releases both.
func (m *Manager) lockQueue(key Key) (q *queue, unlock func(), err error) {
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return nil, nil, errClosed()
	}
	v, ok := m.queues.Load(key)
	if !ok {
		m.mu.Unlock()
		return nil, nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	q = v.(*queue)
	q.openMu.Lock()
	return q, func() { q.openMu.Unlock(); m.mu.Unlock() }, nil
}

// closeForGood stops partitions that go away (a delete, a shrink), mark
// setting under each one's lock what its calls answer from then on, lets
// the dead-letter copies they started finish, and closes their storage.
// It returns how many unsettled messages they held.
func (m *Manager) closeForGood(parts []*Partition, mark func(p *Partition)) (unsettled uint64) {
	for _, p := range parts {
		p.mu.Lock()
		unsettled += p.unsettled
		mark(p)
		p.mu.Unlock()
		p.stop()
	}
	m.dlqWG.Wait() // dead-letter copies from these partitions finish first
	for _, p := range parts {
		_ = p.closeStorage()
	}
	return unsettled
}

// trashSeq makes trash names unique within a process.
var trashSeq atomic.Uint64

// leftovers moves to the trash what a delete interrupted by a crash left
// of a queue (k) or stream (k.Topic, stream true) about to be created on
// a standalone broker. In a cluster a directory may hold a follower's
// copy, so nothing is touched there.
func (m *Manager) leftovers(dir string) error {
	if !m.opts.AutoCreate {
		return nil
	}
	if err := m.trash(dir); err != nil {
		return err
	}
	m.emptyTrash()
	return nil
}

// trash moves dir (when it exists) into the trash directory, durably.
func (m *Manager) trash(dir string) error {
	if _, err := m.fs.ReadDir(dir); err != nil {
		return nil // nothing on disk (a queue never opened, or already gone)
	}
	td := filepath.Join(m.opts.Dir, trashDir)
	if err := m.fs.MkdirAll(td, 0o755); err != nil {
		return core.Errorf(core.ErrInternal, "delete: create %s: %v", td, err)
	}
	dst := filepath.Join(td, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.FormatUint(trashSeq.Add(1), 10))
	if err := m.fs.Rename(dir, dst); errors.Is(err, fs.ErrNotExist) {
		return nil // listed as empty by a file system that has no such directory
	} else if err != nil {
		return core.Errorf(core.ErrInternal, "delete: move %s to the trash: %v", dir, err)
	}
	for _, d := range []string{filepath.Dir(dir), td} {
		if err := m.fs.SyncDir(d); err != nil {
			return core.Errorf(core.ErrInternal, "delete: %v", err)
		}
	}
	return nil
}

// emptyTrash removes what the trash holds. A failure only leaves files
// for the next Open to remove.
func (m *Manager) emptyTrash() {
	td := filepath.Join(m.opts.Dir, trashDir)
	if err := removeTree(m.fs, td); err != nil {
		m.log.Warn("queue: could not empty the trash; the next start tries again", "dir", td, "err", err)
	}
}

// removeTree removes dir and everything below it (storage.FS has no
// RemoveAll; a name that ReadDir cannot list is a file).
func removeTree(fsys storage.FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		if rerr := fsys.Remove(dir); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("%w (%v)", rerr, err)
		}
		return nil
	}
	for _, n := range names {
		if err := removeTree(fsys, filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return fsys.Remove(dir)
}
