package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The state journal sits beside the log: one file per generation,
// state.<gen, 20 digits>.jnl. It carries settlements (acks), opaque engine
// state events, and snapshots. Compaction writes generation g+1 starting
// with a snapshot, fsyncs it and the directory, switches to it and only then
// removes generation g; on open the newest generation whose header and
// leading snapshot are intact wins, so a crash at any point of a compaction
// leaves either the old or the new generation whole.
//
// File header (32 bytes, little-endian), laid out like a segment's (see
// record.go), version 2:
//
//	0  [8]byte magic "FBRLJNL\x00"
//	8  u32 version   2 (1: no durable slot, still read)
//	12 u32 durable   bytes an fsync had made durable when it was written
//	16 u64 generation
//	24 u32 slot crc  CRC32C of bytes [12,24)
//	28 u32 crc       CRC32C of bytes [0,12) and [16,24)
//
// Entry:
//
//	0 u32 length  payload length n
//	4 u32 crc     CRC32C of bytes [0,4) and [8, 9+n)
//	8 u8  kind    1 snapshot, 2 settle, 3 engine, 4 reset
//	9 [n]byte payload
//
// Payloads: snapshot = settled ranges (see appendRanges), u8 has-engine,
// engine snapshot bytes; settle = settled ranges; engine = opaque bytes;
// reset = uvarint N, "forget every settlement at or above N" — written (and
// fsynced) on open when recovery found settlements beyond the recovered log
// end, so those offsets, reused by new records, are not born settled.
const (
	jHeaderLen      = 32
	jEntryHeaderLen = 9

	kindSnapshot = 1
	kindSettle   = 2
	kindEngine   = 3
	kindReset    = 4
)

var jMagic = [8]byte{'F', 'B', 'R', 'L', 'J', 'N', 'L', 0}

func journalName(gen uint64) string { return fmt.Sprintf("state.%020d.jnl", gen) }

func parseJournalName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "state.")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ".jnl")
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// checkJHeader reports whether h is a valid header of generation gen, and
// the durable size its slot records (-1: none).
func checkJHeader(h []byte, gen uint64) (bool, int64) {
	why, durable := checkFileHeader(h, jMagic, gen, "generation")
	return why == "", durable
}

// appendEntry frames one journal entry onto b.
func appendEntry(b []byte, kind byte, payload []byte) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, kind)
	b = append(b, payload...)
	e := b[start:]
	binary.LittleEndian.PutUint32(e[4:8], entryCRC(e))
	return b
}

func entryCRC(e []byte) uint32 {
	c := crc32.Update(0, castTab, e[0:4])
	return crc32.Update(c, castTab, e[8:])
}

