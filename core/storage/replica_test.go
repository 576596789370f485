package storage_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// copyTo ships owner's records from offset from on to follower in
// batches of up to 64, as a replication stream would, and returns the
// next offsets done reported, in order.
func copyTo(t *testing.T, owner, follower *storage.Partition, from uint64) []uint64 {
	t.Helper()
	var (
		mu    sync.Mutex
		nexts []uint64
		wg    sync.WaitGroup
		batch []storage.Record
	)
	ship := func() {
		first := batch[0].Offset
		wg.Add(1)
		err := follower.AppendReplica(first, batch, func(next uint64, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("replica batch at %d: %v", first, err)
			}
			mu.Lock()
			nexts = append(nexts, next)
			mu.Unlock()
		})
		if err != nil {
			wg.Done()
			t.Fatalf("AppendReplica at %d: %v", first, err)
		}
		batch = nil
	}
	err := owner.Scan(from, func(r storage.Record) bool {
		batch = append(batch, storage.Record{Offset: r.Offset, Timestamp: r.Timestamp, Data: bytes.Clone(r.Data)})
		if len(batch) == 64 {
			ship()
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) > 0 {
		ship()
	}
	wg.Wait()
	return nexts
}

// appendK appends payload(i, 1000) for i in [0, n).
func appendK(t *testing.T, p *storage.Partition, n int) {
	t.Helper()
	for i := range n {
		if _, err := p.Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(t *testing.T, fsys *faultfs.FS, path string) []byte {
	t.Helper()
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

// A follower fed the owner's records holds the same log: offsets,
// timestamps, data, and segment files whose records are byte for byte the
// owner's (so either can serve or hand over the other's reads).
func TestAppendReplicaCopiesTheOwnersLog(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger(), SegmentMaxBytes: 64 << 10}
	owner := mustOpen(t, "/owner", o)
	defer owner.Close()
	for i := range 300 {
		if _, err := owner.Append(payload(i, 500+i), int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	follower := mustOpen(t, "/follower", o)
	nexts := copyTo(t, owner, follower, 0)
	for i, n := range nexts {
		if want := min(uint64(64*(i+1)), 300); n != want {
			t.Fatalf("done %d reported next %d, want %d", i, n, want)
		}
	}
	if _, next := follower.Bounds(); next != 300 {
		t.Fatalf("follower next %d, want 300", next)
	}
	for off := range uint64(300) {
		a, err := owner.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		b, err := follower.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		if a.Timestamp != b.Timestamp || !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("offset %d differs: ts %d/%d", off, a.Timestamp, b.Timestamp)
		}
	}
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	if err := owner.Sync(); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.ReadDir("/owner")
	if err != nil {
		t.Fatal(err)
	}
	segs := 0
	for _, name := range names {
		if len(name) != 24 || name[20:] != ".log" {
			continue
		}
		segs++
		a, b := readAll(t, fsys, "/owner/"+name), readAll(t, fsys, "/follower/"+name)
		// The header's durable slot (bytes 12–27) follows each side's own
		// fsyncs, and the owner's active segment may keep reserved space.
		a, b = bytes.TrimRight(a[32:], "\x00"), bytes.TrimRight(b[32:], "\x00")
		if !bytes.Equal(a, b) {
			t.Fatalf("segment %s: records differ (%d and %d bytes)", name, len(a), len(b))
		}
	}
	if segs < 3 {
		t.Fatalf("only %d segments: the test meant to cross rolls", segs)
	}
}

// A batch that does not start at the follower's next offset is a gap or
// an overlap: refused, nothing appended, done never called.
func TestAppendReplicaRefusesGapsAndOverlaps(t *testing.T) {
	o := storage.Options{FS: faultfs.New(), Logger: quietLogger()}
	p := mustOpen(t, "/p", o)
	defer p.Close()
	appendK(t, p, 10)
	for _, first := range []uint64{12, 5, 0} {
		called := false
		err := p.AppendReplica(first, []storage.Record{{Offset: first, Data: []byte("x")}}, func(uint64, error) { called = true })
		var me *storage.OffsetMismatchError
		if !errors.As(err, &me) || me.Want != first || me.Next != 10 {
			t.Fatalf("batch at %d: %v, want an offset mismatch against next 10", first, err)
		}
		if called {
			t.Fatalf("batch at %d: done called for a refused batch", first)
		}
	}
	if _, next := p.Bounds(); next != 10 {
		t.Fatalf("next %d after refused batches, want 10", next)
	}
	if err := p.AppendReplica(10, []storage.Record{{Offset: 10, Data: []byte("x")}}, nil); err != nil {
		t.Fatalf("batch at next: %v", err)
	}
}

// done reports durability: what it covered survives a power loss that
// keeps nothing unsynced.
func TestAppendReplicaDoneMeansDurable(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger()}
	owner := mustOpen(t, "/owner", o)
	defer owner.Close()
	appendK(t, owner, 200)
	follower := mustOpen(t, "/follower", o)
	nexts := copyTo(t, owner, follower, 0)
	after := fsys.CrashSyncing(func(string) bool { return false })
	follower.Close()
	o.FS = after
	p := mustOpen(t, "/follower", o)
	defer p.Close()
	if _, next := p.Bounds(); next != nexts[len(nexts)-1] {
		t.Fatalf("after a power loss the follower holds up to %d, done reported %d", next, nexts[len(nexts)-1])
	}
}

// TruncatePartition cuts the log at next: the records, settlements past
// it go, what comes before stays, and the next append takes offset next.
func TestTruncatePartitionCutsTheTail(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger(), SegmentMaxBytes: 16 << 10}
	p := mustOpen(t, "/p", o)
	appendK(t, p, 100) // ~1 KiB each: several segments
	if err := p.Settle(3, 40, 70, 90); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second run (as after a crash during the first) changes nothing
		if err := storage.TruncatePartition("/p", 42, o); err != nil {
			t.Fatal(err)
		}
	}
	p = mustOpen(t, "/p", o)
	defer p.Close()
	if first, next := p.Bounds(); first != 0 || next != 42 {
		t.Fatalf("bounds [%d,%d) after truncation at 42", first, next)
	}
	for off := range uint64(42) {
		r, err := p.Read(off)
		if err != nil || !bytes.Equal(r.Data, payload(int(off), 1000)) {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
	if !p.IsSettled(3) || !p.IsSettled(40) || p.IsSettled(70) || p.IsSettled(90) {
		t.Fatal("settlements before the cut lost, or past it kept")
	}
	if off, err := p.Append([]byte("new"), 1); err != nil || off != 42 {
		t.Fatalf("append after truncation: offset %d, %v", off, err)
	}
	if err := storage.TruncatePartition("/nothing-here", 0, o); err != nil {
		t.Fatalf("truncating an empty directory: %v", err)
	}
}

// Next at the very start of a segment drops that segment whole; next past
// the end cuts nothing; next below the first retained offset is refused.
func TestTruncatePartitionBounds(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger(), SegmentMaxBytes: 16 << 10}
	p := mustOpen(t, "/p", o)
	appendK(t, p, 60)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.ReadDir("/p")
	if err != nil {
		t.Fatal(err)
	}
	var second uint64
	for _, name := range names {
		var base uint64
		if n, _ := fmt.Sscanf(name, "%020d.log", &base); n == 1 && base > 0 && (second == 0 || base < second) {
			second = base
		}
	}
	if second == 0 {
		t.Fatal("one segment only: the test meant to cross a roll")
	}
	if err := storage.TruncatePartition("/p", 1000, o); err != nil {
		t.Fatalf("truncate past the end: %v", err)
	}
	if err := storage.TruncatePartition("/p", second, o); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, "/p", o)
	if _, next := p.Bounds(); next != second {
		t.Fatalf("next %d after truncation at segment base %d", next, second)
	}
	if off, err := p.Append([]byte("new"), 1); err != nil || off != second {
		t.Fatalf("append after truncation: offset %d, %v", off, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove("/p/00000000000000000000.log"); err != nil { // as retention would
		t.Fatal(err)
	}
	fsys.Remove("/p/00000000000000000000.idx")
	if err := storage.TruncatePartition("/p", 1, o); !errors.Is(err, storage.ErrTrimmed) {
		t.Fatalf("truncate below the first retained offset: %v, want ErrTrimmed", err)
	}
}

// The write-ahead log may still hold entries of the cut records (the
// broker crashed before it freed its files): recovery must not write them
// back. The cut gives the partition a new incarnation, which the WAL's
// entries do not name.
func TestTruncatePartitionOutlivesTheWAL(t *testing.T) {
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 2, storage.WALOptions{})
	for i := range 40 {
		if _, err := c.parts[i%2].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.parts[0].Close(); err != nil { // durable in its segment, still in the WAL
		t.Fatal(err)
	}
	if err := storage.TruncatePartition("/data/q/t/0", 5, c.opts); err != nil {
		t.Fatal(err)
	}
	after := fsys.CrashSyncing(func(string) bool { return false }) // the WAL's files stay live
	c.abandon()
	c = openWALCluster(t, after, 2, storage.WALOptions{})
	defer c.close()
	if storage.WALReplayed(c.w) == 0 {
		t.Fatal("the WAL held nothing at the crash: the test shows nothing")
	}
	c.checkRecords(0, []int{0, 2, 4, 6, 8})
}

// The cut lowers the segment's durable slot: records appended after it
// and torn by a power loss are a torn tail, not damage among durable
// records (which would quarantine the partition).
func TestTruncatePartitionLowersTheDurableSlot(t *testing.T) {
	for seed := range uint64(8) {
		fsys := faultfs.New()
		o := storage.Options{FS: fsys, Logger: quietLogger(), SegmentMaxBytes: 16 << 10}
		p := mustOpen(t, "/p", o)
		appendK(t, p, 100)
		if err := p.Close(); err != nil { // the active segment's slot claims every byte
			t.Fatal(err)
		}
		if err := storage.TruncatePartition("/p", 92, o); err != nil { // in the active segment (90…99)
			t.Fatal(err)
		}
		lazy := o
		lazy.Fsync, lazy.FsyncInterval = storage.FsyncInterval, time.Hour
		p = mustOpen(t, "/p", lazy)
		for i := range 12 { // unsynced, over where the old slot pointed
			if _, err := p.Append(payload(500+i, 1000), 0); err != nil {
				t.Fatal(err)
			}
		}
		o.FS = fsys.CrashHole(rand.New(rand.NewPCG(seed, 7)))
		p.Close()
		q, err := storage.OpenPartition("/p", o)
		if err != nil {
			t.Fatalf("seed %d: reopen after a power loss over records appended past the cut: %v", seed, err)
		}
		if _, next := q.Bounds(); next < 92 {
			t.Fatalf("seed %d: next %d, the records before the cut were durable", seed, next)
		}
		q.Close()
	}
}

// ResetPartition empties a log and starts it at a new base: a follower
// whose log ends before its owner's first retained record starts its copy
// there. Running it again (as after a crash during the first) ends the
// same way; an empty or missing directory is reset too.
func TestResetPartitionStartsPastZero(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger(), SegmentMaxBytes: 16 << 10}
	p := mustOpen(t, "/p", o)
	appendK(t, p, 60) // several segments
	if err := p.BeginEpochAt(3, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := storage.ResetPartition("/p", 500, o); err != nil {
			t.Fatal(err)
		}
	}
	p = mustOpen(t, "/p", o)
	if first, next := p.Bounds(); first != 500 || next != 500 {
		t.Fatalf("bounds [%d,%d) after a reset at 500", first, next)
	}
	if h := p.Epochs(); len(h) != 0 {
		t.Fatalf("epoch history %v kept across the reset", h)
	}
	if _, err := p.Read(10); !errors.Is(err, storage.ErrTrimmed) {
		t.Fatalf("read of an old offset: %v, want ErrTrimmed", err)
	}
	for i := range 30 {
		if off, err := p.Append(payload(i, 1000), 1); err != nil || off != 500+uint64(i) {
			t.Fatalf("append %d after the reset: offset %d, %v", i, off, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, "/p", o)
	defer p.Close()
	if first, next := p.Bounds(); first != 500 || next != 530 {
		t.Fatalf("bounds [%d,%d) after reopening, want [500,530)", first, next)
	}
	for i := range 30 {
		r, err := p.Read(500 + uint64(i))
		if err != nil || !bytes.Equal(r.Data, payload(i, 1000)) {
			t.Fatalf("offset %d: %v", 500+i, err)
		}
	}
	if err := storage.ResetPartition("/fresh", 7, o); err != nil {
		t.Fatal(err)
	}
	q := mustOpen(t, "/fresh", o)
	defer q.Close()
	if first, next := q.Bounds(); first != 7 || next != 7 {
		t.Fatalf("fresh directory: bounds [%d,%d), want [7,7)", first, next)
	}
}
