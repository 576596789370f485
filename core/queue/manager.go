// Package queue is the work-queue engine: durable (topic, group) queues
// of N partitions on top of core/storage, with competing-consumer
// delivery, prefetch credit, leases, retries, delays, TTL expiry and
// dead-lettering (S-15…S-25, S-30…S-40, S-43…S-67 in docs/semantics.md).
// README.md describes the
// record and state formats, what is persisted and the memory cost.
package queue

import (
	"cmp"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
	"github.com/fibrilgo/fibril/core/latency"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// defaultMaxRetries is the retry limit of a queue that never set one (S-60).
const defaultMaxRetries = 5

// Manager owns every queue and stream of one broker. Lookups on the hot
// path (Partition, Kind) go through sync.Maps; mu only serializes
// declarations and catalog writes.
type Manager struct {
	opts     Options
	clock    clock.Clock
	fs       storage.FS
	log      *slog.Logger
	settings func() Settings

	mu      sync.Mutex // declarations, auto-creation, catalog writes
	queues  sync.Map   // Key → *queue
	kinds   sync.Map   // topic → Kind
	streams map[string]StreamInfo
	sparts  map[streamPartKey]*StreamPartition // opened stream partitions, under mu

	// deliverLatency: publish (the broker's receive time) to first
	// delivery, per message (PublishToDeliver).
	deliverLatency *latency.Histogram

	limits     atomic.Pointer[map[Key]Limit] // SetLimits
	refuse     atomic.Pointer[string]        // RefuseWrites
	limitStats limitStats
	// sreplicas are a follower's replicas of stream partitions (OpenReplica), under mu.
	sreplicas map[streamPartKey]*storage.Partition

	qmu         sync.Mutex
	quarantined []QuarantineInfo

	closed atomic.Bool
	dlqWG  sync.WaitGroup // dead-letter copies not yet finished
	dlqRR  atomic.Uint64  // round-robin over a DLQ target's partitions

	stats engineStats
}

// engineStats are the process-lifetime counters behind Stats.
type engineStats struct {
	published, delivered, acked, redelivered, expired, deadLettered, discarded atomic.Uint64
	streamPublished, streamDelivered, cursorCommits                            atomic.Uint64
}

// queue is one (topic, group) queue. Its config may change on redeclare,
// so readers load it atomically at the moment they need it.
type queue struct {
	key   Key
	parts atomic.Pointer[partTable] // replaced whole by GrowQueue and ShrinkQueue, under openMu
	cfg   atomic.Pointer[queueConfig]
	limit atomic.Pointer[Limit] // nil: no limit (limits.go)

	openMu sync.Mutex // serialises opening a partition on first use, and repartitions

	// replicas holds the storage partitions opened for a follower
	// (OpenReplica), by index; guarded by openMu. The engine does not open
	// a partition while it is a replica here.
	replicas map[uint32]*storage.Partition
}

// partTable is a queue's partitions by index, each nil until opened
// (Options.LazyPartitions). A table's length never changes: a repartition
// stores a new table, so a reader that loaded one sees a consistent list.
type partTable struct {
	slots []atomic.Pointer[Partition]
}

func newPartTable(count uint32) *partTable {
	return &partTable{slots: make([]atomic.Pointer[Partition], count)}
}

// count is the number of partitions.
func (t *partTable) count() uint32 { return uint32(len(t.slots)) }

// resized returns a table of count slots holding t's partitions below
// count. Caller holds the queue's openMu (slots only change under it).
func (t *partTable) resized(count uint32) *partTable {
	nt := newPartTable(count)
	for i := range min(count, t.count()) {
		nt.slots[i].Store(t.slots[i].Load())
	}
	return nt
}

// table returns the queue's current partition table.
func (q *queue) table() *partTable { return q.parts.Load() }

// opened returns the partitions that are open, in index order.
func (q *queue) opened() []*Partition {
	t := q.table()
	out := make([]*Partition, 0, len(t.slots))
	for i := range t.slots {
		if p := t.slots[i].Load(); p != nil {
			out = append(out, p)
		}
	}
	return out
}

type queueConfig struct {
	dlq        wire.Option[wire.DLQPolicy]
	maxRetries uint32
	defaultTTL wire.Option[uint64]
	version    uint64 // the partitioning version (docs/protocol.md#topology)
}

func configOf(info QueueInfo) queueConfig {
	return queueConfig{dlq: info.DLQ, maxRetries: info.MaxRetries, defaultTTL: info.DefaultTTLMillis, version: info.PartitioningVersion}
}

func (q *queue) info() QueueInfo {
	c := q.cfg.Load()
	return QueueInfo{
		Key:                 q.key,
		PartitionCount:      q.table().count(),
		PartitioningVersion: c.version,
		DLQ:                 c.dlq,
		MaxRetries:          c.maxRetries,
		DefaultTTLMillis:    c.defaultTTL,
	}
}

// Open creates opts.Dir or recovers everything in it: the catalog and
// every partition of every queue. A quarantined partition does not fail
// Open; it is listed by Quarantined and answers ErrInternal on use.
func Open(opts Options) (*Manager, error) {
	if opts.Dir == "" {
		return nil, core.Errorf(core.ErrInternal, "queue engine: no data directory configured")
	}
	m := &Manager{opts: opts, streams: map[string]StreamInfo{}, sparts: map[streamPartKey]*StreamPartition{},
		deliverLatency: latency.New(latency.Exponential(0.001, 2, 16)...)} // 1 ms … ~33 s
	m.fs = opts.Storage.FS
	if m.fs == nil {
		m.fs = storage.OSFS{}
		m.opts.Storage.FS = m.fs
	}
	m.log = opts.Logger
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.opts.Storage.Logger == nil {
		m.opts.Storage.Logger = m.log
	}
	m.settings = opts.Settings
	if m.settings == nil {
		m.settings = DefaultSettings
	}
	m.clock = opts.Clock
	if m.clock == nil {
		m.clock = clock.Real{NowFunc: opts.Now}
	}
	if err := m.fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, core.Errorf(core.ErrInternal, "queue engine: create data directory %s: %v", opts.Dir, err)
	}
	// A freshly created Dir must survive a power loss with the catalog
	// that will be renamed into it.
	if err := m.fs.SyncDir(filepath.Dir(filepath.Clean(opts.Dir))); err != nil {
		m.log.Warn("queue: could not fsync the parent of the data directory", "dir", opts.Dir, "err", err)
	}
	m.emptyTrash() // what a delete left before a crash or restart
	cat, err := readCatalog(m.fs, opts.Dir)
	if err != nil {
		return nil, core.Errorf(core.ErrInternal, "queue engine: queue catalog in %s is unreadable: %v", opts.Dir, err)
	}
	for _, d := range cat.Deleted {
		if d.Kind == KindStream.String() {
			m.kinds.Store(d.Topic, KindStream)
		} else {
			m.kinds.Store(d.Topic, KindQueue)
		}
	}
	for _, s := range cat.Streams {
		si := fromCatalogStream(s)
		m.streams[si.Topic] = si
		m.kinds.Store(si.Topic, KindStream)
	}
	for _, cq := range cat.Queues {
		info, err := fromCatalogQueue(cq)
		if err != nil {
			m.closeAll()
			return nil, core.Errorf(core.ErrInternal, "queue engine: queue catalog in %s is damaged: %v", opts.Dir, err)
		}
		q, err := m.openQueue(info)
		if err != nil {
			m.closeAll()
			return nil, err
		}
		m.queues.Store(info.Key, q)
		m.kinds.Store(info.Topic, KindQueue)
	}
	if !opts.LazyPartitions {
		// Open (and recover) every stream partition now, like the queues:
		// retention by age then runs after a restart even on a stream
		// nobody reads or writes.
		for topic, si := range m.streams {
			for n := range si.PartitionCount {
				if _, err := m.StreamPartition(topic, n); err != nil {
					m.closeAll()
					return nil, err
				}
			}
		}
	}
	return m, nil
}

