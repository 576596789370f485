package faultfs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
)

func write(t *testing.T, f *FS, name string, data []byte, sync bool) {
	t.Helper()
	h, err := f.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := h.Size()
	if _, err := h.WriteAt(data, n); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
}

func content(t *testing.T, f *FS, name string) ([]byte, bool) {
	t.Helper()
	h, err := f.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, false
	}
	defer h.Close()
	n, _ := h.Size()
	b := make([]byte, n)
	h.ReadAt(b, 0)
	return b, true
}

func TestNameNeedsDirSync(t *testing.T) {
	f := New()
	f.MkdirAll("/d", 0o755)
	write(t, f, "/d/a", []byte("synced file, unsynced name"), true)
	after := f.Crash(rand.New(rand.NewPCG(1, 1)))
	if _, ok := content(t, after, "/d/a"); ok {
		t.Fatal("a file whose directory was never synced survived the crash")
	}
	f = New()
	f.MkdirAll("/d", 0o755)
	write(t, f, "/d/a", []byte("x"), true)
	f.SyncDir("/d")
	f.Remove("/d/a")
	after = f.Crash(rand.New(rand.NewPCG(1, 1)))
	if _, ok := content(t, after, "/d/a"); !ok {
		t.Fatal("an unsynced removal was durable")
	}
}

func TestCrashKeepsDurablePlusPrefix(t *testing.T) {
	durable := []byte("durable-part|")
	tail := []byte("unsynced tail bytes")
	sawShort, sawFull := false, false
	for seed := uint64(0); seed < 200; seed++ {
		f := New()
		f.MkdirAll("/d", 0o755)
		write(t, f, "/d/a", durable, true)
		f.SyncDir("/d")
		write(t, f, "/d/a", tail, false)
		got, ok := content(t, f.Crash(rand.New(rand.NewPCG(seed, 2))), "/d/a")
		if !ok || !bytes.HasPrefix(got, durable) || len(got) > len(durable)+len(tail) {
			t.Fatalf("seed %d: %q", seed, got)
		}
		k := len(durable)
		for k < len(got) && got[k] == tail[k-len(durable)] {
			k++
		}
		sawShort = sawShort || k < len(durable)+len(tail)
		sawFull = sawFull || k == len(durable)+len(tail)
	}
	if !sawShort || !sawFull {
		t.Fatalf("crash never tore (%v) or never kept everything (%v)", sawShort, sawFull)
	}
}

func TestInjectedFaultsAndDeadFS(t *testing.T) {
	f := New()
	f.MkdirAll("/d", 0o755)
	h, _ := f.OpenFile("/d/a", os.O_RDWR|os.O_CREATE, 0o644)
	f.FailSyncAt(2, false)
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("second sync: %v", err)
	}
	if err := h.Sync(); err != nil {
		t.Fatalf("non-sticky fault repeated: %v", err)
	}
	f.FailWriteAt(1)
	if _, err := h.WriteAt([]byte("x"), 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("write: %v", err)
	}
	f.Crash(rand.New(rand.NewPCG(1, 1)))
	if _, err := h.WriteAt([]byte("x"), 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("write after crash: %v", err)
	}
}

func TestUnsynced(t *testing.T) {
	f := New()
	f.MkdirAll("/d", 0o755)
	if u := f.Unsynced(); len(u) != 0 {
		t.Fatalf("empty fs: %v", u)
	}
	write(t, f, "/d/a", []byte("0123456789"), true)
	write(t, f, "/d/b", []byte("0123"), false)
	if u := f.Unsynced(); len(u) != 1 || u["/d/b"] != 4 {
		t.Fatalf("after writes: %v", u)
	}
	write(t, f, "/d/a", []byte("xyz"), false)
	if u := f.Unsynced(); len(u) != 2 || u["/d/a"] != 3 {
		t.Fatalf("after appending to a synced file: %v", u)
	}
	h, _ := f.OpenFile("/d/a", os.O_RDWR, 0)
	h.Sync()
	h.Truncate(4) // an unsynced truncation: 9 durable bytes could come back
	if u := f.Unsynced(); u["/d/a"] != 9 {
		t.Fatalf("after truncation: %v", u)
	}
	h.Sync()
	h.Close()
	h, _ = f.OpenFile("/d/b", os.O_RDWR, 0)
	h.Sync()
	h.Close()
	if u := f.Unsynced(); len(u) != 0 {
		t.Fatalf("after syncing everything: %v", u)
	}
}

