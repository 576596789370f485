// Package faultfs is an in-memory storage.FS that models what a power loss
// does to files, for crash tests of the partition log.
//
// The model (POSIX-like, deliberately pessimistic):
//   - Each file (inode) has durable content and current content. File.Sync
//     makes current content durable.
//   - Each directory has a durable set of entries and a current set.
//     Creating, renaming or removing an entry changes the current set only;
//     SyncDir makes the directory's current set durable. A file whose name
//     was never made durable disappears in a crash even if it was synced —
//     which is what catches a missing directory fsync after a segment roll.
//   - Crash returns the filesystem as it would be found after a power loss:
//     the durable directory entries, and for each file its durable content
//     plus a random prefix of the bytes written since its last sync (torn at
//     any byte). Sometimes the rest of the unsynced region is kept as
//     garbage or zeros (the size reached the disk, the data did not),
//     sometimes an unsynced truncation is undone, and sometimes the tail
//     has a hole: every unsynced byte reached the disk except one or more
//     whole 4 KiB pages inside the unsynced region, which read as zeros (a
//     disk keeps no order among the pages it has not been asked to flush).
//   - A write that overwrites bytes already synced, before the file's
//     unsynced tail (a header field, or a record written into space the
//     file was extended by and synced), survives or not per 512-byte
//     sector: a sector is written whole or not at all, the atomicity that
//     databases rely on for their control blocks. CrashHole is a crash that
//     always makes a page hole where one fits, in such overwrites or in the
//     tail.
//   - Directories themselves (MkdirAll) are durable at once.
//
// Errors can be injected on the Nth Sync (file or directory) or Nth write.
// After Crash the old FS and its open files return ErrCrashed.
package faultfs

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
)

// ErrCrashed is returned by every operation on a filesystem (or file) that
// has been replaced by Crash.
var ErrCrashed = errors.New("faultfs: filesystem crashed")

// ErrInjected is the error returned by an injected fault.
var ErrInjected = errors.New("faultfs: injected I/O error")

type inode struct {
	data    []byte // current content
	durable []byte // content as of the last Sync
	// dirtyFrom: every byte before it is identical in data and durable
	// (the first position written or truncated since the last Sync),
	// except the islands.
	dirtyFrom int
	// islands are the ranges before dirtyFrom overwritten since the last
	// Sync (ascending, disjoint).
	islands []span
}

type span struct{ from, to int }

// addIsland records [from, to) as overwritten, merging ranges that touch.
func (ino *inode) addIsland(from, to int) {
	out := ino.islands[:0:0]
	for _, r := range ino.islands {
		if r.to < from || r.from > to {
			out = append(out, r)
			continue
		}
		from, to = min(from, r.from), max(to, r.to)
	}
	out = append(out, span{from, to})
	sort.Slice(out, func(i, j int) bool { return out[i].from < out[j].from })
	ino.islands = out
}

// clipIslands drops island bytes at or past end (they are in the tail now).
func (ino *inode) clipIslands(end int) {
	out := ino.islands[:0]
	for _, r := range ino.islands {
		if r.from < end {
			out = append(out, span{r.from, min(r.to, end)})
		}
	}
	ino.islands = out
}

type dir struct {
	cur     map[string]*inode
	durable map[string]*inode
}

// FS is the in-memory filesystem. The zero value is not usable; use New.
type FS struct {
	mu      sync.Mutex
	dirs    map[string]*dir
	crashed bool

	syncs, writes       int            // operations so far
	fileSyncs           map[string]int // successful File.Sync calls by name extension
	syncDelay           time.Duration
	failSync, failWrite int // 1-based operation number that fails; 0 = none
	failSticky          bool
}

var _ storage.FS = (*FS)(nil)

// New returns an empty filesystem.
func New() *FS { return &FS{dirs: map[string]*dir{}} }

// FailSyncAt makes the nth Sync or SyncDir from now fail with ErrInjected
// (and, when sticky, every later one too).
func (f *FS) FailSyncAt(n int, sticky bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSync, f.failSticky = f.syncs+n, sticky
}

// SetSyncDelay makes every Sync and SyncDir take d (outside the lock), as a
// disk does: concurrent work then interleaves with fsyncs the way it does
// in production instead of fsyncs being instantaneous.
func (f *FS) SetSyncDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncDelay = d
}

