package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// A StreamPartition is one partition of a Plexus stream (docs/semantics.md,
// S-70 … S-82): an append-only log that every subscription reads on its own
// (fan-out; reading never removes a record), with whole-segment retention
// by age, bytes and records, and broker-side cursors for durable
// subscription names. It is the same storage partition a queue uses — the
// same group commit, crash rules and recovery — opened in retention-by-
// limits mode; the state journal beside the log holds the cursors.
//
// Tiers (S-82): durable records are delivered and confirmed after their
// fsync; speculative records are delivered at once (stamped
// fibril.speculative: "1") and confirmed after their fsync; ephemeral
// records are delivered and confirmed at once and written without a
// per-record fsync (the log is flushed every ephemeralFlush).
type StreamPartition struct {
	info       StreamInfo
	index      uint32
	name       string
	log        *storage.Partition
	maxPayload int // broker.max_message_bytes; 0 = no limit
	stats      *engineStats
	counts     partCounters            // for the admin API (admin.go)
	refuse     *atomic.Pointer[string] // the manager's RefuseWrites; nil in tests that open a partition alone

	// gate holds a replicated durable stream's confirms until its
	// followers have the records (Options.Gates); nil: none.
	gate  ConfirmGate
	epoch atomic.Uint64 // the assignment epoch the log's history ends with, once known (BeginEpoch)
	// shut is closed, readable without mu: a publish checks it (the log
	// refuses appends once closed anyway; this gives the clearer error).
	shut atomic.Bool

	mu       sync.Mutex
	visible  uint64 // offsets below it may be delivered: min(stored, limit)
	stored   uint64 // the tier's condition holds below it on this broker
	limit    uint64 // the replicated watermark, when a gate runs (SetDeliverable); else Unlimited
	changed  chan struct{}
	watched  bool              // a reader took changed and may wait on it: advance must close it
	cursors  map[string]uint64 // durable name -> next offset to deliver
	closed   bool
	subs     map[*StreamSubscription]struct{}
	journalB int64 // journal size after the last compaction
}

// ephemeralFlush is how often an ephemeral stream's log reaches the disk
// (S-82: "flushed about every 5 ms").
const ephemeralFlush = 5 * time.Millisecond

// cursorCompactBytes is the journal size past which the cursors are
// rewritten as one snapshot.
const cursorCompactBytes = 1 << 20

// streamHeaderSpeculative marks deliveries of a speculative stream made
// before their record is on disk (S-82).
const streamHeaderSpeculative = "fibril.speculative"

func streamPartitionDir(root, topic string, n uint32) string {
	return filepath.Join(root, "s", topic, strconv.FormatUint(uint64(n), 10))
}

// streamStorageOptions derives a stream partition's storage options from
// the broker's: retention by the stream's limits and, for the ephemeral
// tier, a flush every ephemeralFlush instead of an fsync per commit.
func streamStorageOptions(base storage.Options, info StreamInfo) storage.Options {
	o := base
	r := info.Retention
	o.Retention = storage.Retention{ByLimits: true}
	if v, ok := r.MaxAgeMillis.Get(); ok {
		o.Retention.MaxAge = time.Duration(min(v, uint64(1<<63-1)/uint64(time.Millisecond))) * time.Millisecond
	}
	if v, ok := r.MaxBytes.Get(); ok {
		o.Retention.MaxBytes = int64(min(v, 1<<63-1))
	}
	if v, ok := r.MaxRecords.Get(); ok {
		o.Retention.MaxRecords = v
	}
	if info.Durability == wire.DurabilityEphemeral {
		o.Fsync, o.FsyncInterval, o.WAL = storage.FsyncInterval, ephemeralFlush, nil
	}
	return o
}

// openStreamPartition opens (creating when new) partition n of a stream
// and recovers its cursors.
func openStreamPartition(dir string, info StreamInfo, n uint32, opts storage.Options) (*StreamPartition, error) {
	name := fmt.Sprintf("stream %s partition %d", info.Topic, n)
	lg, err := storage.OpenPartition(dir, streamStorageOptions(opts, info))
	if err != nil {
		return nil, core.Errorf(core.ErrInternal, "open %s: %v", name, err)
	}
	p := &StreamPartition{info: info, index: n, name: name, log: lg, changed: make(chan struct{}), stats: &engineStats{},
		cursors: map[string]uint64{}, subs: map[*StreamSubscription]struct{}{}}
	if err := lg.ReplayState(p.applyCursorEntry); err != nil {
		lg.Close()
		return nil, core.Errorf(core.ErrInternal, "recover the cursors of %s: %v", name, err)
	}
	_, p.stored = lg.Bounds() // what recovery found is on disk
	p.visible, p.limit = p.stored, Unlimited
	p.journalB = lg.StateJournalBytes()
	return p, nil
}

