package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// walFileName names ring file slot.
func walFileName(slot int) string { return fmt.Sprintf("%02d.wal", slot) }

// recover reads the live files in seq order, repairs every partition they
// name, frees them and sets up the ring. Called by OpenWAL only.
func (w *WAL) recover() error {
	names, err := w.fs.ReadDir(w.dir)
	if err != nil {
		return err
	}
	slots := map[int]*walFile{}
	var live []*walFile
	for _, n := range names {
		var slot int
		if _, err := fmt.Sscanf(n, "%02d.wal", &slot); err != nil || walFileName(slot) != n {
			continue
		}
		f := &walFile{slot: slot, path: filepath.Join(w.dir, n)}
		h, err := w.fs.OpenFile(f.path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		f.f = h
		slots[slot] = f
		hdr := make([]byte, walHeaderLen)
		seq, isLive, ok := uint64(0), false, readFull(h, hdr, 0)
		if ok {
			seq, isLive, ok = decodeWALHeader(hdr)
		}
		if !ok {
			// A torn creation or a foreign file: it holds no entry that
			// counted (a header is written before the round that makes
			// it durable). Rewritten when the slot is used.
			w.log.Warn("storage: write-ahead log file without a valid header; reusing it", "file", f.path)
			h.Close()
			f.f = nil
			continue
		}
		f.seq = seq
		w.seq = max(w.seq, seq)
		if isLive {
			live = append(live, f)
		}
	}
	slices.SortFunc(live, func(a, b *walFile) int { return int64Cmp(a.seq, b.seq) })

	refs := map[string]walRefSet{}
	for _, f := range live {
		if err := w.scan(f, refs); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(refs))
	for k := range refs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	keep := map[*walFile]bool{}
	for _, k := range keys {
		if err := w.replay(k, refs[k]); err != nil {
			// The partition stays as it is (quarantined); the files with
			// its entries are set aside for whoever repairs it.
			w.log.Error("storage: write-ahead log recovery of a partition failed; its entries are kept", "partition", k, "err", err)
			for _, r := range refs[k] {
				keep[r.file] = true
			}
		}
	}
	for _, f := range live {
		if keep[f] {
			aside := filepath.Join(w.dir, fmt.Sprintf("kept-%020d.wal", f.seq))
			f.f.Close()
			f.f = nil
			if err := w.fs.Rename(f.path, aside); err != nil {
				return err
			}
			if err := w.fs.SyncDir(w.dir); err != nil {
				return err
			}
			w.log.Error("storage: write-ahead log file set aside", "file", aside)
			delete(slots, f.slot)
			continue
		}
		if err := w.markFree(f); err != nil {
			return err
		}
	}
	w.replayed = len(live)
	if len(live) > 0 {
		w.log.Info("storage: write-ahead log recovered", "files", len(live), "partitions", len(keys))
	}
	// The ring: existing files first (oldest use first), then slots not
	// created yet. Slots beyond Files (a smaller setting than before) are
	// removed now that they are free.
	var have []*walFile
	for slot, f := range slots {
		if slot >= w.files {
			if f.f != nil {
				f.f.Close()
			}
			if err := w.fs.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		have = append(have, f)
	}
	slices.SortFunc(have, func(a, b *walFile) int { return int64Cmp(a.seq, b.seq) })
	w.free = have
	for slot := range w.files {
		if slots[slot] == nil {
			w.free = append(w.free, &walFile{slot: slot, path: filepath.Join(w.dir, walFileName(slot))})
		}
	}
	return nil
}

func int64Cmp(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// scan adds the records entries of f to refs, up to the first entry that
// does not check (the end of what was written in this use of the file).
func (w *WAL) scan(f *walFile, refs map[string]walRefSet) error {
	size, err := f.f.Size()
	if err != nil {
		return err
	}
	var seqb [8]byte
	binary.LittleEndian.PutUint64(seqb[:], f.seq)
	seqCRC := crc32.Checksum(seqb[:], castTab)
	var hdr [walEntryHdrLen]byte
	for pos := int64(walHeaderLen); pos+walEntryHdrLen <= size; {
		if !readFull(f.f, hdr[:], pos) {
			break
		}
		n := int64(binary.LittleEndian.Uint32(hdr[0:4]))
		if n < 1 || pos+walEntryHdrLen+n > size ||
			crc32.Update(seqCRC, castTab, hdr[0:8]) != binary.LittleEndian.Uint32(hdr[8:12]) {
			break
		}
		body := make([]byte, n)
		if !readFull(f.f, body, pos+walEntryHdrLen) || crc32.Checksum(body, castTab) != binary.LittleEndian.Uint32(hdr[4:8]) {
			break
		}
		if body[0] == walKindRecords {
			key, ref, ok := parseWALRecords(body)
			if !ok {
				break
			}
			ref.file, ref.pos, ref.n = f, pos+walEntryHdrLen, int(n)
			refs[key] = append(refs[key], ref)
		}
		pos += walEntryHdrLen + n
	}
	return nil
}

// parseWALRecords decodes a records entry's metadata.
func parseWALRecords(body []byte) (string, walRef, bool) {
	b := body[1:]
	kl, k := binary.Uvarint(b)
	if k <= 0 || kl > uint64(len(b)-k) {
		return "", walRef{}, false
	}
	b = b[k:]
	key := string(b[:kl])
	b = b[kl:]
	if len(b) < 20 {
		return "", walRef{}, false
	}
	return key, walRef{
		inc:   binary.LittleEndian.Uint64(b[0:8]),
		first: binary.LittleEndian.Uint64(b[8:16]),
		count: binary.LittleEndian.Uint32(b[16:20]),
	}, true
}

// walRecords returns the encoded records of a records entry body.
func walRecords(body []byte) []byte {
	kl, k := binary.Uvarint(body[1:])
	return body[1+k+int(kl)+20:]
}

// replay repairs the partition with key from its entries: it is opened
// (which writes back the records its log lost), then closed (fsync).
func (w *WAL) replay(key string, refs walRefSet) error {
	dir := filepath.Join(w.root, filepath.FromSlash(key))
	if _, err := w.fs.ReadDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			w.log.Debug("storage: write-ahead log names a partition that is gone", "partition", key)
			return nil
		}
		return err
	}
	p, err := OpenPartition(dir, Options{
		FS: w.fs, Logger: w.log, Fsync: FsyncNone,
		SegmentMaxBytes: maxSegmentMaxBytes, // never roll: every roll of the original run is on disk already
		replay:          refs,
	})
	if err != nil {
		return err
	}
	return p.Close()
}

// Incarnation. A partition directory that uses the WAL holds partition.id:
// a random id written once (file, fsync, directory fsync) before the
// partition's first WAL entry, and carried by each of its entries. Replay
// writes an entry back only into the incarnation that wrote it: a
// directory removed and created again under the same name (a deleted and
// re-declared queue, a replica rebuilt) is a new incarnation, and entries
// of the old one never reach it.
//
//	0  [8]byte magic "FBRLPID\x00"
//	8  u64 id
//	16 u32 crc       CRC32C of bytes [0,16)
const incFile = "partition.id"

var incMagic = [8]byte{'F', 'B', 'R', 'L', 'P', 'I', 'D', 0}

// readIncarnation returns the partition's id; ok false when it has none.
func readIncarnation(fsys FS, dir string) (id uint64, ok bool, err error) {
	path := filepath.Join(dir, incFile)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	b := make([]byte, 20)
	if !readFull(f, b, 0) || [8]byte(b[0:8]) != incMagic || crc32.Checksum(b[:16], castTab) != binary.LittleEndian.Uint32(b[16:20]) {
		return 0, false, &CorruptionError{File: path, Reason: "damaged partition id"}
	}
	return binary.LittleEndian.Uint64(b[8:16]), true, nil
}

// ensureIncarnation returns the partition's id, creating it if needed.
func ensureIncarnation(fsys FS, dir string) (uint64, error) {
	id, ok, err := readIncarnation(fsys, dir)
	if err != nil || ok {
		return id, err
	}
	return writeIncarnation(fsys, dir)
}

// writeIncarnation gives the partition a new random id and returns it.
func writeIncarnation(fsys FS, dir string) (uint64, error) {
	id := rand.Uint64()
	b := make([]byte, 20)
	copy(b[0:8], incMagic[:])
	binary.LittleEndian.PutUint64(b[8:16], id)
	binary.LittleEndian.PutUint32(b[16:20], crc32.Checksum(b[:16], castTab))
	return id, ReplaceFile(fsys, dir, incFile, b)
}

// The quarantine marker. A partition whose log does not continue into its
// WAL entries (records the WAL confirmed are neither in the log nor next
// in line) is damaged beyond a torn tail; since the WAL is freed after
// recovery, the finding is kept in the directory as QUARANTINED (the
// reason, in text) and every later open reports it, until an operator
// repairs the partition and removes the file.
const quarantineFile = "QUARANTINED"

func writeQuarantine(fsys FS, dir string, ce *CorruptionError) error {
	return ReplaceFile(fsys, dir, quarantineFile, []byte(ce.Error()+"\n"))
}

func readQuarantine(fsys FS, dir string) error {
	path := filepath.Join(dir, quarantineFile)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, min(size, 4096))
	n, _ := f.ReadAt(b, 0)
	return &CorruptionError{File: path, Reason: "marked quarantined: " + strings.TrimSpace(string(b[:n]))}
}