func (f *FS) delay() {
	f.mu.Lock()
	d := f.syncDelay
	f.mu.Unlock()
	// Spin with yields: Go timers are coarse (often ~1ms) and the point
	// is a short, realistic fsync latency.
	for t0 := time.Now(); time.Since(t0) < d; {
		runtime.Gosched()
	}
}

// FailWriteAt makes the nth WriteAt from now fail with ErrInjected.
func (f *FS) FailWriteAt(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWrite = f.writes + n
}

// Syncs returns the number of Sync and SyncDir calls so far.
func (f *FS) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// FileSyncs returns the number of successful File.Sync calls so far on
// files whose name has extension ext (as filepath.Ext reports it, e.g.
// ".log"). Directory syncs are not counted.
func (f *FS) FileSyncs(ext string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fileSyncs[ext]
}

// Unsynced returns, for every file (by path) whose content has changed
// since its last Sync, how many bytes a power loss could lose or garble
// now: the span from the first changed byte of the tail to the end of the
// longer of the current and the durable content, plus the synced bytes
// overwritten before it. Files that are fully durable are
// not listed. Directory entries are not considered.
func (f *FS) Unsynced() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for p, d := range f.dirs {
		for n, ino := range d.cur {
			from := min(ino.dirtyFrom, len(ino.data), len(ino.durable))
			k := max(len(ino.data), len(ino.durable)) - from
			for _, r := range ino.islands {
				k += min(r.to, from) - min(r.from, from)
			}
			if k > 0 {
				out[filepath.Join(p, n)] = k
			}
		}
	}
	return out
}

func (f *FS) lookupDir(path string) (*dir, string, error) {
	d := f.dirs[filepath.Clean(filepath.Dir(path))]
	if d == nil {
		return nil, "", &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return d, filepath.Base(path), nil
}

// OpenFile implements storage.FS.
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (storage.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return nil, ErrCrashed
	}
	d, base, err := f.lookupDir(name)
	if err != nil {
		return nil, err
	}
	ino := d.cur[base]
	switch {
	case ino == nil && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case ino != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case ino == nil:
		ino = &inode{}
		d.cur[base] = ino
	case flag&os.O_TRUNC != 0:
		ino.data = ino.data[:0]
		ino.dirtyFrom = 0
		ino.islands = nil
	}
	return &File{fs: f, ino: ino, name: name, ro: flag&(os.O_RDWR|os.O_WRONLY) == 0}, nil
}

// ReadDir implements storage.FS (current entries, sorted).
func (f *FS) ReadDir(path string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return nil, ErrCrashed
	}
	d := f.dirs[filepath.Clean(path)]
	if d == nil {
		return nil, &fs.PathError{Op: "readdir", Path: path, Err: fs.ErrNotExist}
	}
	names := make([]string, 0, len(d.cur))
	for n := range d.cur {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Remove implements storage.FS.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	d, base, err := f.lookupDir(name)
	if err != nil {
		return err
	}
	if d.cur[base] == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.cur, base)
	return nil
}

