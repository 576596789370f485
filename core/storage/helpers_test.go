package storage_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// payload returns deterministic, offset-independent test data of size n.
func payload(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*31 + k*7)
	}
	return b
}

func mustOpen(t testing.TB, dir string, o storage.Options) *storage.Partition {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	p, err := storage.OpenPartition(dir, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return p
}

// idle reports whether p has neither a committer nor an armed fsync timer
// (an armed MaxAge timer is allowed when allowAge).
func idle(p *storage.Partition, allowAge bool) bool {
	c, f, a := storage.Scheduled(p)
	return !c && !f && (allowAge || !a)
}

// dirtyData lists the log and journal files holding bytes not yet fsynced
// (index files are never fsynced by design and are left out).
func dirtyData(fsys *faultfs.FS) []string {
	var out []string
	for name, n := range fsys.Unsynced() {
		if strings.HasSuffix(name, ".log") || strings.HasSuffix(name, ".jnl") {
			out = append(out, fmt.Sprintf("%s:%d", name, n))
		}
	}
	return out
}

func appendN(t *testing.T, p *storage.Partition, from, n int, ts func(int) int64) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := p.Append(payload(i, 100), ts(i)); err != nil {
			t.Fatal(err)
		}
	}
}
