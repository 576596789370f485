package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Recovery rules (run by OpenPartition before the partition is shared):
//
//   - Every segment is scanned from its last trustworthy index point (the
//     header when the index is missing or invalid) to its end.
//   - In the newest segment the first bad record (short, bad CRC, wrong
//     length, or an intact one with the wrong offset) ends the log. If it
//     starts at or after the durable size the header's slot records
//     (record.go), it is a torn tail whatever follows: bytes written after
//     the last fsync reach the disk in no particular order, so a lost page
//     may sit before kept ones. The file is truncated there, fsynced, and a
//     warning names the file, position and bytes dropped (when all of it
//     is zero it is the space reserved ahead of the log, see reserve in
//     commit.go: truncated the same way, without a warning). Before the
//     durable size, or when the header records none (version 1, or a slot
//     that fails its check), it is a torn tail only if no intact record
//     follows anywhere in the file; if one does (or the record is intact
//     with the wrong offset), the damage is not a torn write: quarantine.
//   - A bad record in an older segment, a CRC-intact record carrying the
//     wrong offset, or offsets that are not dense across segments are
//     corruption: OpenPartition returns a *CorruptionError.
//
// Older segments can never legitimately have a torn tail: the committer
// fsyncs a segment before it creates the next one (under every policy).
// Nor can a header be torn once records follow it: a new segment's header
// is fsynced before any record is written after it.

// openLog recovers the segments of dir. names is the sorted directory list.
func (p *Partition) openLog(names []string) error {
	var bases []uint64
	idx := map[uint64]string{}
	for _, n := range names {
		if b, ok := parseSegmentName(n); ok {
			bases = append(bases, b)
		} else if s, ok := strings.CutSuffix(n, ".idx"); ok {
			if b, ok := parseSegmentName(s + ".log"); ok {
				idx[b] = n
			}
		}
	}
	slices.Sort(bases)
	for b, n := range idx { // an index without its segment is left over from retention
		if _, ok := slices.BinarySearch(bases, b); !ok {
			_ = p.fs.Remove(filepath.Join(p.dir, n))
		}
	}
	if len(bases) == 0 {
		s := newSegment(p.dir, 0)
		f, err := p.fs.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		s.setFile(f)
		if err := p.writeSegHeader(s); err != nil {
			s.closeFile()
			return err
		}
		if err := p.fs.SyncDir(p.dir); err != nil {
			s.closeFile()
			return err
		}
		p.segs = []*segment{s}
		return nil
	}
	for i, base := range bases {
		s := newSegment(p.dir, base)
		f, err := p.fs.OpenFile(s.path, os.O_RDWR, 0)
		if err != nil {
			p.closeSegs()
			return err
		}
		s.setFile(f)
		p.segs = append(p.segs, s)
		newest := i == len(bases)-1
		if err := p.recoverSegment(s, newest, idx[base] != ""); err != nil {
			p.closeSegs()
			return err
		}
		if !newest {
			s.seal() // the cache may close it; reads reopen it
		}
		if i > 0 {
			if prev := p.segs[i-1]; prev.next != base {
				p.closeSegs()
				return &CorruptionError{File: s.path, Pos: 0, ExpectedOffset: prev.next,
					Reason: fmt.Sprintf("offsets not dense: previous segment ends at %d, this one starts at %d", prev.next, base)}
			}
		}
	}
	return nil
}

func (p *Partition) closeSegs() {
	for _, s := range p.segs {
		s.closeFile()
	}
	p.segs = nil
}

func (p *Partition) writeSegHeader(s *segment) error {
	if _, err := writeFile(s.f, encodeSegHeader(s.base), 0); err != nil {
		return err
	}
	return syncFile(s.f)
}

