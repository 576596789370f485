package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// The write-ahead log (WAL): one per broker, shared by every partition
// under FsyncAlways that was opened with it (Options.WAL).
//
// Why: under FsyncAlways a confirm waits for an fsync, and an fsync costs
// about the same for one record as for a hundred. A partition that fsyncs
// its own segment pays one fsync per commit round, so a producer spreading
// its messages over many partitions paid one fsync per partition per round
// and its throughput fell with the partition count (a third at 12
// partitions). With the WAL every partition's commit writes its records to
// its segment as before (page cache only) and the same bytes, as one entry
// per batch, to the WAL; one fsync of the WAL then confirms the records of
// every partition that committed in that round. Segments keep their
// offsets, files, index, retention and reads unchanged; they are fsynced
// off the confirm path, at checkpoints, and whenever they were before
// (roll, Sync, Close).
//
// Layout: Files files of FileBytes each in <root>/wal, named 00.wal, 01.wal
// …, used as a ring. Each starts with a 32-byte header:
//
//	0  [8]byte magic "FBRLWAL\x00"
//	8  u32 version   1
//	12 u32 state     0 free, 1 live
//	16 u64 seq       order of the file's current use; grows for ever
//	24 u32 reserved  0
//	28 u32 crc       CRC32C of bytes [0,28)
//
// then entries, back to back, never across files:
//
//	0  u32 n         body length (≥ 1)
//	4  u32 body crc  CRC32C of the body
//	8  u32 head crc  CRC32C of the file's seq (u64) and bytes [0,8)
//	12 [n]byte body  kind (u8) then the kind's payload
//
// Kind 1 (records): uvarint key length, key (the partition directory
// relative to root, slash-separated), u64 incarnation (partition.id), u64
// offset of the first record, u32 count, then the records exactly as the
// segment holds them. The head CRC covers the file's seq, so an entry left
// from an earlier use of a recycled file fails its check: recovery reads a
// file's entries up to the first one that does not check.
//
// A round (group commit): partitions' committers hand their batches to
// enqueue; the first to come while no round is running leads it on its
// own goroutine (no hand-off), writes every entry gathered so far with one
// write per file and fsyncs; the others wait for the round's signal. A
// leader that finds more entries waiting when its round ends passes the
// next round to a new goroutine, so its own partition goes on. A partition
// whose last commit went through the WAL does not wake its committer for
// new records: it offers itself (offer), and the leader takes its records
// itself (takeReady, Partition.takeForWAL).
//
// Checkpoint: when a file is full the leader moves on to a free one and
// hands the full file to the checkpointer, which makes every partition
// that wrote into it durable by itself (Partition.walCheckpoint: fsync of
// the active segment, then its durable slot, see record.go) and frees the
// file. The leader waits for a free file only when the checkpointer is a
// whole ring behind.
//
// Recovery (OpenWAL, before any partition opens): the live files are read
// in seq order and, for each partition they name, the partition is opened
// once with its entries (OpenPartition repairs its log: records past the
// recovered end are written back; the log must continue densely, or the
// partition is quarantined with a marker file), fsynced and closed; then
// every file is freed. See core/storage/README.md#write-ahead-log.
const (
	walHeaderLen   = 32
	walEntryHdrLen = 12
	walVersion     = 1
	walKindRecords = 1

	defaultWALFileBytes = 64 << 20
	defaultWALFiles     = 4
)

// minWALFileBytes is the smallest file size accepted (a variable so that
// tests can make files fill, and the ring turn, after a few records).
var minWALFileBytes int64 = 64 << 10

var walMagic = [8]byte{'F', 'B', 'R', 'L', 'W', 'A', 'L', 0}

// WALOptions configure a WAL. The zero value is usable.
type WALOptions struct {
	FS        FS
	Logger    *slog.Logger
	FileBytes int64 // size of each file; default 64 MiB, at least 64 KiB
	Files     int   // files in the ring; default 4, at least 2
}

