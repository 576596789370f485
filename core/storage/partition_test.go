package storage_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

func TestParseFsyncPolicy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want storage.FsyncPolicy
	}{{"always", storage.FsyncAlways}, {"interval", storage.FsyncInterval}, {"none", storage.FsyncNone}} {
		got, err := storage.ParseFsyncPolicy(c.in)
		if err != nil || got != c.want || got.String() != c.in {
			t.Fatalf("%q: got %v %v", c.in, got, err)
		}
	}
	if _, err := storage.ParseFsyncPolicy("sometimes"); err == nil {
		t.Fatal("accepted an unknown policy")
	}
}

func TestAppendReadScanReopen(t *testing.T) {
	for _, pol := range []storage.FsyncPolicy{storage.FsyncAlways, storage.FsyncInterval, storage.FsyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := storage.Options{Fsync: pol, SegmentMaxBytes: 4096, IndexEveryBytes: 256}
			p := mustOpen(t, dir, opts)
			const n = 300
			for i := 0; i < n; i++ {
				var off uint64
				var err error
				if i%3 == 0 {
					off, err = p.AppendAsync(payload(i, i%200), int64(i), nil)
				} else {
					off, err = p.Append(payload(i, i%200), int64(i))
				}
				if err != nil || off != uint64(i) {
					t.Fatalf("append %d: off %d err %v", i, off, err)
				}
			}
			check := func(p *storage.Partition) {
				t.Helper()
				if first, next := p.Bounds(); first != 0 || next != n {
					t.Fatalf("bounds %d %d", first, next)
				}
				for i := 0; i < n; i++ {
					r, err := p.Read(uint64(i))
					if err != nil || r.Offset != uint64(i) || r.Timestamp != int64(i) || !bytes.Equal(r.Data, payload(i, i%200)) {
						t.Fatalf("read %d: %+v %v", i, r.Offset, err)
					}
				}
				want := uint64(17)
				if err := p.Scan(17, func(r storage.Record) bool {
					if r.Offset != want || !bytes.Equal(r.Data, payload(int(want), int(want)%200)) {
						t.Fatalf("scan got %d want %d", r.Offset, want)
					}
					want++
					return true
				}); err != nil || want != n {
					t.Fatalf("scan ended at %d: %v", want, err)
				}
				if _, err := p.Read(n); !errors.Is(err, storage.ErrOutOfRange) {
					t.Fatalf("read past end: %v", err)
				}
			}
			check(p)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			p = mustOpen(t, dir, opts)
			check(p)
			off, err := p.Append([]byte("after"), 1)
			if err != nil || off != n {
				t.Fatalf("append after reopen: %d %v", off, err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Append(nil, 0); !errors.Is(err, storage.ErrClosed) {
				t.Fatalf("append after close: %v", err)
			}
		})
	}
}