// nextEntry decodes the entry at the reader's position. Like recReader.next
// it returns io.EOF at the end and bad != "" for a damaged entry.
func nextEntry(r *recReader) (kind byte, payload []byte, pos int64, bad string, err error) {
	pos = r.pos
	if pos >= r.end {
		return 0, nil, pos, "", io.EOF
	}
	if r.end-pos < jEntryHeaderLen {
		return 0, nil, pos, "truncated entry header", nil
	}
	h, err := r.bytes(pos, jEntryHeaderLen)
	if err != nil {
		return 0, nil, pos, "", err
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	if n > MaxRecordBytes+1<<20 {
		return 0, nil, pos, "length field too large", nil
	}
	if r.end-pos < jEntryHeaderLen+int64(n) {
		return 0, nil, pos, "truncated entry", nil
	}
	e, err := r.bytes(pos, jEntryHeaderLen+int(n))
	if err != nil {
		return 0, nil, pos, "", err
	}
	if entryCRC(e) != binary.LittleEndian.Uint32(e[4:8]) {
		return 0, nil, pos, "crc mismatch", nil
	}
	kind = e[8]
	if kind < kindSnapshot || kind > kindReset {
		return 0, nil, pos, fmt.Sprintf("unknown entry kind %d", kind), nil
	}
	r.pos = pos + int64(len(e))
	return kind, e[jEntryHeaderLen:], pos, "", nil
}

// journal is the write side of the state journal plus the in-memory
// settled set it persists.
type journal struct {
	fsys FS
	dir  string
	log  *slog.Logger

	// swapMu keeps the current file open for users outside mu (fsync,
	// replay): they RLock; compaction Locks to swap generations.
	swapMu sync.RWMutex

	mu     sync.Mutex
	gen    uint64
	f      File
	path   string
	size   int64
	seq    uint64 // bumped by every write
	synced uint64 // seq covered by the last successful fsync
	// durSize is the size of the current generation that the last
	// successful fsync covered; slot is what its header's durable slot
	// says (written before the next fsync when it lags), slotOK whether
	// the header has one (version 2).
	durSize int64
	slot    int64
	slotOK  bool
	set     rangeSet
	durable uint64 // settled frontier as of the last successful fsync
	buf     []byte
	pl      []byte    // settle payload scratch
	feed    eventFeed // replication's view of settle and engine entries (events.go)
	grew    *growth   // the partition's, fired with each event
	spans   []span
	offs    []uint64
}

// openJournal picks the newest intact generation, replays its settlement
// entries, truncates a torn tail, and drops settlements at or above next
// (the recovered log end) with a durable reset entry.
func openJournal(fsys FS, dir string, names []string, log *slog.Logger, next uint64) (*journal, error) {
	j := &journal{fsys: fsys, dir: dir, log: log}
	var gens []uint64
	for _, n := range names {
		if g, ok := parseJournalName(n); ok {
			gens = append(gens, g)
		}
	}
	var chosen bool
	for i := len(gens) - 1; i >= 0; i-- { // names are sorted, so gens ascend
		g := gens[i]
		path := filepath.Join(dir, journalName(g))
		if !chosen {
			ok, err := j.tryOpen(g, path)
			if err != nil {
				return nil, err
			}
			if ok {
				chosen = true
				continue
			}
			log.Warn("storage: ignoring journal generation without an intact snapshot", "file", path)
		}
		if err := fsys.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("storage: cannot remove stale journal generation", "file", path, "err", err)
		}
	}
	if !chosen {
		if len(gens) > 0 {
			log.Warn("storage: no intact journal generation; starting an empty state journal", "dir", dir)
		}
		if err := j.create(max(1, lastOr(gens)+1), nil, false); err != nil {
			return nil, err
		}
	}
	if j.set.dropFrom(next) {
		log.Warn("storage: dropping settlements beyond the recovered log end", "dir", dir, "next", next)
		if err := j.write(kindReset, binary.AppendUvarint(nil, next)); err != nil {
			return nil, err
		}
		if err := syncFile(j.f); err != nil {
			return nil, err
		}
		j.synced, j.durSize = j.seq, j.size
	}
	return j, nil
}

func lastOr(g []uint64) uint64 {
	if len(g) == 0 {
		return 0
	}
	return g[len(g)-1]
}

// tryOpen opens generation g. It returns false (and no error) when the
// generation has no intact header and snapshot; damage after the snapshot
// is handled like a log tail: a torn tail is truncated, damage followed by
// an intact entry is corruption.
func (j *journal) tryOpen(g uint64, path string) (bool, error) {
	f, err := j.fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return false, err
	}
	h := make([]byte, jHeaderLen)
	var ok bool
	durable := int64(-1)
	if size >= jHeaderLen && readFull(f, h, 0) {
		ok, durable = checkJHeader(h, g)
	}
	if !ok {
		f.Close()
		return false, nil
	}
	slotOK := binary.LittleEndian.Uint32(h[8:12]) == headerVersion
	r := newRecReader(f, jHeaderLen, size)
	kind, payload, _, bad, err := nextEntry(r)
	if err != nil && err != io.EOF {
		f.Close()
		return false, err
	}
	if bad != "" || err == io.EOF || kind != kindSnapshot {
		f.Close()
		return false, nil
	}
	var set rangeSet
	if _, err := readRanges(payload, set.add); err != nil {
		f.Close()
		return false, nil
	}
	for {
		kind, payload, pos, bad, err := nextEntry(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return false, err
		}
		if bad == "" && kind == kindSnapshot {
			bad = "snapshot entry after the start"
		}
		if bad == "" && kind == kindSettle {
			if _, e := readRanges(payload, set.add); e != nil {
				bad = "bad settle payload"
			}
		}
		if bad == "" && kind == kindReset {
			n, k := binary.Uvarint(payload)
			if k <= 0 {
				bad = "bad reset payload"
			} else {
				set.dropFrom(n)
			}
		}
		if bad == "" {
			continue
		}
		// Past the durable size the damage is a torn tail whatever follows
		// (pages of an unsynced write reach the disk in any order); before
		// it, or with no durable size recorded, intact entries after the
		// damage mean corruption.
		torn := durable >= 0 && pos >= durable
		if !torn && intactAfter(f, pos, size, jEntryHeaderLen, journalCandidate, journalVerify) {
			f.Close()
			return false, &CorruptionError{File: path, Pos: pos, Reason: bad + "; intact journal entries follow"}
		}
		j.log.Warn("storage: truncating torn journal tail", "file", path, "pos", pos, "bytes_dropped", size-pos, "reason", bad, "durable", durable)
		if err := f.Truncate(pos); err != nil {
			f.Close()
			return false, err
		}
		if err := syncFile(f); err != nil {
			f.Close()
			return false, err
		}
		size = pos
		durable = pos // fsynced just now
		break
	}
	j.gen, j.f, j.path, j.size, j.set = g, f, path, size, set
	j.slotOK, j.slot = slotOK, durable
	// What is durable now: at least what the slot claims; without a slot,
	// claim no more than the header until the next fsync.
	j.durSize = jHeaderLen
	if durable >= 0 {
		j.durSize = min(durable, size)
	}
	return true, nil
}