// replayWAL writes back the records of the WAL entries (refs, in WAL
// order) that the recovered log lost: each record at or past the log's end
// must be the next one, or the partition is quarantined (and marked, see
// writeQuarantine). Then the log is fsynced and its durable slot set, so
// the WAL may be freed. Runs inside OpenPartition, after the log is
// recovered and before the journal is opened (which drops settlements past
// the log's end: those of the written-back records must stay).
func (p *Partition) replayWAL(refs walRefSet) error {
	inc, ok, err := readIncarnation(p.fs, p.dir)
	if err != nil {
		return err
	}
	if !ok {
		return nil // no entry can be this partition's
	}
	act := p.segs[len(p.segs)-1]
	next := act.next
	wrote := 0
	for _, r := range refs {
		if r.inc != inc {
			continue // an earlier incarnation's
		}
		body := make([]byte, r.n)
		if !readFull(r.file.f, body, r.pos) {
			return fmt.Errorf("storage: read %s at %d", r.file.path, r.pos)
		}
		recs := walRecords(body)
		off := r.first
		for len(recs) >= recHeaderLen {
			n := recHeaderLen + int(decodeHeader(recs).length)
			if n > len(recs) || checkRecord(recs[:n], off) != "" {
				return &CorruptionError{File: r.file.path, Pos: r.pos, ExpectedOffset: off, Reason: "write-ahead log entry with a bad record"}
			}
			switch {
			case off > next:
				ce := &CorruptionError{File: act.path, Pos: act.size, ExpectedOffset: next,
					Reason: fmt.Sprintf("the log ends at offset %d but the write-ahead log (%s) continues at %d", next, r.file.path, off)}
				if err := writeQuarantine(p.fs, p.dir, ce); err != nil {
					return err
				}
				return ce
			case off == next:
				if err := p.reserve(act, act.size+int64(n)); err != nil {
					return err
				}
				if _, err := writeFile(act.f, recs[:n], act.size); err != nil {
					return err
				}
				act.noteRecord(off, decodeHeader(recs).ts, act.size, n, p.opts.IndexEveryBytes)
				next++
				wrote++
			}
			off++
			recs = recs[n:]
		}
	}
	if wrote == 0 {
		return nil
	}
	if err := p.trimReserve(act); err != nil {
		return err
	}
	if err := syncFile(act.f); err != nil {
		return err
	}
	act.alloc = act.size
	act.durSize = act.size
	if act.dslotOK {
		if err := writeDurable(act.f, segMagic, act.base, act.durSize); err != nil {
			return err
		}
		if err := syncFile(act.f); err != nil {
			return err
		}
		act.dslot = act.durSize
	}
	p.log.Warn("storage: records written back from the write-ahead log", "dir", p.dir, "records", wrote, "next", next)
	return nil
}

