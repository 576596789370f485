package storage

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// A segment is one file of the log, named by the offset of its first record
// (20 decimal digits, so names sort like offsets), with a sparse index
// beside it (same name, .idx).
type segment struct {
	base    uint64
	path    string
	idxPath string
	// f is the writable file of the active segment, used by the writer
	// role (and by recovery); nil once the segment is sealed. Readers go
	// through h (see fdcache.go): the same file while the segment is
	// active, a lazily opened, cached one once it is sealed.
	f File

	// Guarded by Partition.mu; written only by the committer (and by
	// recovery before the partition is shared).
	size int64 // bytes written to the file (header included)
	// alloc is the file's length: size plus the space reserved after it
	// (see reserve in commit.go). Owned by the writer role.
	alloc   int64
	next    uint64     // offset after the last record in the file
	maxTs   int64      // newest record timestamp seen (age retention)
	hasTs   bool       // maxTs is set
	index   []idxEntry // sparse index: first entry is always {0, segHeaderLen}
	lastIdx int64      // file position of the last index entry

	// The header's durable slot (record.go), owned by the writer role:
	// durSize is the size the last completed fsync covered, dslot what the
	// header says (rewritten before an fsync when it lags), dslotOK whether
	// the header has a slot (version 2; a version 1 segment never gets one).
	durSize int64
	dslot   int64
	dslotOK bool

	// ioMu keeps the read handle open while a reader uses it outside
	// Partition.mu: readers RLock; whoever closes it (retention, Close,
	// the descriptor cache's eviction) holds it for writing.
	ioMu   sync.RWMutex
	h      atomic.Pointer[fileHandle] // read handle; nil while closed
	openMu sync.Mutex                 // serializes lazy opens of h
	used   atomic.Bool                // read since the last eviction sweep
	slot   int                        // index in sealedFDs.ring, or -1 (sealedFDs.mu)
}

func segmentName(base uint64) string { return fmt.Sprintf("%020d.log", base) }
func indexName(base uint64) string   { return fmt.Sprintf("%020d.idx", base) }

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, ".log")
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

func newSegment(dir string, base uint64) *segment {
	return &segment{
		base:    base,
		path:    filepath.Join(dir, segmentName(base)),
		idxPath: filepath.Join(dir, indexName(base)),
		size:    segHeaderLen,
		alloc:   segHeaderLen,
		next:    base,
		index:   []idxEntry{{rel: 0, pos: segHeaderLen}},
		lastIdx: segHeaderLen,
		slot:    -1,
		durSize: segHeaderLen,
		dslot:   segHeaderLen,
		dslotOK: true,
	}
}

// noteRecord updates the in-memory index and bounds after a record at file
// position pos was written. Caller holds Partition.mu (or owns s alone).
func (s *segment) noteRecord(off uint64, ts int64, pos int64, size int, every int) {
	if pos-s.lastIdx >= int64(every) {
		s.index = append(s.index, idxEntry{rel: uint32(off - s.base), pos: uint32(pos)})
		s.lastIdx = pos
	}
	if !s.hasTs || ts > s.maxTs {
		s.maxTs, s.hasTs = ts, true
	}
	s.next = off + 1
	s.size = pos + int64(size)
}

// lookup returns the index entry at or below off. Caller holds Partition.mu.
func (s *segment) lookup(off uint64) idxEntry {
	rel := uint32(off - s.base)
	lo, hi := 0, len(s.index)
	for lo < hi {
		m := (lo + hi) / 2
		if s.index[m].rel <= rel {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return s.index[lo-1]
}

// readOne reads the record with offset want, walking headers forward from
// a known record boundary (pos, off). end bounds the walk. Every header on
// the way must carry the next dense offset; the target record's CRC is
// verified. f is s's read handle; caller holds s.ioMu (read).
func (s *segment) readOne(f File, pos int64, off, want uint64, end int64) (Record, error) {
	var h [recHeaderLen]byte
	for {
		if pos+recHeaderLen > end {
			return Record{}, s.corrupt(pos, off, "record runs past the written end")
		}
		if _, err := f.ReadAt(h[:], pos); err != nil {
			return Record{}, fmt.Errorf("storage: read %s at %d: %w", s.path, pos, err)
		}
		hd := decodeHeader(h[:])
		if hd.offset != off || hd.length > MaxRecordBytes || pos+recHeaderLen+int64(hd.length) > end {
			return Record{}, s.corrupt(pos, off, "bad record header")
		}
		if off == want {
			buf := make([]byte, recHeaderLen+int(hd.length))
			if _, err := f.ReadAt(buf, pos); err != nil {
				return Record{}, fmt.Errorf("storage: read %s at %d: %w", s.path, pos, err)
			}
			if why := checkRecord(buf, want); why != "" {
				return Record{}, s.corrupt(pos, off, why)
			}
			return Record{Offset: want, Timestamp: hd.ts, Data: buf[recHeaderLen:]}, nil
		}
		pos += recHeaderLen + int64(hd.length)
		off++
	}
}

func (s *segment) corrupt(pos int64, off uint64, why string) error {
	return &CorruptionError{File: s.path, Pos: pos, ExpectedOffset: off, Reason: why}
}

// recReader reads consecutive records of one file through a window, so a
// scan costs one ReadAt per window instead of one per record.
type recReader struct {
	f      File
	pos    int64 // position of the next record
	end    int64 // read nothing at or past end
	win    []byte
	winPos int64
}

const readWindow = 256 << 10

func newRecReader(f File, pos, end int64) *recReader {
	return &recReader{f: f, pos: pos, end: end}
}

// bytes returns n bytes at file position at, from the window when possible.
func (r *recReader) bytes(at int64, n int) ([]byte, error) {
	if at >= r.winPos && at+int64(n) <= r.winPos+int64(len(r.win)) {
		i := at - r.winPos
		return r.win[i : i+int64(n)], nil
	}
	want := max(n, readWindow)
	if rest := r.end - at; int64(want) > rest {
		want = int(rest)
	}
	if cap(r.win) < want {
		r.win = make([]byte, want)
	}
	r.win = r.win[:want]
	m, err := r.f.ReadAt(r.win, at)
	if m < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		r.win = r.win[:0]
		return nil, err
	}
	r.win, r.winPos = r.win[:m], at
	return r.win[:n], nil
}

// next returns the record at the current position, expected to carry
// offset want. rec aliases the window (valid until the next call). At the
// end it returns io.EOF. A damaged record yields bad != "" (and no error).
func (r *recReader) next(want uint64) (rec []byte, pos int64, bad string, err error) {
	pos = r.pos
	if pos >= r.end {
		return nil, pos, "", io.EOF
	}
	if r.end-pos < recHeaderLen {
		return nil, pos, "truncated record header", nil
	}
	h, err := r.bytes(pos, recHeaderLen)
	if err != nil {
		return nil, pos, "", err
	}
	n := decodeHeader(h).length
	if n > MaxRecordBytes {
		return nil, pos, "length field too large", nil
	}
	if r.end-pos < recHeaderLen+int64(n) {
		return nil, pos, "truncated record", nil
	}
	rec, err = r.bytes(pos, recHeaderLen+int(n))
	if err != nil {
		return nil, pos, "", err
	}
	if why := checkRecord(rec, want); why != "" {
		return nil, pos, why, nil
	}
	r.pos = pos + int64(len(rec))
	return rec, pos, "", nil
}
