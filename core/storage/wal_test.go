package storage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// walCluster is a set of partitions under /data sharing one WAL.
type walCluster struct {
	t     *testing.T
	fsys  *faultfs.FS
	wopts storage.WALOptions
	w     *storage.WAL
	parts []*storage.Partition
	opts  storage.Options
}

func openWALCluster(t *testing.T, fsys *faultfs.FS, n int, wopts storage.WALOptions) *walCluster {
	t.Helper()
	wopts.FS, wopts.Logger = fsys, quietLogger()
	w, err := storage.OpenWAL("/data", wopts)
	if err != nil {
		t.Fatalf("open WAL: %v", err)
	}
	storage.SetWALAlways(w)
	c := &walCluster{t: t, fsys: fsys, wopts: wopts, w: w,
		opts: storage.Options{FS: fsys, Logger: quietLogger(), WAL: w, SegmentMaxBytes: 64 << 10}}
	for i := range n {
		p, err := storage.OpenPartition(fmt.Sprintf("/data/q/t/%d", i), c.opts)
		if err != nil {
			t.Fatalf("open partition %d: %v", i, err)
		}
		c.parts = append(c.parts, p)
	}
	return c
}

func (c *walCluster) close() {
	c.t.Helper()
	for _, p := range c.parts {
		if err := p.Close(); err != nil {
			c.t.Fatalf("close partition: %v", err)
		}
	}
	if err := c.w.Close(); err != nil {
		c.t.Fatalf("close WAL: %v", err)
	}
}

// abandon drops the cluster after a crash of its filesystem (closing fails
// on the dead filesystem, which is fine).
func (c *walCluster) abandon() {
	for _, p := range c.parts {
		p.Close()
	}
	c.w.Close()
}

// checkRecords fails unless partition i holds exactly want (payload ids).
func (c *walCluster) checkRecords(i int, want []int) {
	c.t.Helper()
	p := c.parts[i]
	first, next := p.Bounds()
	if first != 0 || next != uint64(len(want)) {
		c.t.Fatalf("partition %d: bounds [%d,%d), want [0,%d)", i, first, next, len(want))
	}
	for off, id := range want {
		r, err := p.Read(uint64(off))
		if err != nil {
			c.t.Fatalf("partition %d offset %d: %v", i, off, err)
		}
		if string(r.Data) != string(payload(id, 1000)) {
			c.t.Fatalf("partition %d offset %d: wrong data", i, off)
		}
	}
}

// Under FsyncAlways with a WAL, a confirmed append is durable in the WAL
// and its segment is left unsynced: the WAL's fsync is the commit.
func TestWALConfirmFsyncsTheWALNotTheSegment(t *testing.T) {
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 2, storage.WALOptions{})
	defer c.close()
	if _, err := c.parts[1].Append(payload(99, 1000), 0); err != nil { // creates the first WAL file
		t.Fatal(err)
	}
	walSyncs, logSyncs := fsys.FileSyncs(".wal"), fsys.FileSyncs(".log")
	for i := range 10 {
		if _, err := c.parts[i%2].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := fsys.FileSyncs(".log") - logSyncs; got != 0 {
		t.Errorf("%d segment fsyncs for 10 confirmed appends, want 0", got)
	}
	if got := fsys.FileSyncs(".wal") - walSyncs; got < 1 || got > 10 {
		t.Errorf("%d WAL fsyncs for 10 confirmed appends, want 1..10", got)
	}
	unsynced := fsys.Unsynced()
	for name := range unsynced {
		if strings.HasSuffix(name, ".wal") {
			t.Errorf("WAL file %s has unsynced bytes after the appends were confirmed", name)
		}
	}
	for i := range 10 { // readable, from the segment or from memory (lag.go)
		off := uint64(i / 2)
		if i%2 == 1 {
			off++ // partition 1 holds record 99 first
		}
		r, err := c.parts[i%2].Read(off)
		if err != nil || string(r.Data) != string(payload(i, 1000)) {
			t.Fatalf("read back record %d: %v", i, err)
		}
	}
}

// A power loss that keeps nothing unsynced: the segments lose every record
// (they were never fsynced), the WAL keeps them, and recovery writes them
// back — with the settlements made in the meantime still attached.
func TestWALRecoveryWritesRecordsBack(t *testing.T) {
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 3, storage.WALOptions{})
	want := make([][]int, 3)
	for i := range 60 {
		k := i % 3
		if _, err := c.parts[k].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
		want[k] = append(want[k], i)
	}
	if err := c.parts[0].Settle(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.parts[0].Sync(); err != nil { // the journal (and this segment) durable
		t.Fatal(err)
	}
	for i := 60; i < 66; i++ { // after the Sync: in the WAL only
		if _, err := c.parts[0].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
		want[0] = append(want[0], i)
	}
	after := fsys.CrashSyncing(func(string) bool { return false })
	c.abandon()

	c = openWALCluster(t, after, 3, storage.WALOptions{})
	defer c.close()
	if storage.WALReplayed(c.w) == 0 {
		t.Fatal("recovery found no live WAL file")
	}
	for k := range 3 {
		c.checkRecords(k, want[k])
	}
	if !c.parts[0].IsSettled(0) || !c.parts[0].IsSettled(1) || c.parts[0].IsSettled(2) {
		t.Error("settlements of written-back records were lost or invented")
	}
}