// walCheckpoint makes every record this partition wrote so far durable in
// its own files, so that the WAL entries holding them may be reused: an
// fsync of the active segment (sealed segments were fsynced at their
// roll), which carries the durable slot when it trails (a separate
// rewrite and fsync only past checkpointSlotLag), so recovery treats
// damage in them as corruption and not as a torn tail. It does not take the writer role — a
// committer holding it may be waiting for the WAL, which may be waiting
// for this checkpoint — only ckMu, which guards the active segment's file
// and durable bookkeeping. The segment's fsync, which carries everything
// written since the last one (megabytes), runs without ckMu: held, it
// stalled the partition's commits for as long (the WAL's leader skips a
// partition whose ckMu is taken, its committer waits for it). The file
// handle is pinned meanwhile (ioMu, read), so that neither eviction nor
// Close closes it; a roll that seals the segment meanwhile fsyncs it too.
func (p *Partition) walCheckpoint() error {
	act, f, size, err := p.checkpointStart()
	if err != nil || act == nil {
		return err
	}
	if f != nil {
		serr := syncFile(f)
		act.ioMu.RUnlock()
		if serr != nil {
			return p.fail(fmt.Errorf("fsync %s: %w", act.path, serr))
		}
	}
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	act.durSize = max(act.durSize, size)
	if act != p.act || p.ckDone {
		return nil // sealed by a roll (fsynced there) or closed cleanly
	}
	if err := p.usable(); err != nil {
		return err // failed (and maybe closed) meanwhile
	}
	if act.dslotOK && (act.dslot < 0 || act.durSize-act.dslot > checkpointSlotLag) {
		if err := writeDurable(act.f, segMagic, act.base, act.durSize); err != nil {
			return p.fail(fmt.Errorf("write %s: %w", act.path, err))
		}
		if err := syncFile(act.f); err != nil {
			return p.fail(fmt.Errorf("fsync %s: %w", act.path, err))
		}
		act.dslot = act.durSize
	}
	return nil
}