// recoverSegment establishes s.size, s.next, s.index and s.maxTs.
func (p *Partition) recoverSegment(s *segment, newest, hasIdx bool) error {
	size, err := s.f.Size()
	if err != nil {
		return err
	}
	h := make([]byte, segHeaderLen)
	why := "short header"
	durable := int64(-1)
	if size >= segHeaderLen {
		if !readFull(s.f, h, 0) {
			return fmt.Errorf("storage: read header of %s", s.path)
		}
		why, durable = checkSegHeader(h, s.base)
	}
	if why != "" {
		if !newest {
			return &CorruptionError{File: s.path, Pos: 0, ExpectedOffset: s.base, Reason: why}
		}
		if intactAfter(s.f, 0, size, recHeaderLen, logCandidate(s.base, size), logVerify) {
			return &CorruptionError{File: s.path, Pos: 0, ExpectedOffset: s.base, Reason: why + "; intact records follow"}
		}
		// A torn segment creation: nothing was ever confirmed from it.
		p.log.Warn("storage: rewriting torn segment header", "file", s.path, "pos", 0, "bytes_dropped", size, "reason", why)
		if err := s.f.Truncate(0); err != nil {
			return err
		}
		return p.writeSegHeader(s) // version 2, all of it durable
	}
	s.dslotOK = binary.LittleEndian.Uint32(h[8:12]) == headerVersion
	s.dslot = durable

	start := idxEntry{0, segHeaderLen}
	rebuilt := true
	if hasIdx {
		if ents := readIndexFile(p.fs, s.idxPath, s.base, size); ents != nil {
			// Trust the newest entry whose record is really there; try a few.
			for k := len(ents) - 1; k >= 0 && k >= len(ents)-4; k-- {
				if recordAt(s.f, int64(ents[k].pos), size, s.base+uint64(ents[k].rel)) {
					s.index, start, rebuilt = slices.Clip(ents[:k+1]), ents[k], false
					break
				}
			}
		}
	}
	s.lastIdx = int64(start.pos)
	off := s.base + uint64(start.rel)
	r := newRecReader(s.f, int64(start.pos), size)
	for {
		rec, pos, bad, err := r.next(off)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("storage: read %s at %d: %w", s.path, pos, err)
		}
		if bad != "" {
			if !newest {
				return &CorruptionError{File: s.path, Pos: pos, ExpectedOffset: off, Reason: bad + " in an older segment"}
			}
			torn := durable >= 0 && pos >= durable // see the rules at the top
			if !torn && strings.HasPrefix(bad, "offset field") {
				return &CorruptionError{File: s.path, Pos: pos, ExpectedOffset: off, Reason: "intact record with the wrong offset (" + bad + ")"}
			}
			if !torn && intactAfter(s.f, pos, size, recHeaderLen, logCandidate(off, size-pos), logVerify) {
				return &CorruptionError{File: s.path, Pos: pos, ExpectedOffset: off, Reason: bad + "; intact records follow"}
			}
			if zeroFrom(s.f, pos, size) {
				// The space reserved ahead of the log (commit.go), left
				// by a crash: nothing was written there.
				p.log.Debug("storage: dropping reserved space after the last record", "file", s.path, "pos", pos, "bytes", size-pos)
			} else {
				p.log.Warn("storage: truncating torn log tail", "file", s.path, "pos", pos, "bytes_dropped", size-pos, "reason", bad, "durable", durable)
			}
			if err := s.f.Truncate(pos); err != nil {
				return err
			}
			if err := syncFile(s.f); err != nil {
				return err
			}
			durable = pos // all of it, now
			break
		}
		s.noteRecord(off, decodeHeader(rec).ts, pos, len(rec), p.opts.IndexEveryBytes)
		off++
	}
	if s.next != off { // no record scanned past the index point (cannot happen: it was validated)
		s.next = off
	}
	if s.size < int64(start.pos) {
		s.size = int64(start.pos)
	}
	s.alloc = s.size // the file ends at its data now (truncated above if not)
	// What is durable: at least what the slot says; without one, claim no
	// more than the header until the next fsync.
	s.durSize = segHeaderLen
	if durable >= 0 {
		s.durSize = min(durable, s.size)
	}
	switch {
	case newest && hasIdx:
		// The active segment's index is rewritten at roll or close; a stale
		// file must not outlive a truncation.
		_ = p.fs.Remove(s.idxPath)
	case !newest && rebuilt:
		if err := writeIndexFile(p.fs, s.idxPath, s.base, s.index); err != nil {
			p.log.Warn("storage: cannot write rebuilt index", "file", s.idxPath, "err", err)
		}
	}
	return nil
}

// zeroFrom reports whether every byte of f in [from, size) is zero.
func zeroFrom(f File, from, size int64) bool {
	buf := make([]byte, min(size-from, 1<<20))
	for pos := from; pos < size; {
		n := min(int64(len(buf)), size-pos)
		if !readFull(f, buf[:n], pos) {
			return false
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false
			}
		}
		pos += n
	}
	return true
}

// recordAt reports whether an intact record with offset want starts at pos.
func recordAt(f File, pos, size int64, want uint64) bool {
	var h [recHeaderLen]byte
	if pos+recHeaderLen > size || !readFull(f, h[:], pos) {
		return false
	}
	n := decodeHeader(h[:]).length
	if n > MaxRecordBytes || pos+recHeaderLen+int64(n) > size {
		return false
	}
	b := make([]byte, recHeaderLen+int(n))
	return readFull(f, b, pos) && checkRecord(b, want) == ""
}

// logCandidate accepts headers that could be an intact record of this log
// after a damaged one: sane length and an offset in [minOff, minOff+span/24].
func logCandidate(minOff uint64, span int64) func([]byte) (int, bool) {
	maxOff := minOff + uint64(span/recHeaderLen) + 1
	return func(h []byte) (int, bool) {
		hd := decodeHeader(h)
		if hd.length > MaxRecordBytes || hd.offset < minOff || hd.offset > maxOff {
			return 0, false
		}
		return recHeaderLen + int(hd.length), true
	}
}

func logVerify(r []byte) bool { return checkRecord(r, decodeHeader(r).offset) == "" }

// intactAfter reports whether any intact entry starts in (from, size): the
// test that tells a torn tail (nothing intact after the damage) from
// corruption in the middle. It slides over the region a window at a time;
// cand filters positions cheaply, verify checks the CRC.
func intactAfter(f File, from, size int64, hdrLen int, cand func([]byte) (int, bool), verify func([]byte) bool) bool {
	const win = 1 << 20
	buf := make([]byte, win+hdrLen)
	for base := from + 1; base+int64(hdrLen) <= size; base += win {
		n := min(int64(len(buf)), size-base)
		m, err := f.ReadAt(buf[:n], base)
		if m < int(n) && err != nil && !errors.Is(err, io.EOF) {
			return false
		}
		b := buf[:m]
		for i := 0; i+hdrLen <= len(b) && i < win; i++ {
			total, ok := cand(b[i:])
			if !ok || base+int64(i)+int64(total) > size {
				continue
			}
			var e []byte
			if i+total <= len(b) {
				e = b[i : i+total]
			} else {
				e = make([]byte, total)
				if !readFull(f, e, base+int64(i)) {
					continue
				}
			}
			if verify(e) {
				return true
			}
		}
	}
	return false
}