// Rename implements storage.FS.
func (f *FS) Rename(oldname, newname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	od, ob, err := f.lookupDir(oldname)
	if err != nil {
		return err
	}
	nd, nb, err := f.lookupDir(newname)
	if err != nil {
		return err
	}
	ino := od.cur[ob]
	if ino == nil {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	delete(od.cur, ob)
	nd.cur[nb] = ino
	return nil
}

// MkdirAll implements storage.FS. Directories are durable at once.
func (f *FS) MkdirAll(path string, perm fs.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if f.dirs[p] == nil {
			f.dirs[p] = &dir{cur: map[string]*inode{}, durable: map[string]*inode{}}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// SyncDir implements storage.FS: the directory's current entries become durable.
func (f *FS) SyncDir(path string) error {
	f.delay()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.syncFault(); err != nil {
		return err
	}
	d := f.dirs[filepath.Clean(path)]
	if d == nil {
		return &fs.PathError{Op: "syncdir", Path: path, Err: fs.ErrNotExist}
	}
	d.durable = make(map[string]*inode, len(d.cur))
	for n, ino := range d.cur {
		d.durable[n] = ino
	}
	return nil
}

// syncFault counts a sync and returns the injected error if it is due.
// Caller holds mu.
func (f *FS) syncFault() error {
	if f.crashed {
		return ErrCrashed
	}
	f.syncs++
	if f.failSync > 0 && (f.syncs == f.failSync || (f.failSticky && f.syncs > f.failSync)) {
		return ErrInjected
	}
	return nil
}

// Crash returns the filesystem as found after a power loss at this instant
// (see the package comment) and retires f.
func (f *FS) Crash(rng *rand.Rand) *FS { return f.crash(rng, false) }

// CrashHole is Crash where every file whose unsynced tail holds a whole
// 4 KiB page with bytes after it loses exactly such a hole — the first
// whole page of the unsynced tail, and at random up to three more — and
// keeps every other byte written, before and after it. Other files keep
// all their writes. It retires f.
func (f *FS) CrashHole(rng *rand.Rand) *FS { return f.crash(rng, true) }

func (f *FS) crash(rng *rand.Rand, hole bool) *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashed = true
	nf := New()
	copies := map[*inode]*inode{}
	paths := make([]string, 0, len(f.dirs))
	for p := range f.dirs {
		paths = append(paths, p)
	}
	sort.Strings(paths) // deterministic rng use per seed
	for _, p := range paths {
		d := f.dirs[p]
		nd := &dir{cur: map[string]*inode{}, durable: map[string]*inode{}}
		names := make([]string, 0, len(d.durable))
		for n := range d.durable {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			ino := d.durable[n]
			c := copies[ino]
			if c == nil {
				b := crashContent(ino, rng, hole)
				c = &inode{data: b, durable: append([]byte(nil), b...), dirtyFrom: len(b)}
				copies[ino] = c
			}
			nd.cur[n], nd.durable[n] = c, c
		}
		nf.dirs[p] = nd
	}
	return nf
}

// CrashSyncing returns the filesystem as found after a power loss that came
// right after the files for which synced reports true (by path) were
// fsynced: those keep their current content, every other file exactly its
// durable content (nothing written since its last Sync survives). Directory
// entries are the durable ones, as with Crash. It retires f. Tests use it to
// build one precise crash state, such as a journal entry that reached the
// disk while the record it names did not.
func (f *FS) CrashSyncing(synced func(path string) bool) *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashed = true
	nf := New()
	copies := map[*inode]*inode{}
	for p, d := range f.dirs {
		nd := &dir{cur: map[string]*inode{}, durable: map[string]*inode{}}
		for n, ino := range d.durable {
			c := copies[ino]
			if c == nil {
				b := ino.durable
				if synced(filepath.Join(p, n)) {
					b = ino.data
				}
				b = append([]byte(nil), b...)
				c = &inode{data: b, durable: append([]byte(nil), b...), dirtyFrom: len(b)}
				copies[ino] = c
			}
			nd.cur[n], nd.durable[n] = c, c
		}
		nf.dirs[p] = nd
	}
	return nf
}

// sectorSize is the unit a disk writes whole or not at all (islands).
const sectorSize = 512

// pageSize is the unit of a hole in the unsynced tail.
const pageSize = 4096

// crashContent picks what a file holds after a power loss. With hole, the
// tail gets a hole when one fits, and otherwise survives whole.
func crashContent(ino *inode, rng *rand.Rand, hole bool) []byte {
	d := min(ino.dirtyFrom, len(ino.durable), len(ino.data))
	// Overwritten synced bytes: each sector is old or new.
	head := append([]byte(nil), ino.data[:d]...)
	for _, r := range ino.islands {
		for a := r.from; a < min(r.to, d); {
			e := min((a/sectorSize+1)*sectorSize, r.to, d)
			if !hole && rng.IntN(2) == 0 {
				copy(head[a:e], ino.durable[a:e])
			}
			a = e
		}
	}
	if hole {
		if out, ok := holeContent(ino, d, head, rng, true); ok {
			return out
		}
		return append(head, ino.data[d:]...)
	}
	x := rng.IntN(7)
	if x == 3 {
		if out, ok := holeContent(ino, d, head, rng, false); ok {
			return out
		}
	}
	keep := d
	if len(ino.data) > d {
		keep += rng.IntN(len(ino.data) - d + 1)
	}
	out := append(head, ino.data[d:keep]...)
	switch x {
	case 0: // the size reached the disk, the data did not: garbage
		for range len(ino.data) - keep {
			out = append(out, byte(rng.UintN(256)))
		}
	case 1: // ... or zeros
		out = append(out, make([]byte, len(ino.data)-keep)...)
	case 2: // an unsynced truncation or overwrite did not happen
		if len(ino.durable) > keep {
			out = append(out, ino.durable[keep:]...)
		}
	}
	return out
}

// holeContent returns the file with every write kept except one to four
// consecutive whole pages of the unsynced region (the overwritten ranges
// and the tail from d), which hold what the disk had before (zeros past
// the durable end); at least one byte after the hole is kept. head is the
// content before d. first puts the hole at the first page that fits. ok is
// false when no page fits.
func holeContent(ino *inode, d int, head []byte, rng *rand.Rand, first bool) ([]byte, bool) {
	data := ino.data
	spans := make([]span, 0, len(ino.islands)+1)
	for _, r := range ino.islands {
		if r.from < d {
			spans = append(spans, span{r.from, min(r.to, d)})
		}
	}
	spans = append(spans, span{d, len(data)})
	var pages []int
	for _, r := range spans {
		for a := (r.from + pageSize - 1) / pageSize * pageSize; a+pageSize <= r.to && a+pageSize < len(data); a += pageSize {
			pages = append(pages, a)
		}
	}
	if len(pages) == 0 {
		return nil, false
	}
	i := 0
	if !first {
		i = rng.IntN(len(pages))
	}
	n := 1
	for want := 1 + rng.IntN(4); n < want && i+n < len(pages) && pages[i+n] == pages[i]+n*pageSize; n++ {
	}
	out := append(head, data[d:]...)
	for b := pages[i]; b < pages[i]+n*pageSize; b++ {
		out[b] = 0
		if b < len(ino.durable) {
			out[b] = ino.durable[b]
		}
	}
	return out, true
}

// File is an open file of FS.
type File struct {
	fs     *FS
	ino    *inode
	name   string
	ro     bool
	closed bool
}

var _ storage.File = (*File)(nil)

func (h *File) check() error {
	if h.fs.crashed {
		return ErrCrashed
	}
	if h.closed {
		return os.ErrClosed
	}
	return nil
}

// ReadAt implements io.ReaderAt.
func (h *File) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(); err != nil {
		return 0, err
	}
	if off >= int64(len(h.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt.
func (h *File) WriteAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(); err != nil {
		return 0, err
	}
	if h.ro {
		return 0, &fs.PathError{Op: "write", Path: h.name, Err: fs.ErrPermission}
	}
	h.fs.writes++
	if h.fs.writes == h.fs.failWrite {
		return 0, ErrInjected
	}
	ino := h.ino
	end := int(off) + len(p)
	if n := len(ino.data); end > n {
		if end > cap(ino.data) {
			nb := make([]byte, n, 2*end)
			copy(nb, ino.data)
			ino.data = nb
		}
		ino.data = ino.data[:end]
		clear(ino.data[n:]) // a gap past the old end reads as zeros
	}
	copy(ino.data[off:], p)
	if end <= ino.dirtyFrom && end <= len(ino.durable) {
		ino.addIsland(int(off), end) // synced bytes overwritten, the tail untouched
	} else {
		ino.dirtyFrom = min(ino.dirtyFrom, int(off))
		ino.clipIslands(ino.dirtyFrom)
	}
	return len(p), nil
}

// Sync implements storage.File: the current content becomes durable.
func (h *File) Sync() error {
	h.fs.delay()
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	if err := h.fs.syncFault(); err != nil {
		return err
	}
	ino := h.ino
	d := min(ino.dirtyFrom, len(ino.durable))
	ino.durable = append(ino.durable[:d], ino.data[d:]...)
	for _, r := range ino.islands {
		copy(ino.durable[r.from:r.to], ino.data[r.from:r.to])
	}
	ino.islands = nil
	ino.dirtyFrom = len(ino.data)
	if h.fs.fileSyncs == nil {
		h.fs.fileSyncs = map[string]int{}
	}
	h.fs.fileSyncs[filepath.Ext(h.name)]++
	return nil
}

// Truncate implements storage.File.
func (h *File) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	ino := h.ino
	if int(size) < len(ino.data) {
		ino.data = ino.data[:size]
	} else {
		ino.data = append(ino.data, make([]byte, int(size)-len(ino.data))...)
	}
	ino.dirtyFrom = min(ino.dirtyFrom, int(size))
	ino.clipIslands(ino.dirtyFrom)
	return nil
}

// Size implements storage.File.
func (h *File) Size() (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check(); err != nil {
		return 0, err
	}
	return int64(len(h.ino.data)), nil
}

// Close implements storage.File.
func (h *File) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return os.ErrClosed
	}
	h.closed = true
	return nil
}
