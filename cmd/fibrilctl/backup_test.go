package main

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// backup saves the broker's archive (backup.json first) and refuses to
// overwrite a file.
func TestBackupCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b.tar")
	r := ctl(t, "", "backup", "--out", out)
	mustOK(t, r, "backup")
	if !strings.Contains(r.stdout, "fibril restore --from "+out) {
		t.Fatalf("backup printed %q", r.stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if h, err := tar.NewReader(f).Next(); err != nil || h.Name != "backup.json" {
		t.Fatalf("the archive starts with %v %v", h, err)
	}
	if r := ctl(t, "", "backup", "--out", out); r.code != exitFail || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("backup over an existing file: %+v", r)
	}
	if r := ctl(t, "", "backup"); r.code != exitUsage {
		t.Fatalf("backup without --out: %+v", r)
	}
}