// WAL is the broker's write-ahead log (see the comment above). Partitions
// use it through Options.WAL; the broker opens it before any partition
// and closes it after every partition is closed.
type WAL struct {
	root      string // partition keys are relative to it
	dir       string // root/wal
	fs        FS
	log       *slog.Logger
	fileBytes int64
	files     int

	always bool // tests: every commit goes through the WAL (SetWALAlways)

	mu       sync.Mutex
	buf      []byte              // entries waiting for the next round
	ends     []int               // end of each entry in buf
	users    map[*Partition]bool // partitions with entries in buf
	waiters  []walWaiter         // released when buf's round is durable
	started  chan struct{}       // closed when buf's round starts (queued)
	leading  bool                // a round is being written
	lastUser int                 // partitions in the last round (gather)
	winStart time.Time           // the current window of shared (useWAL)
	winSeen  map[*Partition]bool // partitions that committed in it
	winCount int                 // len(winSeen)
	winPrev  int                 // winCount of the window before
	syncDur  time.Duration       // recent fsync time (gather)
	failErr  error               // a WAL write or fsync failed: fail-stop
	closed   bool                //
	free     []*walFile          // files ready for use, next first
	full     []*walFile          // waiting for their checkpoint, oldest first
	ckRun    bool                // the checkpointer runs
	ckWG     sync.WaitGroup      // the checkpointer, for Close
	space    sync.Cond           // the leader waits for a free file, enqueuers for room, Close for the last round
	spare    []byte              // recycled round buffers
	spareEnd []int               //
	spareUse map[*Partition]bool //
	spareWt  []walWaiter         //
	ready    []*Partition        // partitions whose records the next round takes (offer)
	spareRdy []*Partition        //
	take     walTake             // leader only (takeReady)
	taken    int                 // commits the leader took itself (tests)
	lagged   map[*Partition]bool // partitions the leader staged records for (sweepLag)
	swept    time.Time           // the last sweepLag
	sweepOn  bool                // sweepTimer is armed
	sweepT   *time.Timer         //
	seq      uint64              // the highest seq handed out
	act      *walFile            // file being written; leader only
	pos      int64               // next write position in act; leader only
	replayed int                 // recovery: live files found at open
}

type walFile struct {
	slot  int
	path  string
	f     File
	seq   uint64
	users map[*Partition]bool // partitions with entries in the file; the leader adds, the checkpointer reads after
}

// walRef locates one records entry found at recovery.
type walRef struct {
	file  *walFile
	pos   int64 // of the body
	n     int
	inc   uint64
	first uint64
	count uint32
}

type walRefSet []walRef

// OpenWAL opens (creating if needed) the WAL in root/wal and recovers:
// every partition its live files name is repaired from them (see the
// comment at the top of the file), then every file is freed. Partitions
// under root must not be open yet.
func OpenWAL(root string, opts WALOptions) (*WAL, error) {
	if opts.FS == nil {
		opts.FS = OSFS{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FileBytes <= 0 {
		opts.FileBytes = defaultWALFileBytes
	}
	if opts.FileBytes < minWALFileBytes {
		return nil, fmt.Errorf("storage: WAL file size %d below the minimum of %d", opts.FileBytes, minWALFileBytes)
	}
	if opts.FileBytes > maxSegmentMaxBytes {
		return nil, fmt.Errorf("storage: WAL file size %d above the 1 GiB limit", opts.FileBytes)
	}
	if opts.Files <= 0 {
		opts.Files = defaultWALFiles
	}
	if opts.Files < 2 {
		return nil, fmt.Errorf("storage: a WAL needs at least 2 files, got %d", opts.Files)
	}
	w := &WAL{
		root:      filepath.Clean(root),
		dir:       filepath.Join(root, "wal"),
		fs:        opts.FS,
		log:       opts.Logger,
		fileBytes: opts.FileBytes,
		files:     opts.Files,
		users:     map[*Partition]bool{},
		winSeen:   map[*Partition]bool{},
		started:   make(chan struct{}),
		spareUse:  map[*Partition]bool{},
		lagged:    map[*Partition]bool{},
	}
	w.space.L = &w.mu
	if err := w.fs.MkdirAll(w.dir, 0o755); err != nil {
		return nil, err
	}
	if err := w.recover(); err != nil {
		w.closeFiles()
		return nil, err
	}
	return w, nil
}

// maxEntry is the largest entry a file holds; a batch whose entry is
// larger is made durable by its partition's own fsync instead.
func (w *WAL) maxEntry() int { return int(w.fileBytes - walHeaderLen) }

// encodeWALHeader returns a file header.
func encodeWALHeader(seq uint64, live bool) []byte {
	h := make([]byte, walHeaderLen)
	copy(h[0:8], walMagic[:])
	binary.LittleEndian.PutUint32(h[8:12], walVersion)
	if live {
		binary.LittleEndian.PutUint32(h[12:16], 1)
	}
	binary.LittleEndian.PutUint64(h[16:24], seq)
	binary.LittleEndian.PutUint32(h[28:32], crc32.Checksum(h[:28], castTab))
	return h
}

// decodeWALHeader returns the seq and state of a valid header; ok false
// for anything else (a torn or foreign header: the file holds nothing).
func decodeWALHeader(h []byte) (seq uint64, live, ok bool) {
	if len(h) < walHeaderLen || [8]byte(h[0:8]) != walMagic ||
		binary.LittleEndian.Uint32(h[8:12]) != walVersion ||
		crc32.Checksum(h[:28], castTab) != binary.LittleEndian.Uint32(h[28:32]) {
		return 0, false, false
	}
	return binary.LittleEndian.Uint64(h[16:24]), binary.LittleEndian.Uint32(h[12:16]) == 1, true
}

// walEntryLen is the encoded size of a records entry for key and batch b.
func walEntryLen(key string, b *batch) int {
	return walEntryHdrLen + 1 + binary.MaxVarintLen64 + len(key) + 8 + 8 + 4 + len(b.buf)
}

// appendWALRecords encodes b as a records entry; the head CRC is filled in
// by the leader (putWALSeq), which knows the file's seq.
func appendWALRecords(buf []byte, key string, inc uint64, b *batch) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, walEntryHdrLen)...)
	buf = append(buf, walKindRecords)
	buf = binary.AppendUvarint(buf, uint64(len(key)))
	buf = append(buf, key...)
	buf = binary.LittleEndian.AppendUint64(buf, inc)
	buf = binary.LittleEndian.AppendUint64(buf, b.first)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(b.n))
	buf = append(buf, b.buf...)
	body := buf[start+walEntryHdrLen:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castTab))
	return buf
}