// checkpointSlotLag is how far a checkpoint may leave the active
// segment's durable slot behind the durable size. Up to it the slot rides
// on the checkpoint's fsync (set to what the previous fsync made durable,
// as syncLog does); past it, it is rewritten and fsynced once more after.
// That second fsync per partition was half of a checkpoint's fsyncs:
// with 100 partitions of 640 KiB each, the checkpoint took 250–290 ms
// without it against 350–410 ms, and the WAL's rounds wait on the disk
// meanwhile (docs/performance.md). The price is the slot's precision, as
// for slotLagBytes: damage in the last < 4 MiB before a crash cannot be
// told from a torn write (core/storage/README.md#recovery).
const checkpointSlotLag = 4 << 20

// walWriteback starts writing p's staged and written records to the disk
// without waiting (see WAL.checkpoint); walCheckpoint then makes them
// durable.
func (p *Partition) walWriteback() error {
	act, f, _, err := p.checkpointStart()
	if f != nil {
		startWriteback(f)
		act.ioMu.RUnlock()
	}
	return err
}

// usable returns why a checkpoint cannot touch p's files: it failed, or
// it was closed without making everything durable (which cannot happen
// without a failure). Caller holds ckMu.
func (p *Partition) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failErr != nil {
		return p.failErr
	}
	if p.closed {
		return ErrClosed
	}
	return nil
}

// checkpointStart writes the staged records and returns the active
// segment and where its written records end; with f, the handle to fsync,
// pinned (act.ioMu held for reading; the caller releases it), and the
// durable slot rewritten for that fsync to carry when it trails by
// slotLagBytes (rideSlotLocked). act is nil when there is nothing to do.
func (p *Partition) checkpointStart() (act *segment, f File, size int64, err error) {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	if p.ckDone {
		return nil, nil, 0, nil // closed cleanly: durable
	}
	if err := p.usable(); err != nil {
		return nil, nil, 0, err
	}
	if err := p.flushLagLocked(); err != nil {
		return nil, nil, 0, err
	}
	p.mu.Lock()
	act = p.act
	size = act.size // written records end here (updated under mu)
	p.mu.Unlock()
	if act.durSize < size {
		if err := rideSlotLocked(act, slotLagBytes); err != nil {
			return nil, nil, 0, p.fail(err)
		}
		act.ioMu.RLock()
		f = act.f
	}
	return act, f, size, nil
}