// A hole: whole pages inside the unsynced tail read as zeros while the
// bytes after them survive; synced bytes are never touched.
func TestCrashHole(t *testing.T) {
	durable := bytes.Repeat([]byte{1}, 5000)
	tail := bytes.Repeat([]byte{2}, 3*pageSize)
	f := New()
	f.MkdirAll("/d", 0o755)
	write(t, f, "/d/a", durable, true)
	f.SyncDir("/d")
	write(t, f, "/d/a", tail, false)
	got, ok := content(t, f.CrashHole(rand.New(rand.NewPCG(1, 2))), "/d/a")
	if !ok || len(got) != len(durable)+len(tail) || !bytes.Equal(got[:len(durable)], durable) {
		t.Fatalf("durable part or size changed: ok=%v len %d", ok, len(got))
	}
	// The first whole page of the tail starts at 8192.
	if !bytes.Equal(got[8192:8192+pageSize], make([]byte, pageSize)) {
		t.Fatal("no hole at the first whole unsynced page")
	}
	if got[5000] != 2 || got[len(got)-1] != 2 {
		t.Fatal("bytes around the hole were not kept")
	}
	// Crash makes holes too, somewhere in the unsynced region.
	holes := 0
	for seed := range uint64(200) {
		f := New()
		f.MkdirAll("/d", 0o755)
		write(t, f, "/d/a", durable, true)
		f.SyncDir("/d")
		write(t, f, "/d/a", tail, false)
		got, _ := content(t, f.Crash(rand.New(rand.NewPCG(seed, 3))), "/d/a")
		if !bytes.Equal(got[:len(durable)], durable) {
			t.Fatalf("seed %d: durable bytes changed", seed)
		}
		if len(got) == len(durable)+len(tail) && got[len(got)-1] == 2 && bytes.Contains(got, make([]byte, pageSize)) {
			holes++
		}
	}
	if holes == 0 {
		t.Fatal("Crash never made a hole")
	}
}

// Overwriting synced bytes (a header field) leaves the tail alone: a crash
// keeps each overwritten sector old or new and every synced byte after it.
func TestOverwriteOfSyncedBytes(t *testing.T) {
	old := bytes.Repeat([]byte{1}, 2000)
	sawOld, sawNew := false, false
	for seed := range uint64(100) {
		f := New()
		f.MkdirAll("/d", 0o755)
		write(t, f, "/d/a", old, true)
		f.SyncDir("/d")
		h, _ := f.OpenFile("/d/a", os.O_RDWR, 0)
		h.WriteAt([]byte{9, 9, 9, 9}, 12)
		if u := f.Unsynced(); u["/d/a"] != 4 {
			t.Fatalf("unsynced %v, want the 4 overwritten bytes", u)
		}
		got, _ := content(t, f.Crash(rand.New(rand.NewPCG(seed, 4))), "/d/a")
		if len(got) != len(old) || !bytes.Equal(got[16:], old[16:]) || !bytes.Equal(got[:12], old[:12]) {
			t.Fatalf("seed %d: synced bytes outside the overwrite changed", seed)
		}
		switch {
		case bytes.Equal(got[12:16], old[12:16]):
			sawOld = true
		case bytes.Equal(got[12:16], []byte{9, 9, 9, 9}):
			sawNew = true
		default:
			t.Fatalf("seed %d: a sector was torn: %v", seed, got[12:16])
		}
	}
	if !sawOld || !sawNew {
		t.Fatalf("old %v new %v: want both outcomes", sawOld, sawNew)
	}
}