// appendWALEntries appends a records entry for every non-empty batch of
// take to buf, and each entry's end to ends.
func (p *Partition) appendWALEntries(buf []byte, ends []int, take []*batch) ([]byte, []int) {
	for _, b := range take {
		if b.n == 0 {
			continue
		}
		buf = appendWALRecords(buf, p.walKey, p.inc, b)
		ends = append(ends, len(buf))
	}
	return buf, ends
}

// putWALSeq fills in the head CRC of every entry in b (whole entries) for
// a file with seq.
func putWALSeq(b []byte, seq uint64) {
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seq)
	for len(b) >= walEntryHdrLen {
		n := int(binary.LittleEndian.Uint32(b[0:4]))
		c := crc32.Update(crc32.Checksum(s[:], castTab), castTab, b[0:8])
		binary.LittleEndian.PutUint32(b[8:12], c)
		b = b[walEntryHdrLen+n:]
	}
}

// walWaiter is what one partition's commit waits for in a round: the
// batches' signals and AppendAsync callbacks, released by the round's
// leader once the round is durable (walDone).
type walWaiter struct {
	p    *Partition
	sigs []*commitSignal
	cbs  []asyncCB
}

// enqueue adds p's batches (one entry each) to the next round and returns
// at once: the round's leader releases ww when the round is durable. The
// records are already written to p's segment; the entries are copies, so
// the batches may be reused. It waits while the entries not yet written
// reach bufLimit (the bound on what the WAL holds in memory). It reports
// whether the caller must lead the round (w.lead(true)), and an error when
// the WAL refuses (ww then is not released by the WAL). Caller: p's
// writer role.
func (w *WAL) enqueue(p *Partition, take []*batch, ww walWaiter) (bool, error) {
	w.mu.Lock()
	for len(w.buf) >= w.bufLimit() && w.leading && w.errLocked() == nil {
		w.space.Wait()
	}
	if err := w.errLocked(); err != nil {
		w.mu.Unlock()
		return false, err
	}
	w.addLocked(p, take, ww)
	lead := !w.leading
	w.leading = true
	w.mu.Unlock()
	return lead, nil
}

// addLocked appends p's batches to the next round, one entry each, and
// ww to its waiters. Caller holds mu.
func (w *WAL) addLocked(p *Partition, take []*batch, ww walWaiter) {
	w.buf, w.ends = p.appendWALEntries(w.buf, w.ends, take)
	w.users[p] = true
	w.waiters = append(w.waiters, ww)
}

// queued returns, when p has entries in the round not started yet, a
// channel closed when that round starts; else nil. A committer that waits
// for it before its next commit writes what came meanwhile to its segment
// in one write (one per round instead of several small ones) and loses
// nothing: those records could only go into the next round anyway.
func (w *WAL) queued(p *Partition) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.users[p] {
		return w.started
	}
	return nil
}

