package storage_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
)

// Fixed-size records make file positions computable: a segment holds a
// 32-byte header, then records of 24 bytes of header + payload.
const (
	segHdr  = 32
	recSize = 24 + 100
)

func segPath(dir string, base uint64) string {
	return filepath.Join(dir, strings.Repeat("0", 20-len(itoa(base)))+itoa(base)+".log")
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// fill writes n fixed-size records (segments of 3 records each) and
// closes. With the default index granularity (4 KiB) a segment's index has
// only its implicit first point, so open scans all of it.
func fill(t *testing.T, dir string, n int) storage.Options {
	return fillIdx(t, dir, n, 0)
}

func fillIdx(t *testing.T, dir string, n, every int) storage.Options {
	t.Helper()
	o := storage.Options{SegmentMaxBytes: segHdr + 3*recSize, IndexEveryBytes: every}
	p := mustOpen(t, dir, o)
	for i := 0; i < n; i++ {
		if _, err := p.Append(payload(i, 100), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return o
}

func flipByte(t *testing.T, path string, pos int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos] ^= 0x5a
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// logBuffer captures slog output for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestCorruptMiddleOfNewestSegmentIsQuarantined(t *testing.T) {
	dir := t.TempDir()
	o := fill(t, dir, 8) // segments 0,3,6; newest holds 6,7
	// Damage record 6's payload; record 7 after it is intact.
	flipByte(t, segPath(dir, 6), segHdr+24+10)
	o.Logger = quietLogger()
	_, err := storage.OpenPartition(dir, o)
	var ce *storage.CorruptionError
	if !errors.Is(err, storage.ErrQuarantined) || !errors.As(err, &ce) {
		t.Fatalf("open: %v, want a CorruptionError", err)
	}
	if ce.Pos != segHdr || ce.ExpectedOffset != 6 || !strings.Contains(ce.File, "00000000000000000006.log") ||
		!strings.Contains(err.Error(), "intact records follow") {
		t.Fatalf("unclear corruption report: %+v (%v)", ce, err)
	}
}

func TestCorruptOlderSegmentIsQuarantined(t *testing.T) {
	dir := t.TempDir()
	o := fill(t, dir, 8)
	// The last record of segment 0 (after its last index point) is damaged.
	flipByte(t, segPath(dir, 0), segHdr+2*recSize+30)
	o.Logger = quietLogger()
	_, err := storage.OpenPartition(dir, o)
	if !errors.Is(err, storage.ErrQuarantined) || !strings.Contains(err.Error(), "older segment") {
		t.Fatalf("open: %v, want quarantine for an older segment", err)
	}
}

func TestCorruptionBehindIndexIsCaughtOnRead(t *testing.T) {
	dir := t.TempDir()
	o := fillIdx(t, dir, 8, recSize) // an index point at every record
	// Record 0 lies before segment 0's last index point: open does not scan
	// it, but a read must never return the damaged bytes.
	flipByte(t, segPath(dir, 0), segHdr+50)
	p := mustOpen(t, dir, o)
	defer p.Close()
	if _, err := p.Read(0); !errors.Is(err, storage.ErrQuarantined) {
		t.Fatalf("read of a damaged record: %v", err)
	}
	if _, err := p.Append([]byte("x"), 0); !errors.Is(err, storage.ErrQuarantined) {
		t.Fatalf("append after quarantine: %v", err)
	}
}

func TestMissingSegmentIsQuarantined(t *testing.T) {
	dir := t.TempDir()
	o := fill(t, dir, 8)
	if err := os.Remove(segPath(dir, 3)); err != nil {
		t.Fatal(err)
	}
	o.Logger = quietLogger()
	if _, err := storage.OpenPartition(dir, o); !errors.Is(err, storage.ErrQuarantined) || !strings.Contains(err.Error(), "not dense") {
		t.Fatalf("open with a gap: %v", err)
	}
}

func TestTornTailIsTruncatedAndLogged(t *testing.T) {
	dir := t.TempDir()
	o := fill(t, dir, 8)
	path := segPath(dir, 6)
	if err := os.Truncate(path, segHdr+recSize+40); err != nil { // record 7 cut in half
		t.Fatal(err)
	}
	var logs logBuffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	p, err := storage.OpenPartition(dir, o)
	if err != nil {
		t.Fatalf("open with torn tail: %v", err)
	}
	defer p.Close()
	if _, next := p.Bounds(); next != 7 {
		t.Fatalf("next %d, want 7", next)
	}
	out := logs.String()
	if !strings.Contains(out, "torn log tail") || !strings.Contains(out, "00000000000000000006.log") ||
		!strings.Contains(out, "pos=156") || !strings.Contains(out, "bytes_dropped=40") {
		t.Fatalf("missing or vague torn-tail log line: %s", out)
	}
	if off, err := p.Append(payload(7, 100), 7); err != nil || off != 7 {
		t.Fatalf("append after truncation: %d %v", off, err)
	}
	if r, err := p.Read(6); err != nil || !bytes.Equal(r.Data, payload(6, 100)) {
		t.Fatalf("record before the tear: %v", err)
	}
}

func TestGarbageTailIsTruncated(t *testing.T) {
	dir := t.TempDir()
	o := fill(t, dir, 7)
	f, err := os.OpenFile(segPath(dir, 6), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte{0xab, 0, 0x13}, 200)) // a torn write filled with junk
	f.Close()
	o.Logger = quietLogger()
	p, err := storage.OpenPartition(dir, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer p.Close()
	if _, next := p.Bounds(); next != 7 {
		t.Fatalf("next %d, want 7", next)
	}
}

func TestIndexMissingOrGarbageIsRebuilt(t *testing.T) {
	for _, mode := range []string{"missing", "garbage", "stale"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			o := fillIdx(t, dir, 20, recSize)
			idx := strings.TrimSuffix(segPath(dir, 3), ".log") + ".idx"
			good, err := os.ReadFile(idx)
			if err != nil {
				t.Fatal(err)
			}
			switch mode {
			case "missing":
				os.Remove(idx)
			case "garbage":
				os.WriteFile(idx, bytes.Repeat([]byte{7}, 100), 0o644)
			case "stale": // a valid index of another segment
				other, _ := os.ReadFile(strings.TrimSuffix(segPath(dir, 6), ".log") + ".idx")
				os.WriteFile(idx, other, 0o644)
			}
			p := mustOpen(t, dir, o)
			for i := 0; i < 20; i++ {
				r, err := p.Read(uint64(i))
				if err != nil || !bytes.Equal(r.Data, payload(i, 100)) {
					t.Fatalf("read %d: %v", i, err)
				}
			}
			p.Close()
			if again, _ := os.ReadFile(idx); !bytes.Equal(again, good) {
				t.Fatalf("index not rebuilt to its proper content")
			}
		})
	}
}