// openQueue opens (creating when needed) every partition of a queue, or
// none with Options.LazyPartitions: then each opens on first use.
func (m *Manager) openQueue(info QueueInfo) (*queue, error) {
	q := &queue{key: info.Key}
	t := newPartTable(info.PartitionCount)
	q.parts.Store(t)
	c := configOf(info)
	q.cfg.Store(&c)
	if l := m.limits.Load(); l != nil {
		q.setLimit(*l)
	}
	if err := m.openParts(q, t, 0); err != nil {
		return nil, err
	}
	return q, nil
}

// openParts opens the partitions of t from index first on, unless
// Options.LazyPartitions; on an error it closes the ones it opened.
func (m *Manager) openParts(q *queue, t *partTable, first uint32) error {
	if m.opts.LazyPartitions {
		return nil
	}
	for n := first; n < t.count(); n++ {
		p, err := m.openPartition(q, n)
		if err != nil {
			closeParts(t, first)
			return err
		}
		t.slots[n].Store(p)
	}
	return nil
}

// closeParts stops and closes the open partitions of t from index first
// on and empties their slots.
func closeParts(t *partTable, first uint32) {
	for n := first; n < t.count(); n++ {
		if p := t.slots[n].Swap(nil); p != nil {
			p.stop()
			p.closeStorage()
		}
	}
}

