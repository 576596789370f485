package storage_test

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// The owner records where each epoch's records start; the history
// survives a restart, refuses an older epoch and answers where an epoch
// ends.
func TestEpochHistory(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger()}
	p := mustOpen(t, "/p", o)
	for _, step := range []struct{ epoch, records uint64 }{{1, 50}, {3, 30}, {5, 20}} {
		if err := p.BeginEpoch(step.epoch); err != nil {
			t.Fatal(err)
		}
		if err := p.BeginEpoch(step.epoch); err != nil { // again: no-op
			t.Fatal(err)
		}
		for range step.records {
			if _, err := p.Append([]byte("r"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.BeginEpoch(4); err == nil {
		t.Fatal("an older epoch was accepted")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, "/p", o)
	defer p.Close()
	want := []storage.EpochStart{{Epoch: 1, Start: 0}, {Epoch: 3, Start: 50}, {Epoch: 5, Start: 80}}
	if got := p.Epochs(); !slices.Equal(got, want) {
		t.Fatalf("history after a restart %v, want %v", got, want)
	}
	for _, c := range []struct {
		ask, found, end uint64
		ok              bool
	}{{4, 3, 80, true}, {5, 5, 100, true}, {9, 5, 100, true}, {2, 1, 50, true}, {0, 0, 0, false}} {
		found, end, ok := p.EpochEnd(c.ask)
		if found != c.found || end != c.end || ok != c.ok {
			t.Errorf("EpochEnd(%d) = %d, %d, %t; want %d, %d, %t", c.ask, found, end, ok, c.found, c.end, c.ok)
		}
	}
	const none = ^uint64(0)
	for _, c := range []struct{ off, epoch, end uint64 }{{0, 1, 50}, {49, 1, 50}, {50, 3, 80}, {80, 5, none}, {500, 5, none}} {
		if epoch, end := p.EpochOf(c.off); epoch != c.epoch || end != c.end {
			t.Errorf("EpochOf(%d) = %d, %d; want %d, %d", c.off, epoch, end, c.epoch, c.end)
		}
	}
	if err := p.BeginEpochAt(7, 101); !errors.Is(err, storage.ErrOutOfRange) {
		t.Fatalf("an epoch starting past the log: %v, want ErrOutOfRange", err)
	}
	if err := p.BeginEpochAt(7, 79); err == nil {
		t.Fatal("an epoch starting before the last one's start was accepted")
	}
	if err := p.BeginEpochAt(7, 90); err != nil {
		t.Fatal(err)
	}
}

// A truncation cuts the history with the log; an entry a crash left past
// the recovered log is dropped at open; a damaged history quarantines.
func TestEpochHistoryFollowsTheLog(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger()}
	p := mustOpen(t, "/p", o)
	for _, e := range []uint64{1, 3, 5} {
		if err := p.BeginEpoch(e); err != nil {
			t.Fatal(err)
		}
		appendK(t, p, 10)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := storage.TruncatePartition("/p", 20, o); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, "/p", o)
	if got, want := p.Epochs(), []storage.EpochStart{{Epoch: 1, Start: 0}, {Epoch: 3, Start: 10}}; !slices.Equal(got, want) {
		t.Fatalf("history after truncation at 20: %v, want %v", got, want)
	}
	// Records of a new epoch that a power loss takes away: the entry goes too.
	lazy := o
	lazy.Fsync = storage.FsyncNone
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, "/p", lazy)
	appendK(t, p, 5) // offsets 20…24, never synced
	if err := p.BeginEpoch(8); err != nil {
		t.Fatal(err)
	}
	after := fsys.CrashSyncing(func(string) bool { return false })
	p.Close()
	o.FS = after
	p = mustOpen(t, "/p", o)
	if _, next := p.Bounds(); next != 20 {
		t.Fatalf("next %d after the power loss, want 20", next)
	}
	if got := p.Epochs(); len(got) != 2 {
		t.Fatalf("history %v kept an epoch whose records were lost", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := after.OpenFile("/p/epochs", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 14)
	f.Sync()
	f.Close()
	if _, err := storage.OpenPartition("/p", o); !errors.Is(err, storage.ErrQuarantined) {
		t.Fatalf("open with a damaged epoch history: %v, want quarantine", err)
	}
}