// walShared is the window over which useWAL counts the partitions that
// commit: at least two in the current or the previous window means the
// WAL pays. Longer than the gap between a busy partition's commits, short
// enough that a partition left alone soon goes back to its own fsync.
const walShared = 10 * time.Millisecond

// shared notes that p commits records now and reports whether at least
// two partitions (p among them) committed in this window or the last.
func (w *WAL) shared(p *Partition) bool {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sharedLocked(p, now)
}

func (w *WAL) sharedLocked(p *Partition, now time.Time) bool {
	if now.Sub(w.winStart) >= walShared {
		w.winPrev = w.winCount
		if now.Sub(w.winStart) >= 2*walShared {
			w.winPrev = 0 // the last window saw nobody
		}
		w.winCount = 0
		clear(w.winSeen)
		w.winStart = now
	}
	if !w.winSeen[p] {
		w.winSeen[p] = true
		w.winCount++
	}
	return w.winCount >= 2 || w.winPrev >= 2
}

// bufLimit bounds the bytes of entries waiting for a round.
func (w *WAL) bufLimit() int { return int(min(w.fileBytes, 16<<20)) }

func (w *WAL) errLocked() error {
	if w.failErr != nil {
		return w.failErr
	}
	if w.closed {
		return fmt.Errorf("storage: WAL closed: %w", ErrClosed)
	}
	return nil
}

// lead writes rounds while entries wait, and releases each round's waiters
// once it is durable: all partitions' confirms of a round come from one
// goroutine, in a burst. Called with leading set; clears it when nothing
// waits. An inline leader (a partition's committer, which enqueued the
// first entries) writes one round and passes the rest to a new goroutine.
func (w *WAL) lead(inline bool) {
	for {
		w.gather()
		w.takeReady()
		w.mu.Lock()
		buf, ends, users, waiters := w.buf, w.ends, w.users, w.waiters
		w.buf, w.ends, w.users, w.waiters = w.spare[:0], w.spareEnd[:0], w.spareUse, w.spareWt[:0]
		close(w.started)
		w.started = make(chan struct{})
		err := w.failErr
		w.mu.Unlock()

		var took time.Duration // the round's fsync (gather)
		if err == nil && len(buf) > 0 {
			statWALRounds.Add(1)
			statWALCommits.Add(uint64(len(waiters)))
			took, err = w.writeRound(buf, ends, users)
			if err != nil {
				err = w.failed(err)
			}
		}
		for i := range waiters {
			waiters[i].p.walDone(&waiters[i], err)
			waiters[i] = walWaiter{}
		}
		w.sweepLag(false)

		w.mu.Lock()
		if took > 0 {
			w.syncDur = (3*w.syncDur + took) / 4
		}
		w.lastUser = len(users)
		clear(users)
		w.spare, w.spareEnd, w.spareUse, w.spareWt = buf[:0], ends[:0], users, waiters[:0]
		more := len(w.waiters) > 0 || len(w.ready) > 0
		if !more {
			w.leading = false
			w.armSweepLocked()
		}
		w.space.Broadcast() // enqueuers waiting for room, Close waiting for the last round
		w.mu.Unlock()
		if !more {
			return
		}
		if inline {
			go w.lead(false)
			return
		}
	}
}

// gather waits (bounded) until as many partitions have entries as in the
// last round: right after a round releases N partitions, the first to
// commit again would otherwise lead a round of one. At most a quarter of
// the recent fsync time and 250µs; a lone partition never waits.
func (w *WAL) gather() {
	w.mu.Lock()
	target := w.lastUser
	if target <= 1 || len(w.users)+len(w.ready) >= target || w.failErr != nil {
		w.mu.Unlock()
		return
	}
	d := min(w.syncDur/4, 250*time.Microsecond)
	w.mu.Unlock()
	for t0 := time.Now(); time.Since(t0) < d; {
		runtime.Gosched()
		w.mu.Lock()
		n := len(w.users) + len(w.ready)
		w.mu.Unlock()
		if n >= target {
			return
		}
	}
}

// failed makes the WAL fail-stop: after a failed write or fsync nothing
// more is confirmed through it (as for a partition, see fail).
func (w *WAL) failed(cause error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failErr == nil {
		w.failErr = fmt.Errorf("%w: write-ahead log: %w", ErrFailed, cause)
		w.log.Error("storage: write-ahead log failed; restart required", "dir", w.dir, "err", cause)
		w.space.Broadcast()
	}
	return w.failErr
}