// Cursor journal entries: 'c', uvarint next, then the name (the rest).
// A snapshot is the concatenation of such entries, each prefixed with its
// uvarint length.
const (
	cursorEntry    = 'c'
	cursorSnapshot = 'S'
)

func appendCursorEntry(b []byte, name string, next uint64) []byte {
	b = append(b, cursorEntry)
	b = binary.AppendUvarint(b, next)
	return append(b, name...)
}

var errBadCursorEntry = errors.New("malformed stream cursor entry")

func (p *StreamPartition) applyCursorEntry(e []byte) error {
	if len(e) == 0 {
		return errBadCursorEntry
	}
	switch e[0] {
	case cursorEntry:
		next, n := binary.Uvarint(e[1:])
		if n <= 0 {
			return errBadCursorEntry
		}
		name := string(e[1+n:])
		if next > p.cursors[name] {
			p.cursors[name] = next
		}
		return nil
	case cursorSnapshot:
		rest := e[1:]
		for len(rest) > 0 {
			l, n := binary.Uvarint(rest)
			if n <= 0 || l > uint64(len(rest)-n) {
				return errBadCursorEntry
			}
			if err := p.applyCursorEntry(rest[n : n+int(l)]); err != nil {
				return err
			}
			rest = rest[n+int(l):]
		}
		return nil
	}
	return errBadCursorEntry
}

// Info returns the stream's declaration.
func (p *StreamPartition) Info() StreamInfo { return p.info }

// Bounds returns the retained offsets [first, next).
func (p *StreamPartition) Bounds() (first, next uint64) { return p.log.Bounds() }

// Publish appends msg (S-77: a stream publish is a PUBLISH to a stream
// topic). done runs once, with the record's offset, when the tier's
// confirm condition holds (S-82); it must not block. An error returned by
// Publish means nothing was appended and done is not called.
func (p *StreamPartition) Publish(msg *Message, done func(offset uint64, err error)) error {
	return p.publish(msg, done, false)
}

// PublishDeferred is Publish for a caller that calls CommitIfIdle right
// afterwards (see Partition.PublishDeferred): the commit may then run on
// the caller instead of waking the storage committer.
func (p *StreamPartition) PublishDeferred(msg *Message, done func(offset uint64, err error)) error {
	return p.publish(msg, done, true)
}

// CommitIfIdle commits pending records on the calling goroutine when no
// committer is busy (Partition.CommitIfIdle has the rules).
func (p *StreamPartition) CommitIfIdle() bool { return p.log.CommitIfIdle() }

func (p *StreamPartition) publish(msg *Message, done func(offset uint64, err error), deferCommit bool) error {
	if p.refuse != nil {
		if err := refused(p.refuse); err != nil {
			return err
		}
	}
	if p.maxPayload > 0 && len(msg.Payload) > p.maxPayload {
		return core.Errorf(core.ErrTooLarge, "message payload is %d bytes; this broker accepts at most %d (broker.max_message_bytes)", len(msg.Payload), p.maxPayload)
	}
	if !msg.ContentType.Tag.Valid() {
		return core.Errorf(core.ErrBadRequest, "unknown content type tag %d", msg.ContentType.Tag)
	}
	ct, headers := normaliseContentType(msg.ContentType, msg.Headers)
	if err := checkReserved(headers); err != nil {
		return err
	}
	r := record{ContentType: ct, Headers: headers, Published: msg.Published, Received: msg.Received, Payload: msg.Payload}
	data := r.encode()
	if p.shut.Load() {
		return core.Errorf(core.ErrUnavailable, "%s is closed", p.name)
	}
	tier := p.info.Durability
	appendAsync := p.log.AppendAsync
	if deferCommit {
		appendAsync = p.log.AppendAsyncDeferred
	}
	gate := p.gate
	off, err := appendAsync(data, msg.Received, func(off uint64, err error) {
		if err == nil && tier == wire.DurabilityDurable {
			p.advance(off + 1)
			if gate != nil { // every record, in order: the gate learns the local end from it
				gate.Confirm(off, func(err error) {
					if done != nil {
						done(off, err)
					}
				})
				return
			}
		}
		if tier != wire.DurabilityEphemeral && done != nil {
			done(off, err)
		}
	})
	if err != nil {
		return core.Errorf(core.ErrInternal, "append to %s: %v", p.name, err)
	}
	p.stats.streamPublished.Add(1)
	p.counts.published.Add(1)
	if tier != wire.DurabilityDurable {
		p.advance(off + 1)
	}
	if tier == wire.DurabilityEphemeral && done != nil {
		done(off, nil)
	}
	return nil
}