// part returns partition n, opening (and recovering) it on first use.
func (m *Manager) part(q *queue, n uint32) (*Partition, error) {
	t := q.table()
	if n >= t.count() {
		return nil, q.noPartition(t, n)
	}
	if p := t.slots[n].Load(); p != nil {
		return p, nil
	}
	q.openMu.Lock()
	defer q.openMu.Unlock()
	if t = q.table(); n >= t.count() { // a shrink came first
		return nil, q.noPartition(t, n)
	}
	if p := t.slots[n].Load(); p != nil {
		return p, nil
	}
	if m.closed.Load() {
		return nil, errClosed()
	}
	if q.replicas[n] != nil {
		return nil, core.Errorf(core.ErrUnavailable, "partition %d of queue %s is a replica on this broker, not served here yet", n, q.key)
	}
	p, err := m.openPartition(q, n)
	if err != nil {
		return nil, err
	}
	t.slots[n].Store(p)
	return p, nil
}

// noPartition is the error for a partition index past the queue's count.
func (q *queue) noPartition(t *partTable, n uint32) error {
	return core.Errorf(core.ErrNotFound, "queue %s has %d partitions; partition %d does not exist", q.key, t.count(), n)
}

// Close stops timers, lets dead-letter copies in progress finish, then
// flushes and closes every partition (pending publish confirms complete
// first). Later calls on the engine answer ErrUnavailable.
func (m *Manager) Close() error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Taking mu waits out a declaration in progress; later ones see
	// closed. It is not held below: a dead-letter copy finishing may need
	// it to auto-create its target (and then fails cleanly).
	m.mu.Lock()
	var parts []*Partition
	var replicas []*storage.Partition // a follower's, left open by its caller
	m.queues.Range(func(_, v any) bool {
		q := v.(*queue)
		q.openMu.Lock() // an open in progress finishes; later ones see closed
		parts = append(parts, q.opened()...)
		for n, lg := range q.replicas {
			replicas = append(replicas, lg)
			delete(q.replicas, n)
		}
		q.openMu.Unlock()
		return true
	})
	for k, lg := range m.sreplicas {
		replicas = append(replicas, lg)
		delete(m.sreplicas, k)
	}
	m.mu.Unlock()
	for _, p := range parts {
		p.stop()
	}
	m.dlqWG.Wait()
	var errs []error
	for _, lg := range replicas {
		if err := lg.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, p := range parts {
		if err := p.closeStorage(); err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.Lock()
	sparts := m.sparts
	m.sparts = nil
	m.mu.Unlock()
	for _, sp := range sparts {
		if err := sp.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return core.Errorf(core.ErrInternal, "queue engine: close: %v", err)
	}
	return nil
}

// closeAll releases what a failed Open had opened.
func (m *Manager) closeAll() {
	for _, sp := range m.sparts {
		sp.Close()
	}
	m.queues.Range(func(_, v any) bool {
		for _, p := range v.(*queue).opened() {
			p.stop()
			p.closeStorage()
		}
		return true
	})
}

func errClosed() error {
	return core.Errorf(core.ErrUnavailable, "the queue engine is shutting down")
}

// Kind reports what topic is, if it has been declared or auto-created.
func (m *Manager) Kind(topic string) (Kind, bool) {
	v, ok := m.kinds.Load(topic)
	if !ok {
		return 0, false
	}
	return v.(Kind), true
}

// DeclareQueue creates a queue or confirms an existing one (S-18, S-20,
// docs/protocol.md#declare). Redeclaring may change the DLQ policy, max_retries and the
// default TTL (an absent field keeps the current value), never the
// partition count.
func (m *Manager) DeclareQueue(spec QueueSpec) (QueueInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return QueueInfo{}, errClosed()
	}
	var cur *QueueInfo
	if v, ok := m.queues.Load(spec.Key.norm()); ok {
		info := v.(*queue).info()
		cur = &info
	}
	info, err := ResolveQueue(cur, spec, m.settings().DefaultPartitionCount, m.Kind)
	if err != nil {
		return QueueInfo{}, err
	}
	return m.applyQueueLocked(info)
}