// writeRound writes the round's entries and fsyncs them, and returns how
// long the fsync took. While the fsync runs (on its own goroutine) the
// leader takes the records that became ready meanwhile into the next
// round: with many partitions that take costs about as much as the fsync,
// and done after it, it lengthened every round by that much. Leader only.
func (w *WAL) writeRound(buf []byte, ends []int, users map[*Partition]bool) (time.Duration, error) {
	if err := w.writeEntries(buf, ends, users); err != nil {
		return 0, err
	}
	f := w.act
	done := make(chan time.Duration, 1)
	var serr error
	go func() {
		start := time.Now()
		serr = syncFile(f.f)
		done <- time.Since(start)
	}()
	w.takeReady()
	took := <-done
	if serr != nil {
		return took, fmt.Errorf("fsync %s: %w", f.path, serr)
	}
	return took, nil
}

// writeEntries writes whole entries into the current file, moving to the
// next file when one does not fit (the full one is fsynced first), and
// leaves the last file's fsync to the caller. Leader only.
func (w *WAL) writeEntries(buf []byte, ends []int, users map[*Partition]bool) error {
	start, i := 0, 0
	for start < len(buf) {
		if w.act == nil || int64(ends[i]-start) > w.fileBytes-w.pos {
			if err := w.rotate(); err != nil {
				return err
			}
		}
		end := start
		for i < len(ends) && int64(ends[i]-start) <= w.fileBytes-w.pos {
			end = ends[i]
			i++
		}
		if end == start { // cannot happen: commit only takes entries that fit an empty file
			return fmt.Errorf("write-ahead log entry of %d bytes larger than a file", ends[i]-start)
		}
		chunk := buf[start:end]
		putWALSeq(chunk, w.act.seq)
		if _, err := writeFile(w.act.f, chunk, w.pos); err != nil {
			return fmt.Errorf("write %s at %d: %w", w.act.path, w.pos, err)
		}
		w.pos += int64(len(chunk))
		for p := range users {
			w.act.users[p] = true
		}
		start = end
		if start < len(buf) {
			// The next entry goes to the next file: this one is complete
			// and durable before any entry after it counts.
			if err := syncFile(w.act.f); err != nil {
				return fmt.Errorf("fsync %s: %w", w.act.path, err)
			}
		}
	}
	return nil
}

// rotate hands the current file (if any) to the checkpointer and starts
// the next free one: its header, live with a new seq, is written here and
// made durable by the round's fsync (an entry only counts once that fsync
// is done, and recovery ignores a file whose header did not make it).
// Leader only; it waits while no file is free.
func (w *WAL) rotate() error {
	w.mu.Lock()
	if w.act != nil {
		w.full = append(w.full, w.act)
		w.act = nil
		if !w.ckRun {
			w.ckRun = true
			w.ckWG.Add(1)
			go w.checkpointer()
		}
	}
	stalled := time.Time{}
	for len(w.free) == 0 && w.failErr == nil && !w.closed {
		if stalled.IsZero() {
			stalled = time.Now()
		}
		w.space.Wait()
	}
	if err := w.errLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	f := w.free[0]
	w.free = w.free[1:]
	w.seq++
	f.seq = w.seq
	if !stalled.IsZero() {
		w.log.Warn("storage: write-ahead log waited for a checkpoint; confirms were held back",
			"waited", time.Since(stalled).Round(time.Microsecond), "files", w.files, "file_bytes", w.fileBytes)
	}
	w.mu.Unlock()
	if f.f == nil {
		if err := w.createFile(f); err != nil {
			return err
		}
	}
	if _, err := writeFile(f.f, encodeWALHeader(f.seq, true), 0); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	f.users = map[*Partition]bool{}
	w.act, w.pos = f, walHeaderLen
	return nil
}