func TestCorruptJournal(t *testing.T) {
	setup := func(t *testing.T) (string, storage.Options, string) {
		dir := t.TempDir()
		o := storage.Options{Logger: quietLogger()}
		p := mustOpen(t, dir, o)
		for i := 0; i < 10; i++ {
			p.Append([]byte{byte(i)}, 0)
		}
		for i := 0; i < 10; i++ {
			if err := p.Settle(uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		p.Close()
		m, _ := filepath.Glob(filepath.Join(dir, "state.*.jnl"))
		if len(m) != 1 {
			t.Fatalf("journal files %v", m)
		}
		return dir, o, m[0]
	}
	t.Run("middle", func(t *testing.T) {
		dir, o, j := setup(t)
		st, _ := os.Stat(j)
		flipByte(t, j, st.Size()-5*13+3) // inside an early settle entry, intact ones follow
		if _, err := storage.OpenPartition(dir, o); !errors.Is(err, storage.ErrQuarantined) {
			t.Fatalf("open: %v", err)
		}
	})
	t.Run("torn tail", func(t *testing.T) {
		dir, o, j := setup(t)
		st, _ := os.Stat(j)
		os.Truncate(j, st.Size()-3)
		p, err := storage.OpenPartition(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if f := p.SettledFrontier(); f != 9 {
			t.Fatalf("frontier %d, want 9 (last settle torn away)", f)
		}
	})
}

// TestSettlementOfLostRecordDoesNotStick: a settlement for an offset whose
// record is lost (torn tail) must not settle the new record that later gets
// the same offset, neither now nor after another reopen.
func TestSettlementOfLostRecordDoesNotStick(t *testing.T) {
	dir := t.TempDir()
	o := fill(t, dir, 8)
	p := mustOpen(t, dir, o)
	if err := p.Settle(6, 7); err != nil {
		t.Fatal(err)
	}
	p.Close()
	os.Truncate(segPath(dir, 6), segHdr+10) // records 6 and 7 lost
	p = mustOpen(t, dir, o)
	if _, next := p.Bounds(); next != 6 || p.IsSettled(6) {
		t.Fatalf("next %d settled(6)=%v", next, p.IsSettled(6))
	}
	if off, _ := p.Append([]byte("new six"), 0); off != 6 || p.IsSettled(6) {
		t.Fatalf("new record %d born settled", off)
	}
	p.Close()
	p = mustOpen(t, dir, o)
	defer p.Close()
	if p.IsSettled(6) {
		t.Fatal("stale settlement came back after reopen")
	}
}