// ApplyQueue installs a declaration decided elsewhere (the cluster
// catalog): the queue is created when missing and its settings and
// partitioning version replaced when they differ. The partition count of
// an existing queue does not change here: a repartition changes it with
// GrowQueue or ShrinkQueue, after which ApplyQueue follows the new count.
func (m *Manager) ApplyQueue(info QueueInfo) (QueueInfo, error) {
	info.Key = info.Key.norm()
	if err := checkKey(info.Key); err != nil {
		return QueueInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return QueueInfo{}, errClosed()
	}
	if k, ok := m.Kind(info.Topic); ok && k == KindStream {
		return QueueInfo{}, core.Errorf(core.ErrBadRequest, "topic %q is a stream; a topic is a queue or a stream for life", info.Topic)
	}
	return m.applyQueueLocked(info)
}

func (m *Manager) applyQueueLocked(info QueueInfo) (QueueInfo, error) {
	v, ok := m.queues.Load(info.Key)
	if !ok {
		q, err := m.createQueueLocked(info)
		if err != nil {
			return QueueInfo{}, err
		}
		return q.info(), nil
	}
	q := v.(*queue)
	if have := q.table().count(); have != info.PartitionCount {
		return QueueInfo{}, core.Errorf(core.ErrConflict, "queue %s has %d partitions here, not %d (a repartition changes the count: GrowQueue, ShrinkQueue)", info.Key, have, info.PartitionCount)
	}
	if err := m.setConfigLocked(q, configOf(info)); err != nil {
		return QueueInfo{}, err
	}
	return q.info(), nil
}

// setConfigLocked replaces the queue's settings and version, in the
// catalog first, when they differ.
func (m *Manager) setConfigLocked(q *queue, c queueConfig) error {
	if *q.cfg.Load() == c {
		return nil
	}
	info := q.info()
	info.DLQ, info.MaxRetries, info.DefaultTTLMillis, info.PartitioningVersion = c.dlq, c.maxRetries, c.defaultTTL, c.version
	if err := m.saveCatalogLocked(&info); err != nil {
		return err
	}
	q.cfg.Store(&c)
	return nil
}

// norm makes an absent group one map key, whatever its zero-or-not Value.
func (k Key) norm() Key {
	if !k.Group.Present {
		k.Group.Value = ""
	}
	return k
}

// createQueueLocked makes a new queue durable: partition directories
// first, then the catalog that names it; only then is it visible.
func (m *Manager) createQueueLocked(info QueueInfo) (*queue, error) {
	group := "@default"
	if g, ok := info.Group.Get(); ok {
		group = g
	}
	if err := m.leftovers(filepath.Join(m.opts.Dir, "q", info.Topic, group)); err != nil {
		return nil, err
	}
	if err := makePartitionDirs(m.fs, m.opts.Dir, info.Key, info.PartitionCount); err != nil {
		return nil, core.Errorf(core.ErrInternal, "create queue %s: %v", info.Key, err)
	}
	q, err := m.openQueue(info)
	if err != nil {
		return nil, err
	}
	if err := m.saveCatalogLocked(&info); err != nil {
		for _, p := range q.opened() {
			p.stop()
			p.closeStorage()
		}
		return nil, err
	}
	m.queues.Store(info.Key, q)
	m.kinds.Store(info.Topic, KindQueue)
	return q, nil
}

// saveCatalogLocked writes the catalog: every known queue and stream,
// with extra (when not nil) as the declaration of its queue — one being
// created or changed, before the engine shows the change.
func (m *Manager) saveCatalogLocked(extra *QueueInfo) error {
	if err := writeCatalog(m.fs, m.opts.Dir, m.catalogLocked(extra)); err != nil {
		return core.Errorf(core.ErrInternal, "save queue catalog in %s: %v", m.opts.Dir, err)
	}
	return nil
}