// Tiny WAL files: the ring turns many times, so checkpoints (segment
// fsync, durable slot, file freed) run all the time; every confirmed record
// survives a power loss that keeps nothing unsynced.
func TestWALRingTurnsAndCheckpoints(t *testing.T) {
	defer storage.SetMinWALFileBytes(8 << 10)()
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 4, storage.WALOptions{FileBytes: 8 << 10, Files: 2})
	want := make([][]int, 4)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				id := k*1000 + i
				if _, err := c.parts[k].Append(payload(id, 1000), 0); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[k] = append(want[k], id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if walSyncs := fsys.FileSyncs(".wal"); walSyncs < 100 {
		t.Fatalf("only %d WAL fsyncs: the ring did not turn", walSyncs)
	}
	after := fsys.CrashSyncing(func(string) bool { return false })
	c.abandon()
	c = openWALCluster(t, after, 4, storage.WALOptions{FileBytes: 8 << 10, Files: 2})
	defer c.close()
	for k := range 4 {
		c.checkRecords(k, want[k])
	}
}

// After a clean shutdown the WAL holds nothing to replay.
func TestWALCleanCloseLeavesNothingToReplay(t *testing.T) {
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 2, storage.WALOptions{})
	for i := range 20 {
		if _, err := c.parts[i%2].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	c.close()
	c = openWALCluster(t, fsys.CrashSyncing(func(string) bool { return false }), 2, storage.WALOptions{})
	defer c.close()
	if n := storage.WALReplayed(c.w); n != 0 {
		t.Errorf("%d live WAL files after a clean close", n)
	}
	c.checkRecords(0, []int{0, 2, 4, 6, 8, 10, 12, 14, 16, 18})
}

// A partition directory removed and created again under the same name is
// a new incarnation: the old one's entries are not written into it.
func TestWALEntriesOfAnEarlierIncarnationAreIgnored(t *testing.T) {
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 1, storage.WALOptions{})
	for i := range 10 {
		if _, err := c.parts[0].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.parts[0].Close(); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.ReadDir("/data/q/t/0")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := fsys.Remove("/data/q/t/0/" + n); err != nil {
			t.Fatal(err)
		}
	}
	if err := fsys.SyncDir("/data/q/t/0"); err != nil {
		t.Fatal(err)
	}
	p, err := storage.OpenPartition("/data/q/t/0", c.opts) // the new incarnation
	if err != nil {
		t.Fatal(err)
	}
	c.parts[0] = p
	for i := 100; i < 103; i++ {
		if _, err := p.Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	after := fsys.CrashSyncing(func(string) bool { return false })
	c.abandon()
	c = openWALCluster(t, after, 1, storage.WALOptions{})
	defer c.close()
	c.checkRecords(0, []int{100, 101, 102})
}