// advance records that the tier's condition holds below next on this
// broker.
func (p *StreamPartition) advance(next uint64) {
	p.mu.Lock()
	if next > p.stored {
		p.stored = next
		p.showLocked()
	}
	p.mu.Unlock()
}

// SetDeliverable sets the replicated watermark below which records may be
// delivered (Gated; S-143 for streams: a replicated durable stream
// delivers what its followers hold). Unlimited lifts it.
func (p *StreamPartition) SetDeliverable(limit uint64) {
	p.mu.Lock()
	p.limit = limit
	p.showLocked()
	p.mu.Unlock()
}

// RaiseDeliverable is SetDeliverable for a limit that only grows.
func (p *StreamPartition) RaiseDeliverable(limit uint64) {
	p.mu.Lock()
	if limit > p.limit {
		p.limit = limit
		p.showLocked()
	}
	p.mu.Unlock()
}

// showLocked recomputes the deliverable end and wakes the readers that
// wait when it rose (no channel is made per record while nobody waits).
// A lowered end holds readers that have not passed it; what they read
// stays read.
func (p *StreamPartition) showLocked() {
	v := min(p.stored, p.limit)
	raised := v > p.visible
	p.visible = v
	if raised && p.watched {
		close(p.changed)
		p.changed = make(chan struct{})
		p.watched = false
	}
}

// Ref names the partition (Gated): a stream's key has no group.
func (p *StreamPartition) Ref() (Key, uint32) { return Key{Topic: p.info.Topic}, p.index }

// ReplicationLog returns the partition's storage log, which the owner
// ships to its followers (Gated).
func (p *StreamPartition) ReplicationLog() (*storage.Partition, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, core.Errorf(core.ErrUnavailable, "%s is closed", p.name)
	}
	return p.log, nil
}

// ReplicationCheckpoint returns, at one instant, what a new follower
// installs: the event feed's position, the (empty) settled set and the
// cursors as one snapshot entry. A commit whose journal entry comes after
// the feed position may be in the snapshot too; cursors only move
// forward, so applying it twice changes nothing.
func (p *StreamPartition) ReplicationCheckpoint() (eventNext uint64, settled, engine []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	eventNext, settled = p.log.EventCheckpoint(0)
	return eventNext, settled, p.cursorSnapshotLocked()
}

// BeginEpoch records the assignment epoch before the owner's first
// append under it (Partition.BeginEpoch has the rules).
func (p *StreamPartition) BeginEpoch(epoch uint64) error {
	return beginEpoch(&p.epoch, p.ReplicationLog, p.name, epoch)
}

// end returns the deliverable end.
func (p *StreamPartition) end() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.visible
}

// watch returns the deliverable end and a channel closed when it moves
// (or the partition closes).
func (p *StreamPartition) watch() (uint64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watched = true
	return p.visible, p.changed
}

// Cursor returns the committed position of a durable name: the next offset
// it will be given (ok false for a name never committed).
func (p *StreamPartition) Cursor(name string) (next uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next, ok = p.cursors[name]
	return next, ok
}

// commitCursor moves a durable name's cursor forward to next (S-75, S-76:
// cursors only move forward, the last commit wins) and journals it.
func (p *StreamPartition) commitCursor(name string, next uint64) error {
	p.mu.Lock()
	if p.closed || next <= p.cursors[name] {
		p.mu.Unlock()
		return nil
	}
	p.cursors[name] = next
	p.mu.Unlock()
	p.stats.cursorCommits.Add(1)
	if err := p.log.AppendState(appendCursorEntry(nil, name, next)); err != nil {
		return err
	}
	if p.log.StateJournalBytes() > p.journalB+cursorCompactBytes {
		return p.compactCursors()
	}
	return nil
}

// compactCursors rewrites the journal as one snapshot of every cursor.
func (p *StreamPartition) compactCursors() error {
	p.mu.Lock()
	snap := p.cursorSnapshotLocked()
	p.mu.Unlock()
	// A commit racing with this snapshot is journalled after it or is
	// already in it: cursors only move forward, so replay converges.
	if err := p.log.CompactState(snap); err != nil {
		return err
	}
	p.journalB = p.log.StateJournalBytes()
	return nil
}

// cursorSnapshotLocked encodes every cursor as one snapshot entry.
func (p *StreamPartition) cursorSnapshotLocked() []byte {
	names := make([]string, 0, len(p.cursors))
	for n := range p.cursors {
		names = append(names, n)
	}
	slices.Sort(names)
	snap := []byte{cursorSnapshot}
	for _, n := range names {
		e := appendCursorEntry(nil, n, p.cursors[n])
		snap = binary.AppendUvarint(snap, uint64(len(e)))
		snap = append(snap, e...)
	}
	return snap
}