// catalogLocked is the catalog as the engine holds it, with extra (a
// queue being created or changed) when not nil.
func (m *Manager) catalogLocked(extra *QueueInfo) catalogFile {
	var c catalogFile
	hasQueue := map[string]bool{}
	m.queues.Range(func(_, v any) bool {
		q := v.(*queue)
		if extra == nil || q.key != extra.Key {
			c.Queues = append(c.Queues, toCatalogQueue(q.info()))
			hasQueue[q.key.Topic] = true
		}
		return true
	})
	if extra != nil {
		c.Queues = append(c.Queues, toCatalogQueue(*extra))
		hasQueue[extra.Topic] = true
	}
	slices.SortFunc(c.Queues, func(a, b catalogQueue) int {
		return cmp.Compare(keyString(a.Topic, a.Group), keyString(b.Topic, b.Group))
	})
	for _, s := range m.streams {
		c.Streams = append(c.Streams, toCatalogStream(s))
	}
	slices.SortFunc(c.Streams, func(a, b catalogStream) int { return cmp.Compare(a.Topic, b.Topic) })
	// A kind with no queue or stream left is a deleted topic's (delete.go).
	m.kinds.Range(func(k, v any) bool {
		topic, kind := k.(string), v.(Kind)
		if _, ok := m.streams[topic]; kind == KindStream && !ok {
			c.Deleted = append(c.Deleted, catalogDeleted{Topic: topic, Kind: kind.String()})
		} else if kind == KindQueue && !hasQueue[topic] {
			c.Deleted = append(c.Deleted, catalogDeleted{Topic: topic, Kind: kind.String()})
		}
		return true
	})
	slices.SortFunc(c.Deleted, func(a, b catalogDeleted) int { return cmp.Compare(a.Topic, b.Topic) })
	return c
}

func keyString(topic string, group *string) string {
	if group == nil {
		return topic
	}
	return topic + "/" + *group
}

// DeclareStream records a stream and its spec (S-70, docs/protocol.md#declare); nothing
// is served yet. Idempotent; a different explicit partition count is a
// conflict.
func (m *Manager) DeclareStream(spec StreamSpec) (StreamInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return StreamInfo{}, errClosed()
	}
	var cur *StreamInfo
	if s, ok := m.streams[spec.Topic]; ok {
		cur = &s
	}
	si, err := ResolveStream(cur, spec, m.settings().DefaultPartitionCount, m.Kind)
	if err != nil || cur != nil {
		return si, err
	}
	return m.applyStreamLocked(si)
}

// ApplyStream installs a stream declaration decided elsewhere (the
// cluster catalog). Idempotent.
func (m *Manager) ApplyStream(si StreamInfo) (StreamInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return StreamInfo{}, errClosed()
	}
	if s, ok := m.streams[si.Topic]; ok {
		return s, nil
	}
	if k, ok := m.Kind(si.Topic); ok && k == KindQueue {
		return StreamInfo{}, core.Errorf(core.ErrBadRequest, "topic %q is a queue; a topic is a queue or a stream for life", si.Topic)
	}
	return m.applyStreamLocked(si)
}

func (m *Manager) applyStreamLocked(si StreamInfo) (StreamInfo, error) {
	if err := m.leftovers(filepath.Join(m.opts.Dir, "s", si.Topic)); err != nil {
		return StreamInfo{}, err
	}
	m.streams[si.Topic] = si
	if err := m.saveCatalogLocked(nil); err != nil {
		delete(m.streams, si.Topic)
		return StreamInfo{}, err
	}
	m.kinds.Store(si.Topic, KindStream)
	return si, nil
}

// HasQueue reports whether the engine knows the queue (lock-free).
func (m *Manager) HasQueue(key Key) bool {
	_, ok := m.queues.Load(key.norm())
	return ok
}

// QueueInfo describes one queue (ok false when it is not declared).
func (m *Manager) QueueInfo(key Key) (QueueInfo, bool) {
	v, ok := m.queues.Load(key.norm())
	if !ok {
		return QueueInfo{}, false
	}
	return v.(*queue).info(), true
}

// Queues lists every queue, sorted by topic then group.
func (m *Manager) Queues() []QueueInfo {
	var out []QueueInfo
	for _, q := range m.sortedQueues() {
		out = append(out, q.info())
	}
	return out
}

// sortedQueues returns every queue, sorted by topic then group.
func (m *Manager) sortedQueues() []*queue {
	var qs []*queue
	m.queues.Range(func(_, v any) bool {
		qs = append(qs, v.(*queue))
		return true
	})
	slices.SortFunc(qs, func(a, b *queue) int { return cmp.Compare(a.key.String(), b.key.String()) })
	return qs
}