// createFile creates a ring file (sparse, full length) and makes its
// directory entry durable.
func (w *WAL) createFile(f *walFile) error {
	h, err := w.fs.OpenFile(f.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := writeFile(h, encodeWALHeader(0, false), 0); err != nil {
		h.Close()
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := h.Truncate(w.fileBytes); err != nil {
		h.Close()
		return fmt.Errorf("size %s: %w", f.path, err)
	}
	if err := syncFile(h); err != nil {
		h.Close()
		return fmt.Errorf("fsync %s: %w", f.path, err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		h.Close()
		return fmt.Errorf("fsync dir %s: %w", w.dir, err)
	}
	f.f = h
	return nil
}

// checkpointer frees full files, oldest first: every partition that wrote
// into one is made durable by itself, then the file is marked free. A
// failed checkpoint makes the WAL fail-stop: the file cannot be reused
// while its entries are the only durable copy of confirmed records, and
// an fsync that failed is never retried (see Partition.fail); a restart
// recovers from what reached the disk.
func (w *WAL) checkpointer() {
	defer w.ckWG.Done()
	for {
		w.mu.Lock()
		if len(w.full) == 0 || w.closed || w.failErr != nil {
			w.ckRun = false
			w.mu.Unlock()
			return
		}
		f := w.full[0]
		w.mu.Unlock()
		if err := w.checkpoint(f); err != nil {
			w.failed(fmt.Errorf("checkpoint of %s: %w", f.path, err))
			continue
		}
		w.mu.Lock()
		w.full = w.full[1:]
		w.free = append(w.free, f)
		w.space.Broadcast()
		w.mu.Unlock()
	}
}

// checkpoint makes the entries of f redundant (each partition that wrote
// into it has its records durable in its own files) and marks f free.
//
// It first starts the writeback of every partition's segment, then
// fsyncs them one by one. Fsynced in turn from cold, each segment's data
// went to the disk in its own small burst, each followed by a cache
// flush, and the WAL's rounds waited behind every one: on this project's
// VM, 100 segments of 640 KiB took 220–250 ms that way and the WAL's
// fsync p90 rose from 0.5 ms to 2 ms meanwhile; with the writeback
// started first, 140–165 ms and a p90 of 0.55–0.65 ms (docs/performance.md).
func (w *WAL) checkpoint(f *walFile) error {
	for p := range f.users {
		if err := p.walWriteback(); err != nil {
			return fmt.Errorf("partition %s: %w", p.dir, err)
		}
	}
	for p := range f.users {
		if err := p.walCheckpoint(); err != nil {
			return fmt.Errorf("partition %s: %w", p.dir, err)
		}
	}
	return w.markFree(f)
}

// markFree rewrites f's header as free (keeping its seq) and fsyncs it, so
// that recovery does not read its entries again.
func (w *WAL) markFree(f *walFile) error {
	if _, err := writeFile(f.f, encodeWALHeader(f.seq, false), 0); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := syncFile(f.f); err != nil {
		return fmt.Errorf("fsync %s: %w", f.path, err)
	}
	f.users = nil
	return nil
}

// Close waits for the running round and checkpoint, then frees every file
// whose partitions are all durable (closed cleanly, or checkpointed now),
// so that the next start has nothing to replay. Close every partition
// that uses the WAL first.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	// Closed first: a leader waiting for a free file gives up (its round
	// fails with ErrClosed) instead of waiting for a checkpointer that
	// stops now.
	w.closed = true
	if w.sweepT != nil {
		w.sweepT.Stop()
	}
	w.space.Broadcast()
	for w.leading {
		w.space.Wait()
	}
	w.mu.Unlock()
	w.ckWG.Wait()

	w.mu.Lock()
	live := append([]*walFile(nil), w.full...)
	if w.act != nil {
		live = append(live, w.act)
	}
	fail := w.failErr
	w.mu.Unlock()
	var err error
	if fail == nil {
		for _, f := range live {
			if cerr := w.checkpoint(f); cerr != nil {
				err = errors.Join(err, cerr)
				break // later files must stay live too
			}
		}
	}
	w.closeFiles()
	return err
}

func (w *WAL) closeFiles() {
	seen := map[*walFile]bool{}
	all := append(append(append([]*walFile(nil), w.free...), w.full...), w.act)
	for _, f := range all {
		if f != nil && f.f != nil && !seen[f] {
			seen[f] = true
			f.f.Close()
		}
	}
}

// key returns the WAL key of the partition in dir.
func (w *WAL) key(dir string) (string, error) {
	rel, err := filepath.Rel(w.root, filepath.Clean(dir))
	if err != nil || rel == "." || rel == ".." || len(rel) > 2 && rel[:3] == ".."+string(filepath.Separator) {
		return "", fmt.Errorf("storage: partition %s is not under the write-ahead log's root %s", dir, w.root)
	}
	return filepath.ToSlash(rel), nil
}
