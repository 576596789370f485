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
