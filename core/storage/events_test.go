package storage_test

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

func replayed(t *testing.T, p *storage.Partition) []string {
	t.Helper()
	var got []string
	if err := p.ReplayState(func(e []byte) error {
		got = append(got, string(e))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// A follower that installs the owner's checkpoint and applies the events
// after it ends with the owner's settled set and engine entries, durably.
func TestEventFeedCarriesStateToAFollower(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger()}
	owner := mustOpen(t, "/owner", o)
	defer owner.Close()
	appendK(t, owner, 100)
	if err := owner.Settle(7, 8); err != nil { // before the checkpoint
		t.Fatal(err)
	}
	seq, settled := owner.EventCheckpoint(0)
	for _, step := range []func() error{
		func() error { return owner.Settle(1, 2, 3) },
		func() error { return owner.AppendState([]byte("retry 5")) },
		func() error { return owner.Settle(50) },
		func() error { return owner.Settle(2) }, // already settled: no event
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	evs, next, err := owner.Events(seq, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || next != seq+3 || evs[0].Seq != seq {
		t.Fatalf("events %v next %d from %d, want 3 of them", evs, next, seq)
	}
	if more, n2, err := owner.Events(next, 1<<20); err != nil || len(more) != 0 || n2 != next {
		t.Fatalf("caught up: %v %d %v", more, n2, err)
	}

	follower := mustOpen(t, "/follower", o)
	copyTo(t, owner, follower, 0)
	if err := follower.InstallState(settled, []byte("snapshot")); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := follower.ApplyEvent(e.Payload); err != nil {
			t.Fatalf("event %d: %v", e.Seq, err)
		}
	}
	if err := follower.Sync(); err != nil {
		t.Fatal(err)
	}
	after := fsys.CrashSyncing(func(string) bool { return false })
	follower.Close()
	o.FS = after
	follower = mustOpen(t, "/follower", o)
	defer follower.Close()
	for off := range uint64(100) {
		if want := owner.IsSettled(off); follower.IsSettled(off) != want {
			t.Fatalf("offset %d: settled %t on the follower, %t on the owner", off, !want, want)
		}
	}
	if got, want := replayed(t, follower), []string{"snapshot", "retry 5"}; !slices.Equal(got, want) {
		t.Fatalf("follower's engine state %q, want %q", got, want)
	}
}

// The feed keeps a byte budget of recent events; older ones are trimmed,
// and asking for them (or for any while the feed is off) says so.
func TestEventFeedTrimsAndStops(t *testing.T) {
	o := storage.Options{FS: faultfs.New(), Logger: quietLogger()}
	p := mustOpen(t, "/p", o)
	defer p.Close()
	appendK(t, p, 200)
	if _, _, err := p.Events(0, 1<<20); !errors.Is(err, storage.ErrEventsTrimmed) {
		t.Fatalf("events with the feed off: %v", err)
	}
	seq, _ := p.EventCheckpoint(64)
	for off := range uint64(100) {
		if err := p.Settle(off); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := p.Events(seq, 1<<20); !errors.Is(err, storage.ErrEventsTrimmed) {
		t.Fatalf("events trimmed from the feed: %v", err)
	}
	last := seq + 99
	evs, next, err := p.Events(last, 1<<20)
	if err != nil || len(evs) != 1 || next != last+1 {
		t.Fatalf("the newest event: %v %d %v", evs, next, err)
	}
	if _, _, err := p.Events(next+1, 1<<20); !errors.Is(err, storage.ErrEventsTrimmed) {
		t.Fatalf("events from the future: %v", err)
	}
	p.StopEventFeed()
	if _, _, err := p.Events(next, 1<<20); !errors.Is(err, storage.ErrEventsTrimmed) {
		t.Fatalf("events after the feed stopped: %v", err)
	}
	if seq2, _ := p.EventCheckpoint(0); seq2 != next {
		t.Fatalf("sequence restarted at %d after a stop, want %d", seq2, next)
	}
}

// Bad events change nothing: a settlement of records the follower does not
// hold yet, a malformed or oversized payload, an unknown kind; a
// checkpoint settling past the log is refused.
func TestApplyEventRefusesWhatItCannotApply(t *testing.T) {
	o := storage.Options{FS: faultfs.New(), Logger: quietLogger()}
	p := mustOpen(t, "/p", o)
	defer p.Close()
	appendK(t, p, 10)
	settle := func(a, n uint64) []byte {
		b := []byte{2} // kind: settle
		b = binary.AppendUvarint(b, 1)
		b = binary.AppendUvarint(b, a)
		return binary.AppendUvarint(b, n)
	}
	if err := p.ApplyEvent(settle(12, 1)); !errors.Is(err, storage.ErrOutOfRange) {
		t.Fatalf("settling a record not held yet: %v, want ErrOutOfRange", err)
	}
	for name, ev := range map[string][]byte{
		"empty":     nil,
		"truncated": settle(1, 1)[:3],
		"huge":      settle(0, 1<<40),
		"unknown":   {9, 1, 2},
	} {
		if err := p.ApplyEvent(ev); err == nil {
			t.Errorf("%s event accepted", name)
		}
	}
	for off := range uint64(10) {
		if p.IsSettled(off) {
			t.Fatalf("offset %d settled by a refused event", off)
		}
	}
	if err := p.ApplyEvent(settle(3, 2)); err != nil || !p.IsSettled(3) || !p.IsSettled(4) || p.IsSettled(5) {
		t.Fatalf("a good settle event: %v", err)
	}
	var ranges []byte
	ranges = binary.AppendUvarint(ranges, 1)
	ranges = binary.AppendUvarint(ranges, 0)
	ranges = binary.AppendUvarint(ranges, 11)
	if err := p.InstallState(ranges, nil); !errors.Is(err, storage.ErrOutOfRange) {
		t.Fatalf("a checkpoint settling past the log: %v, want ErrOutOfRange", err)
	}
}
