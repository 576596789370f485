package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// TruncatePartition cuts the log of the partition in dir, which must not
// be open, so that next becomes its next offset: the records at next and
// after are gone. Replication needs it when a replica holds records its
// partition's owner never confirmed — a former owner that comes back
// after a failover, a follower that applied a deposed owner's tail — and
// must continue from the owner's log instead (core/storage/README.md#truncation).
//
// What goes with the records: settlements and engine state of the cut
// offsets are dropped by the next OpenPartition (the journal keeps none
// past the log's end) and by the queue's recovery; the partition gets a
// new incarnation (partition.id), so that no write-ahead log entry of the
// cut records is ever written back into it; its epoch history loses the
// entries that start at or after next. Next at or past the log's end
// cuts nothing. Next below the first retained offset is refused (ErrTrimmed):
// such a replica installs the owner's checkpoint instead.
//
// dir must have been recovered (opened and closed) since its last crash,
// as a replica's partition is before it syncs with the owner: the walk to
// next trusts the records' lengths. A crash at any point of the
// truncation leaves a log that recovery opens: the new
// incarnation is made durable first, then later segments are deleted,
// newest first, each deletion made durable before the next, then the
// segment holding next is cut (its durable slot lowered before, so that
// it never claims bytes that are gone). Running it again after a crash
// finishes the job.
func TruncatePartition(dir string, next uint64, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	fsys := opts.FS
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no replica here yet
	}
	if err != nil {
		return err
	}
	var bases []uint64
	for _, name := range names {
		if b, ok := parseSegmentName(name); ok {
			bases = append(bases, b)
		}
	}
	if len(bases) == 0 {
		return cutEpochs(fsys, dir, next) // no records: no history either, normally
	}
	slices.Sort(bases)
	if next < bases[0] {
		return fmt.Errorf("%w: cannot truncate %s at %d, below its first retained offset %d", ErrTrimmed, dir, next, bases[0])
	}
	k := len(bases) - 1
	for bases[k] > next {
		k--
	}
	if err := cutFrom(fsys, dir, bases[k], next, len(bases)-1 > k); err != nil {
		return err
	}
	for j := len(bases) - 1; j > k; j-- {
		for _, name := range []string{indexName(bases[j]), segmentName(bases[j])} {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := fsys.SyncDir(dir); err != nil {
			return err
		}
	}
	if err := cutSegment(fsys, dir, bases[k], next); err != nil {
		return err
	}
	// Last: an entry left past the cut by a crash before this point is
	// dropped at open, or cut by the next run.
	return cutEpochs(fsys, dir, next)
}

// ResetPartition empties the log of the partition in dir, which must not
// be open, and starts it again at base: every record is gone, the next
// record appended is base, and Bounds reports [base, base). Replication
// needs it when an owner's log no longer starts at 0 (retention deleted
// its settled head) and a follower's log ends before the owner's first
// record: the follower cannot copy the records in between, so it drops
// what it has (all older than anything the owner keeps) and copies from
// the owner's first record on, after installing its checkpoint.
//
// The partition gets a new incarnation first, then its segments are
// deleted newest first, each deletion durable before the next (a crash
// leaves a shorter log, or none: then it opens empty at 0 and is reset
// again), its epoch history is cleared, and last the empty segment at base
// is created and made durable. Settlements and engine state below base
// that the journal still holds name no record; the checkpoint the
// follower installs next replaces them.
func ResetPartition(dir string, base uint64, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	fsys := opts.FS
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	var bases []uint64
	for _, name := range names {
		if b, ok := parseSegmentName(name); ok {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	if len(bases) > 0 {
		if _, ok, err := readIncarnation(fsys, dir); err != nil {
			return err
		} else if ok {
			if err := replaceIncarnation(fsys, dir); err != nil {
				return err
			}
		}
	}
	for j := len(bases) - 1; j >= 0; j-- {
		for _, name := range []string{indexName(bases[j]), segmentName(bases[j])} {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := fsys.SyncDir(dir); err != nil {
			return err
		}
	}
	if err := cutEpochs(fsys, dir, 0); err != nil {
		return err
	}
	path := filepath.Join(dir, segmentName(base))
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := writeFile(f, encodeSegHeader(base), 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncFile(f); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// cutFrom gives the partition a new incarnation when anything at or past
// next is in its log: later segments exist (later), or the segment at
// base holds records from next on.
func cutFrom(fsys FS, dir string, base, next uint64, later bool) error {
	if !later {
		pos, _, err := segmentPos(fsys, dir, base, next)
		if err != nil || pos < 0 {
			return err // nothing past next
		}
	}
	if _, ok, err := readIncarnation(fsys, dir); err != nil || !ok {
		return err // never used the WAL: no entry can name it
	}
	return replaceIncarnation(fsys, dir)
}

// cutSegment cuts the segment at base just before the record at next
// (nothing when the segment ends before it).
func cutSegment(fsys FS, dir string, base, next uint64) error {
	pos, f, err := segmentPos(fsys, dir, base, next)
	if err != nil || pos < 0 {
		return err
	}
	defer f.Close()
	h := make([]byte, segHeaderLen)
	if !readFull(f, h, 0) {
		return fmt.Errorf("storage: read header of %s", filepath.Join(dir, segmentName(base)))
	}
	if why, durable := checkSegHeader(h, base); why == "" && durable > pos {
		// The slot must not claim bytes that are about to go.
		if err := writeDurable(f, segMagic, base, pos); err != nil {
			return err
		}
		if err := syncFile(f); err != nil {
			return err
		}
	}
	if err := f.Truncate(pos); err != nil {
		return err
	}
	if err := syncFile(f); err != nil {
		return err
	}
	// Its index may point past the cut; recovery would rebuild it anyway.
	if err := fsys.Remove(filepath.Join(dir, indexName(base))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsys.SyncDir(dir)
}

// segmentPos walks the records of the segment at base to the one at next
// and returns its byte position and the open file (the caller closes it),
// or -1 (and no file) when the segment's records end before next. The
// walk trusts lengths and offsets only; a record it cannot walk past
// before next is damage it reports.
func segmentPos(fsys FS, dir string, base, next uint64) (int64, File, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return -1, nil, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return -1, nil, err
	}
	pos := int64(segHeaderLen)
	h := make([]byte, recHeaderLen)
	for off := base; ; off++ {
		if pos+recHeaderLen > size || !readFull(f, h, pos) {
			f.Close()
			return -1, nil, nil // the records end here, before next
		}
		rh := decodeHeader(h)
		if rh.length == 0 && rh.offset == 0 && rh.crc == 0 {
			f.Close()
			return -1, nil, nil // reserved space: the records end here
		}
		if rh.offset != off || rh.length > MaxRecordBytes {
			f.Close()
			return -1, nil, &CorruptionError{File: path, Pos: pos, ExpectedOffset: off, Reason: "cannot walk to the truncation point"}
		}
		if off == next {
			return pos, f, nil
		}
		pos += recHeaderLen + int64(rh.length)
	}
}

// replaceIncarnation gives the partition in dir a new random id (the file
// is replaced atomically: the old id or the new one, never none).
func replaceIncarnation(fsys FS, dir string) error {
	_, err := writeIncarnation(fsys, dir)
	return err
}