// startOffset resolves an ephemeral subscription's start position (S-73)
// against the retained window [first, next).
func (p *StreamPartition) startOffset(s wire.StreamStart) (uint64, error) {
	first, next := p.log.Bounds()
	switch s.Kind {
	case wire.StartLatest:
		return next, nil
	case wire.StartEarliest:
		return first, nil
	case wire.StartOffset:
		return min(max(s.Value, first), next), nil
	case wire.StartNBack:
		if s.Value >= next-first {
			return first, nil
		}
		return next - s.Value, nil
	case wire.StartByTime:
		return p.firstAtOrAfter(int64(min(s.Value, 1<<63-1)), first, next)
	}
	return 0, core.Errorf(core.ErrBadRequest, "unknown stream start kind %d", s.Kind)
}

// firstAtOrAfter finds the first retained record whose timestamp is at or
// after ms, by binary search (broker timestamps grow with the offsets; a
// clock step back makes the answer approximate, never out of the window).
func (p *StreamPartition) firstAtOrAfter(ms int64, first, next uint64) (uint64, error) {
	lo, hi := first, next
	for lo < hi {
		mid := lo + (hi-lo)/2
		rec, err := p.log.Read(mid)
		if errors.Is(err, storage.ErrTrimmed) {
			lo = mid + 1 // retention moved the head meanwhile
			continue
		}
		if err != nil {
			return 0, core.Errorf(core.ErrInternal, "read %s at %d: %v", p.name, mid, err)
		}
		if rec.Timestamp >= ms {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// EnforceRetention runs a retention pass now (it also runs by itself
// after rolls and when the oldest segment's age expires).
func (p *StreamPartition) EnforceRetention() error { return p.log.EnforceRetention() }

// Close ends every subscription and closes the log; publishes in flight
// complete first.
func (p *StreamPartition) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.shut.Store(true)
	subs := make([]*StreamSubscription, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	if err := p.log.Close(); err != nil && !errors.Is(err, storage.ErrClosed) {
		return err
	}
	return nil
}

type streamPartKey struct {
	topic string
	n     uint32
}

// StreamPartition returns partition n of a declared stream, opening it on
// first use (S-72: an undeclared stream or partition is ErrNotFound).
func (m *Manager) StreamPartition(topic string, n uint32) (*StreamPartition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() || m.sparts == nil {
		return nil, errClosed()
	}
	info, ok := m.streams[topic]
	if !ok {
		return nil, core.Errorf(core.ErrNotFound, "stream %s does not exist; declare it first", topic)
	}
	if n >= info.PartitionCount {
		return nil, core.Errorf(core.ErrNotFound, "stream %s has %d partitions; partition %d does not exist", topic, info.PartitionCount, n)
	}
	k := streamPartKey{topic, n}
	if sp := m.sparts[k]; sp != nil {
		return sp, nil
	}
	if m.sreplicas[k] != nil {
		return nil, core.Errorf(core.ErrUnavailable, "stream %s partition %d is open here as a replica; its owner is another broker", topic, n)
	}
	dir := streamPartitionDir(m.opts.Dir, topic, n)
	if err := makeDirsDurable(m.fs, m.opts.Dir, dir); err != nil {
		return nil, core.Errorf(core.ErrInternal, "create %s: %v", dir, err)
	}
	sp, err := openStreamPartition(dir, info, n, m.opts.Storage)
	if err != nil {
		return nil, err
	}
	sp.maxPayload = m.opts.MaxMessageBytes
	sp.stats = &m.stats
	sp.refuse = &m.refuse
	if m.opts.Gates != nil && info.Replicated() {
		sp.limit = 0 // until the gate's owner says otherwise
		sp.visible = 0
		if sp.gate = m.opts.Gates(sp); sp.gate == nil {
			sp.SetDeliverable(Unlimited)
		}
	}
	m.sparts[k] = sp
	return sp, nil
}

// makeDirsDurable creates dir and makes its entry, and every parent's up
// to root, durable: storage fsyncs the files it creates inside a
// partition directory, not the directory's own entry in its parent, and a
// stream's partitions are created on first use, after the catalog names
// the stream.
func makeDirsDurable(fsys storage.FS, root, dir string) error {
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return syncParents(fsys, root, dir)
}

// syncParents fsyncs every directory from dir's parent up to root, so that
// the entries leading to dir survive a power loss.
func syncParents(fsys storage.FS, root, dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if err := fsys.SyncDir(d); err != nil {
			return err
		}
		if d == filepath.Clean(root) || d == filepath.Dir(d) {
			return nil
		}
	}
}