// A log that does not continue into its WAL entries (records the WAL
// confirmed are gone from a part of the log recovery trusts) is
// quarantined, and stays quarantined after the WAL is freed.
func TestWALGapQuarantinesThePartition(t *testing.T) {
	fsys := faultfs.New()
	// Five records written without the WAL (durable in the segment), five
	// more through it.
	p, err := storage.OpenPartition("/data/q/t/0", storage.Options{FS: fsys, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := p.Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c := openWALCluster(t, fsys, 1, storage.WALOptions{})
	for i := 5; i < 10; i++ {
		if _, err := c.parts[0].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	after := fsys.CrashSyncing(func(string) bool { return false })
	c.abandon()
	// The log loses durable records 3 and 4 behind recovery's back.
	f, err := after.OpenFile("/data/q/t/0/00000000000000000000.log", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(32 + 3*(24+1000)); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()
	for round := range 2 { // recovery finds the gap; the next start still knows
		w, err := storage.OpenWAL("/data", storage.WALOptions{FS: after, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		storage.SetWALAlways(w)
		_, err = storage.OpenPartition("/data/q/t/0", storage.Options{FS: after, Logger: quietLogger(), WAL: w})
		if !errors.Is(err, storage.ErrQuarantined) || !strings.Contains(err.Error(), "write-ahead log") {
			t.Fatalf("open %d after a gap before the WAL's records: %v, want quarantine naming the WAL", round, err)
		}
		w.Close()
	}
}

// Records staged for a later segment write (lag.go) are readable at once,
// by Read and Scan, while appends, flushes and checkpoints go on.
func TestWALStagedRecordsAreReadable(t *testing.T) {
	defer storage.SetMinWALFileBytes(16 << 10)()
	fsys := faultfs.New()
	c := openWALCluster(t, fsys, 3, storage.WALOptions{FileBytes: 16 << 10, Files: 2})
	defer c.close()
	var wg sync.WaitGroup
	for k := range 3 {
		wg.Add(2)
		go func() { // appender
			defer wg.Done()
			for i := range 300 {
				if _, err := c.parts[k].AppendAsync(payload(k*1000+i, 1000), 0, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() { // reader: everything assigned so far reads back right
			defer wg.Done()
			for seen := uint64(0); seen < 300; {
				_, next := c.parts[k].Bounds()
				for off := seen; off < next; off++ {
					r, err := c.parts[k].Read(off)
					if err != nil || string(r.Data) != string(payload(k*1000+int(off), 1000)) {
						t.Errorf("partition %d offset %d: %v", k, off, err)
						return
					}
				}
				n := uint64(0)
				if err := c.parts[k].Scan(0, func(r storage.Record) bool {
					if r.Offset != n || string(r.Data) != string(payload(k*1000+int(n), 1000)) {
						t.Errorf("partition %d: scan at %d gave offset %d", k, n, r.Offset)
						return false
					}
					n++
					return true
				}); err != nil {
					t.Error(err)
					return
				}
				seen = next
			}
		}()
	}
	wg.Wait()
}

// A lone busy partition fsyncs its own segment (a WAL round would only add
// a second write); partitions committing at the same time share the WAL.
func TestWALOnlyWhenPartitionsCommitTogether(t *testing.T) {
	fsys := faultfs.New()
	w, err := storage.OpenWAL("/data", storage.WALOptions{FS: fsys, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	o := storage.Options{FS: fsys, Logger: quietLogger(), WAL: w}
	var parts []*storage.Partition
	for i := range 8 {
		p, err := storage.OpenPartition(fmt.Sprintf("/data/q/t/%d", i), o)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	defer func() {
		for _, p := range parts {
			p.Close()
		}
		w.Close()
	}()
	walSyncs, logSyncs := fsys.FileSyncs(".wal"), fsys.FileSyncs(".log")
	for i := range 20 { // one partition, one append at a time
		if _, err := parts[0].Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := fsys.FileSyncs(".wal") - walSyncs; got != 0 {
		t.Errorf("a lone partition used the WAL: %d WAL fsyncs", got)
	}
	if got := fsys.FileSyncs(".log") - logSyncs; got != 20 {
		t.Errorf("a lone partition made %d segment fsyncs for 20 appends, want 20", got)
	}
	// Eight partitions at once, each with a slow disk under it: their
	// commits overlap, and the overlapping ones share WAL rounds.
	fsys.SetSyncDelay(2 * time.Millisecond)
	walSyncs, logSyncs = fsys.FileSyncs(".wal"), fsys.FileSyncs(".log")
	var wg sync.WaitGroup
	for k, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if _, err := p.Append(payload(k*100+i, 1000), 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wal, seg := fsys.FileSyncs(".wal")-walSyncs, fsys.FileSyncs(".log")-logSyncs
	if wal == 0 || wal+seg >= 160 {
		t.Errorf("8 partitions × 20 appends at once: %d WAL and %d segment fsyncs, want WAL rounds shared (fewer than 160 in all)", wal, seg)
	}
}

// Checkpoints keep the segment's durable slot near the durable size (it
// rides on their fsyncs, checkpointSlotLag): after a crash, damage well
// inside what checkpoints made durable, with intact records after it, is
// corruption, not a torn tail — also when the WAL no longer holds any of
// the partition's records (another partition turned the ring since), so
// that no gap before its entries gives the damage away.
func TestWALCheckpointsKeepTheDurableSlot(t *testing.T) {
	defer storage.SetMinWALFileBytes(64 << 10)()
	fsys := faultfs.New()
	wopts := storage.WALOptions{FS: fsys, Logger: quietLogger(), FileBytes: 64 << 10, Files: 2}
	w, err := storage.OpenWAL("/data", wopts)
	if err != nil {
		t.Fatal(err)
	}
	storage.SetWALAlways(w)
	o := storage.Options{FS: fsys, Logger: quietLogger(), WAL: w, IndexEveryBytes: 1 << 20}
	p := mustOpen(t, "/data/q/t/0", o)
	other := mustOpen(t, "/data/q/t/1", o)
	for i := range 3000 { // ~3 MiB, under checkpointSlotLag: only riding moves the slot
		if _, err := p.Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 { // the ring turns twice: p's entries are checkpointed and gone
		if _, err := other.Append(payload(i, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fsys.CrashHole(rand.New(rand.NewPCG(1, 1))) // never closed
	p.Close()
	other.Close()
	w.Close()
	f, err := crashed.OpenFile("/data/q/t/0/00000000000000000000.log", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 4096), 8192) // media damage among durable records
	f.Sync()
	f.Close()
	wopts.FS = crashed
	w, err = storage.OpenWAL("/data", wopts)
	if err != nil {
		t.Fatalf("WAL recovery: %v", err)
	}
	defer w.Close()
	o.FS, o.WAL = crashed, w
	p, err = storage.OpenPartition("/data/q/t/0", o)
	if err == nil {
		_, next := p.Bounds()
		p.Close()
		t.Fatalf("open with durable records damaged: opened with %d records, want quarantine", next)
	}
	if !errors.Is(err, storage.ErrQuarantined) || strings.Contains(err.Error(), "write-ahead log") {
		t.Fatalf("open with durable records damaged: %v, want quarantine for the damage", err)
	}
}
