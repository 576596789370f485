package storage_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// A power loss may keep later unsynced pages and lose an earlier one (the
// disk keeps no order among pages it was not asked to flush). Damage that
// starts at or after the last durable size is a torn tail — recovery cuts
// the log there and loses nothing confirmed — not corruption
// (core/storage/README.md#recovery).
func TestHoleInUnsyncedLogTailIsATornTail(t *testing.T) {
	for _, policy := range []storage.FsyncPolicy{storage.FsyncAlways, storage.FsyncInterval, storage.FsyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			fsys := faultfs.New()
			o := storage.Options{Fsync: policy, FsyncInterval: time.Hour, FS: fsys, Logger: quietLogger()}
			p := mustOpen(t, "/p", o)
			const confirmed = 20
			for i := range confirmed {
				if _, err := p.Append(payload(i, 1000), int64(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			if policy == storage.FsyncAlways {
				// ~30 KiB of records the crash catches while they are
				// written: nobody waits for them, and the first fsync
				// after them fails. Armed first, and deferred appends (no
				// committer is woken for them): a committer fast enough to
				// fsync them before a later arming would leave nothing for
				// the failing fsync to catch. A lingering committer may
				// still take some early; the appends after its failed
				// fsync are refused, which is fine.
				fsys.FailSyncAt(1, true)
				for i := confirmed; i < confirmed+30; i++ {
					if _, err := p.AppendAsyncDeferred(payload(i, 1000), int64(i), nil); err != nil {
						break
					}
				}
				crashed := crashMidCommit(t, fsys, p)
				reopenAfterHole(t, crashed, o, confirmed)
				return
			}
			for i := confirmed; i < confirmed+30; i++ { // written, not fsynced
				if _, err := p.Append(payload(i, 1000), int64(i)); err != nil {
					t.Fatal(err)
				}
			}
			reopenAfterHole(t, fsys.CrashHole(rand.New(rand.NewPCG(1, 1))), o, confirmed)
		})
	}
}

// crashMidCommit stops the world while a commit's records are written and
// not yet fsynced: the caller armed a failing fsync (fail-stop) before the
// records; the crash is taken from the state right before it.
func crashMidCommit(t *testing.T, fsys *faultfs.FS, p *storage.Partition) *faultfs.FS {
	t.Helper()
	if err := p.Sync(); err == nil {
		t.Fatal("the failing fsync went unnoticed")
	}
	return fsys.CrashHole(rand.New(rand.NewPCG(1, 1)))
}

func reopenAfterHole(t *testing.T, crashed *faultfs.FS, o storage.Options, confirmed int) {
	t.Helper()
	if u := crashed.Unsynced(); len(u) != 0 {
		t.Fatalf("crashed fs not settled: %v", u)
	}
	o.FS = crashed
	p, err := storage.OpenPartition("/p", o)
	if err != nil {
		t.Fatalf("reopen after a hole in the unsynced tail: %v", err)
	}
	defer p.Close()
	_, next := p.Bounds()
	if next < uint64(confirmed) {
		t.Fatalf("next %d: confirmed records lost", next)
	}
	for i := range int(next) {
		r, err := p.Read(uint64(i))
		if err != nil || !bytes.Equal(r.Data, payload(i, 1000)) {
			t.Fatalf("record %d after recovery: %v", i, err)
		}
	}
	if off, err := p.Append([]byte("after"), 0); err != nil || off != next {
		t.Fatalf("append after recovery: %d %v", off, err)
	}
}

// The journal: a hole among its unsynced entries cuts it there; every
// entry a completed fsync covered is kept.
func TestHoleInUnsyncedJournalTailIsATornTail(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{Fsync: storage.FsyncNone, FS: fsys, Logger: quietLogger()}
	p := mustOpen(t, "/p", o)
	for i := range 10 {
		if _, err := p.Append([]byte{byte(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 1000) }
	for i := range 3 {
		if err := p.AppendState(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Settle(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 30; i++ { // written to the OS, not fsynced
		if err := p.AppendState(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.FS = fsys.CrashHole(rand.New(rand.NewPCG(1, 1)))
	p, err := storage.OpenPartition("/p", o)
	if err != nil {
		t.Fatalf("reopen after a hole in the journal's unsynced tail: %v", err)
	}
	defer p.Close()
	var got int
	if err := p.ReplayState(func(e []byte) error {
		if !bytes.Equal(e, entry(got)) {
			t.Fatalf("entry %d replayed wrong", got)
		}
		got++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got < 3 || got >= 30 {
		t.Fatalf("%d entries replayed: want the 3 synced ones and no more than the prefix before the hole", got)
	}
	if !p.IsSettled(0) || !p.IsSettled(1) {
		t.Fatal("synced settlements lost")
	}
}

// Damage inside what was durable is still corruption: a clean Close leaves
// the whole log durable, and a damaged record followed by an intact one
// quarantines the partition.
func TestDamageInsideDurableLogIsQuarantined(t *testing.T) {
	fsys := faultfs.New()
	// No index point past the header: open scans the whole segment.
	o := storage.Options{FS: fsys, Logger: quietLogger(), IndexEveryBytes: 1 << 20}
	p := mustOpen(t, "/p", o)
	for i := range 20 {
		if _, err := p.Append(payload(i, 1000), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.OpenFile("/p/00000000000000000000.log", 2 /* O_RDWR */, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 4096), 8192) // a zeroed page among durable records
	f.Sync()
	f.Close()
	_, err = storage.OpenPartition("/p", o)
	if !errors.Is(err, storage.ErrQuarantined) {
		t.Fatalf("open with durable records damaged: %v, want quarantine", err)
	}
}

// While a partition runs, its header's durable slot follows the fsyncs
// (trailing by less than 1 MiB): after a crash, damage well inside what
// was durable, with intact records after it, is corruption, not a torn
// tail.
func TestDamageBeforeDurableSlotAfterCrashIsQuarantined(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger(), IndexEveryBytes: 1 << 20}
	p := mustOpen(t, "/p", o)
	for i := range 2500 { // ~2.5 MiB, every record confirmed
		if _, err := p.Append(payload(i, 1000), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fsys.CrashHole(rand.New(rand.NewPCG(1, 1))) // never closed
	f, err := crashed.OpenFile("/p/00000000000000000000.log", 2 /* O_RDWR */, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 4096), 8192) // media damage among durable records
	f.Sync()
	f.Close()
	o.FS = crashed
	_, err = storage.OpenPartition("/p", o)
	if !errors.Is(err, storage.ErrQuarantined) {
		t.Fatalf("open with durable records damaged: %v, want quarantine", err)
	}
}

// A segment created at a roll: its header must be durable before records
// are written after it, or a power loss that loses the header's page and
// keeps the records after it is indistinguishable from a damaged header.
func TestHoleOverNewSegmentIsATornTail(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{Fsync: storage.FsyncInterval, FsyncInterval: time.Hour, FS: fsys, Logger: quietLogger(),
		SegmentMaxBytes: 16 << 10}
	p := mustOpen(t, "/p", o)
	n := 0
	for ; n < 14; n++ { // the first segment
		if _, err := p.Append(payload(n, 1000), int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	confirmed := n
	for ; n < 14+12; n++ { // a roll, then ~12 KiB in the new segment, unsynced
		if _, err := p.Append(payload(n, 1000), int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	o.FS = fsys.CrashHole(rand.New(rand.NewPCG(1, 1)))
	p, err := storage.OpenPartition("/p", o)
	if err != nil {
		t.Fatalf("reopen after a hole in a new segment: %v", err)
	}
	defer p.Close()
	if _, next := p.Bounds(); next < uint64(confirmed) {
		t.Fatalf("next %d: records before the roll lost", next)
	}
}