// journalCandidate reports whether h (a possible entry header) could start
// an intact non-snapshot entry, and its total length.
func journalCandidate(h []byte) (int, bool) {
	if len(h) < jEntryHeaderLen {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	k := h[8]
	if n > MaxRecordBytes || k < kindSettle || k > kindReset {
		return 0, false
	}
	return jEntryHeaderLen + int(n), true
}

func journalVerify(e []byte) bool { return entryCRC(e) == binary.LittleEndian.Uint32(e[4:8]) }

// create writes a new generation holding one snapshot entry, fsyncs it and
// the directory, and makes it current. Caller holds mu (or owns j alone).
func (j *journal) create(g uint64, engine []byte, hasEngine bool) error {
	path := filepath.Join(j.dir, journalName(g))
	f, err := j.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	p := appendRanges(nil, j.set.r)
	if hasEngine {
		p = append(p, 1)
		p = append(p, engine...)
	} else {
		p = append(p, 0)
	}
	b := appendEntry(encodeFileHeader(jMagic, g, 0), kindSnapshot, p)
	// The slot may claim the whole file at once: a generation is only ever
	// used with its snapshot intact, which the fsync below makes durable.
	putDurable(b, int64(len(b)))
	if _, err := writeFile(f, b, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncFile(f); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := j.fsys.SyncDir(j.dir); err != nil {
		f.Close()
		return fmt.Errorf("fsync dir %s: %w", j.dir, err)
	}
	old, oldPath := j.f, j.path
	j.gen, j.f, j.path, j.size = g, f, path, int64(len(b))
	j.durSize, j.slot, j.slotOK = int64(len(b)), int64(len(b)), true
	j.seq++
	j.synced = j.seq
	if old != nil {
		old.Close()
		if err := j.fsys.Remove(oldPath); err != nil {
			j.log.Warn("storage: cannot remove old journal generation", "file", oldPath, "err", err)
		}
	}
	return nil
}

// write appends one entry with a single write. Caller holds mu.
func (j *journal) write(kind byte, payload []byte) error {
	j.buf = appendEntry(j.buf[:0], kind, payload)
	if _, err := writeFile(j.f, j.buf, j.size); err != nil {
		return fmt.Errorf("write %s: %w", j.path, err)
	}
	j.size += int64(len(j.buf))
	j.seq++
	if (kind == kindSettle || kind == kindEngine) && j.feed.on {
		j.feed.add(kind, payload)
		j.grew.fire()
	}
	return nil
}

// settle records offsets (all below the log end) as settled. It reports
// whether it wrote an entry (not when every offset was settled already)
// and the settled frontier from first afterwards.
func (j *journal) settle(offs []uint64, first uint64) (bool, uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.offs = j.offs[:0]
	for _, o := range offs {
		if !j.set.contains(o) {
			j.offs = append(j.offs, o)
		}
	}
	if len(j.offs) == 0 {
		return false, 0, nil
	}
	j.spans = offsetsToSpans(j.offs, j.spans[:0])
	j.pl = appendRanges(j.pl[:0], j.spans)
	if err := j.write(kindSettle, j.pl); err != nil {
		return false, 0, err
	}
	for _, s := range j.spans {
		j.set.add(s.start, s.end)
	}
	return true, j.set.frontierFrom(first), nil
}

func (j *journal) appendEngine(entry []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.write(kindEngine, entry)
}

func (j *journal) dirty() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq != j.synced
}

// sync fsyncs the current generation if anything was written since the
// last fsync. first is the log's first retained offset, used to record the
// settled frontier that this fsync made durable.
func (j *journal) sync(first uint64) error {
	j.swapMu.RLock()
	defer j.swapMu.RUnlock()
	j.mu.Lock()
	f, seq, fr, size := j.f, j.seq, j.set.frontierFrom(first), j.size
	clean := seq == j.synced
	if !clean && j.slotOK && (j.slot < 0 || j.durSize-j.slot >= slotLagBytes) {
		// The header learns what the previous fsync made durable; this
		// fsync carries it (no fsync of its own). Only once it trails by
		// slotLagBytes, as the log's: off the confirm path or not, a
		// rewrite at every journal fsync put a second page into each, and
		// cost 10–13% of confirmed-publish throughput
		// (integration/bench/before-after.sh, docs/performance.md).
		if err := writeDurable(f, jMagic, j.gen, j.durSize); err != nil {
			j.mu.Unlock()
			return fmt.Errorf("write %s: %w", j.path, err)
		}
		j.slot = j.durSize
	}
	j.mu.Unlock()
	if clean {
		return nil
	}
	if err := syncFile(f); err != nil {
		return fmt.Errorf("fsync %s: %w", j.path, err)
	}
	j.mu.Lock()
	if seq > j.synced {
		j.synced, j.durable = seq, fr
		j.durSize = max(j.durSize, size)
	}
	j.mu.Unlock()
	return nil
}

// settleSlot brings the header's durable slot up to the fsynced size, with
// an fsync of its own, when it lags and nothing is left unsynced (Close).
func (j *journal) settleSlot() error {
	j.swapMu.RLock()
	defer j.swapMu.RUnlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.slotOK || j.slot == j.durSize || j.seq != j.synced {
		return nil
	}
	if err := writeDurable(j.f, jMagic, j.gen, j.durSize); err != nil {
		return fmt.Errorf("write %s: %w", j.path, err)
	}
	if err := syncFile(j.f); err != nil {
		return fmt.Errorf("fsync %s: %w", j.path, err)
	}
	j.slot = j.durSize
	return nil
}

// compact rewrites the journal as [settlement snapshot + engine snapshot].
func (j *journal) compact(engine []byte, first uint64) error {
	j.swapMu.Lock()
	defer j.swapMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.create(j.gen+1, engine, true); err != nil {
		return err
	}
	j.durable = j.set.frontierFrom(first)
	return nil
}

// replay calls fn with the engine snapshot (if any), then every engine
// entry after it, reading the current generation up to its size now.
func (j *journal) replay(fn func([]byte) error) error {
	j.swapMu.RLock()
	defer j.swapMu.RUnlock()
	j.mu.Lock()
	f, size, path := j.f, j.size, j.path
	j.mu.Unlock()
	r := newRecReader(f, jHeaderLen, size)
	first := true
	for {
		kind, payload, pos, bad, err := nextEntry(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if bad != "" {
			return &CorruptionError{File: path, Pos: pos, Reason: bad}
		}
		switch {
		case first && kind == kindSnapshot:
			rest, err := readRanges(payload, func(a, b uint64) {})
			if err != nil || len(rest) == 0 {
				return &CorruptionError{File: path, Pos: pos, Reason: "bad snapshot payload"}
			}
			if rest[0] == 1 {
				if err := fn(append([]byte(nil), rest[1:]...)); err != nil {
					return err
				}
			}
		case kind == kindEngine:
			if err := fn(append([]byte(nil), payload...)); err != nil {
				return err
			}
		}
		first = false
	}
}

func (j *journal) bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size
}

func (j *journal) close() error {
	j.swapMu.Lock()
	defer j.swapMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

func readFull(f File, b []byte, at int64) bool {
	n, _ := f.ReadAt(b, at)
	return n == len(b)
}