// PartitionDepth is one partition's Depth, for per-channel metrics.
type PartitionDepth struct {
	Key       Key
	Partition uint32
	Depth
}

// Depths returns the Depth of every open queue partition (all of them,
// unless Options.LazyPartitions), sorted by queue then partition.
func (m *Manager) Depths() []PartitionDepth {
	var out []PartitionDepth
	for _, q := range m.sortedQueues() {
		for _, p := range q.opened() {
			out = append(out, PartitionDepth{Key: q.key, Partition: p.index, Depth: p.Depth()})
		}
	}
	return out
}

// Streams lists every declared stream, sorted by topic.
func (m *Manager) Streams() []StreamInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]StreamInfo, 0, len(m.streams))
	for _, s := range m.streams {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b StreamInfo) int { return cmp.Compare(a.Topic, b.Topic) })
	return out
}

// Partition returns one queue partition. Without AutoCreate an undeclared
// queue is ErrNotFound; with it (standalone, S-21) the queue is created
// with one partition and no DLQ policy. A stream topic is ErrBadRequest:
// the engine never creates a queue on a stream topic (S-22, S-77).
func (m *Manager) Partition(key Key, partition uint32) (*Partition, error) {
	key = key.norm()
	v, ok := m.queues.Load(key)
	if !ok {
		q, err := m.lookupOrCreate(key, m.opts.AutoCreate)
		if err != nil {
			return nil, err
		}
		v = q
	}
	return m.part(v.(*queue), partition)
}

// lookupOrCreate finds a queue not yet in the map, creating it if create.
func (m *Manager) lookupOrCreate(key Key, create bool) (*queue, error) {
	key = key.norm()
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if k, ok := m.Kind(key.Topic); ok && k == KindStream {
		return nil, core.Errorf(core.ErrBadRequest, "topic %q is a stream; use a stream subscribe", key.Topic)
	}
	if !create {
		if v, ok := m.queues.Load(key); ok {
			return v.(*queue), nil
		}
		return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.queues.Load(key); ok {
		return v.(*queue), nil
	}
	if m.closed.Load() {
		return nil, errClosed()
	}
	if k, ok := m.Kind(key.Topic); ok && k == KindStream {
		return nil, core.Errorf(core.ErrBadRequest, "topic %q is a stream; use a stream subscribe", key.Topic)
	}
	return m.createQueueLocked(QueueInfo{Key: key, PartitionCount: 1, MaxRetries: defaultMaxRetries})
}

// PublishToDeliver is the time from a queue message's receipt by the
// broker to its first delivery, in milliseconds (the record keeps its
// receive time in ms): the fibril_broker_publish_to_deliver_seconds
// histogram. Redeliveries are not counted.
func (m *Manager) PublishToDeliver() *latency.Histogram { return m.deliverLatency }

// Stats returns the process-lifetime counters (S-163).
func (m *Manager) Stats() Stats {
	s := &m.stats
	return Stats{
		Published:    s.published.Load(),
		Delivered:    s.delivered.Load(),
		Acked:        s.acked.Load(),
		Redelivered:  s.redelivered.Load(),
		Expired:      s.expired.Load(),
		DeadLettered: s.deadLettered.Load(),
		Discarded:    s.discarded.Load(),

		StreamPublished: s.streamPublished.Load(),
		StreamDelivered: s.streamDelivered.Load(),

		OverflowRejected: m.limitStats.rejected.Load(),
		OverflowDropped:  m.limitStats.dropped.Load(),
		CursorCommits:    s.cursorCommits.Load(),
	}
}

// Quarantined lists the partitions that refuse to serve because their
// files are damaged (found at Open or later on a read).
func (m *Manager) Quarantined() []QuarantineInfo {
	m.qmu.Lock()
	defer m.qmu.Unlock()
	return slices.Clone(m.quarantined)
}

func (m *Manager) addQuarantine(p *Partition, err error) {
	m.qmu.Lock()
	defer m.qmu.Unlock()
	for _, qi := range m.quarantined {
		if qi.Key == p.q.key && qi.Partition == p.index {
			return
		}
	}
	m.quarantined = append(m.quarantined, QuarantineInfo{Key: p.q.key, Partition: p.index, Err: err})
}

func (m *Manager) nowMs() int64 { return m.clock.Now().UnixMilli() }