func TestAppendAsyncOrderAndReadBeforeDurable(t *testing.T) {
	p := mustOpen(t, t.TempDir(), storage.Options{SegmentMaxBytes: 2048})
	defer p.Close()
	var mu sync.Mutex
	var got []uint64
	var wg sync.WaitGroup
	const n = 2000
	wg.Add(n)
	for i := 0; i < n; i++ {
		off, err := p.AppendAsync(payload(i, 50), 0, func(off uint64, err error) {
			if err != nil {
				t.Errorf("done %d: %v", off, err)
			}
			mu.Lock()
			got = append(got, off)
			mu.Unlock()
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
		// Readable at once, durable or not (S-143).
		if r, err := p.Read(off); err != nil || !bytes.Equal(r.Data, payload(i, 50)) {
			t.Fatalf("read just appended %d: %v", off, err)
		}
	}
	wg.Wait()
	for i, o := range got {
		if o != uint64(i) {
			t.Fatalf("callback %d carried offset %d: not in offset order", i, o)
		}
	}
}

func TestConcurrentAppenders(t *testing.T) {
	dir := t.TempDir()
	p := mustOpen(t, dir, storage.Options{SegmentMaxBytes: 8192})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uint64]string{}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				d := fmt.Sprintf("g%d-%d", g, i)
				off, err := p.Append([]byte(d), 0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if _, dup := seen[off]; dup {
					t.Errorf("offset %d handed out twice", off)
				}
				seen[off] = d
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	p.Close()
	p = mustOpen(t, dir, storage.Options{SegmentMaxBytes: 8192})
	defer p.Close()
	for off, d := range seen {
		r, err := p.Read(off)
		if err != nil || string(r.Data) != d {
			t.Fatalf("offset %d: %q %v, want %q", off, r.Data, err, d)
		}
	}
}

func TestSettleAndState(t *testing.T) {
	dir := t.TempDir()
	p := mustOpen(t, dir, storage.Options{})
	for i := 0; i < 10; i++ {
		if _, err := p.Append([]byte{byte(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Settle(0, 1, 3, 2, 7); err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(10); !errors.Is(err, storage.ErrOutOfRange) {
		t.Fatalf("settle of an unassigned offset: %v", err)
	}
	if f := p.SettledFrontier(); f != 4 {
		t.Fatalf("frontier %d, want 4", f)
	}
	if !p.IsSettled(7) || p.IsSettled(5) {
		t.Fatal("IsSettled wrong")
	}
	for _, e := range []string{"a", "b"} {
		if err := p.AppendState([]byte(e)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.CompactState([]byte("SNAP")); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendState([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(4, 5, 6); err != nil {
		t.Fatal(err)
	}
	p.Close()

	p = mustOpen(t, dir, storage.Options{})
	defer p.Close()
	if f := p.SettledFrontier(); f != 8 {
		t.Fatalf("frontier after reopen %d, want 8", f)
	}
	if p.IsSettled(8) || !p.IsSettled(7) {
		t.Fatal("IsSettled after reopen wrong")
	}
	var got []string
	if err := p.ReplayState(func(e []byte) error { got = append(got, string(e)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[SNAP c]" {
		t.Fatalf("replay %v, want [SNAP c]", got)
	}
}

// Size counts every retained record's framed bytes, written to a segment
// file or not (pending, or staged behind the WAL), across rolls and a
// reopen.
func TestSizeCountsEveryRecord(t *testing.T) {
	const recHeader = 24 // the record framing (record.go)
	check := func(t *testing.T, p *storage.Partition, want int64, when string) {
		t.Helper()
		if got := p.Size(); got != want {
			t.Fatalf("%s: Size() = %d, want %d", when, got, want)
		}
	}
	fill := func(t *testing.T, p *storage.Partition) int64 {
		var want int64
		for i := range 200 {
			data := payload(i, i%300)
			var err error
			if i%2 == 0 {
				_, err = p.AppendAsync(data, int64(i), nil)
			} else {
				_, err = p.Append(data, int64(i))
			}
			if err != nil {
				t.Fatal(err)
			}
			want += int64(recHeader + len(data))
			check(t, p, want, fmt.Sprint("after append ", i))
		}
		return want
	}
	t.Run("segments", func(t *testing.T) {
		dir := t.TempDir()
		opts := storage.Options{Fsync: storage.FsyncAlways, SegmentMaxBytes: 4096, IndexEveryBytes: 256}
		p := mustOpen(t, dir, opts)
		want := fill(t, p)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		p = mustOpen(t, dir, opts)
		defer p.Close()
		check(t, p, want, "after reopen")
	})
	t.Run("wal", func(t *testing.T) {
		c := openWALCluster(t, faultfs.New(), 1, storage.WALOptions{})
		want := fill(t, c.parts[0])
		if err := c.parts[0].Sync(); err != nil {
			t.Fatal(err)
		}
		check(t, c.parts[0], want, "after sync")
		c.close()
	})
}
