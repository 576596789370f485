package storage_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// TestStats: the process-wide counters count records written, bytes
// written to segment and journal files, and fsyncs of those files.
func TestStats(t *testing.T) {
	for _, pol := range []storage.FsyncPolicy{storage.FsyncAlways, storage.FsyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			fsys := faultfs.New()
			s0 := storage.Stats()
			p := mustOpen(t, "/d", storage.Options{FS: fsys, Fsync: pol})
			const n = 10
			for i := range n {
				if _, err := p.Append(payload(i, 100), 0); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			if _, err := p.AppendAsync(payload(n, 100), 0, func(_ uint64, err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := p.Settle(0, 1, 2); err != nil {
				t.Fatal(err)
			}
			if err := p.AppendState([]byte("lease")); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			s1 := storage.Stats()
			names, err := fsys.ReadDir("/d")
			if err != nil {
				t.Fatal(err)
			}
			var size int64
			for _, name := range names {
				if ext := filepath.Ext(name); ext != ".log" && ext != ".jnl" {
					continue
				}
				f, err := fsys.OpenFile("/d/"+name, os.O_RDONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				sz, _ := f.Size()
				size += sz
				f.Close()
			}
			syncs := fsys.FileSyncs(".log") + fsys.FileSyncs(".jnl")
			t.Logf("delta: %+v; files hold %d bytes, %d file syncs", storage.Counters{
				Fsyncs: s1.Fsyncs - s0.Fsyncs, BytesWritten: s1.BytesWritten - s0.BytesWritten, Appends: s1.Appends - s0.Appends}, size, syncs)
			if d := s1.Appends - s0.Appends; d != n+1 {
				t.Errorf("Appends grew by %d, want %d", d, n+1)
			}
			if d := s1.BytesWritten - s0.BytesWritten; d != uint64(size) {
				t.Errorf("BytesWritten grew by %d, the segment and journal files hold %d", d, size)
			}
			if d := s1.Fsyncs - s0.Fsyncs; d != uint64(syncs) {
				t.Errorf("Fsyncs grew by %d, the filesystem saw %d segment and journal syncs", d, syncs)
			}
			if pol == storage.FsyncAlways && syncs < n+1 {
				t.Errorf("only %d syncs for %d appends under always", syncs, n+1)
			}
		})
	}
}
