package storage_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
)

// The active segment's file is kept longer than its data (space reserved
// ahead, so that an fsync does not have to record a new file size), and
// the reserve never becomes part of the log: sealed segments and a
// cleanly closed log end at their data, and a log copied while open (what
// a kill -9 leaves) opens with every record and no warning.

func logSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = fi.Size()
		}
	}
	return out
}

func TestReservedSpace(t *testing.T) {
	dir := t.TempDir()
	o := storage.Options{Fsync: storage.FsyncAlways, SegmentMaxBytes: 1 << 20}
	p := mustOpen(t, dir, o)
	const n = 2500 // ≈ 2.6 MB of records: a few segments
	for i := range n {
		if _, err := p.Append(payload(i, 1000), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	open := logSizes(t, dir)
	if len(open) < 3 {
		t.Fatalf("segments %v: want at least 3", open)
	}

	// What a kill -9 leaves: the files as they are now, reserve included.
	crashed := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closed := logSizes(t, dir)
	var newest string
	for name := range closed {
		newest = max(newest, name)
	}
	if open[newest] <= closed[newest] {
		t.Fatalf("active segment %s: %d bytes open, %d closed: no space was reserved ahead", newest, open[newest], closed[newest])
	}
	for name, size := range closed {
		if name != newest && open[name] != size {
			t.Fatalf("sealed segment %s changed size at Close: %d → %d (it kept reserved space)", name, open[name], size)
		}
	}

	// Both copies open with every record; the crashed one without a
	// warning, its reserve dropped.
	for _, d := range []string{dir, crashed} {
		var logBuf bytes.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		q, err := storage.OpenPartition(d, o)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		for i := range n {
			r, err := q.Read(uint64(i))
			if err != nil || !bytes.Equal(r.Data, payload(i, 1000)) {
				t.Fatalf("%s: record %d: %v", d, i, err)
			}
		}
		if off, err := q.Append(payload(n, 1000), 0); err != nil || off != n {
			t.Fatalf("%s: append after reopen: offset %d, %v", d, off, err)
		}
		q.Close()
		if logBuf.Len() > 0 {
			t.Fatalf("%s: warnings on reopen:\n%s", d, logBuf.String())
		}
	}
	if sizes := logSizes(t, crashed); sizes[newest] >= open[newest] {
		t.Fatalf("crashed copy: newest segment still %d bytes", sizes[newest])
	}
}
