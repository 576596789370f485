package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fibril raft recover finds the raft directory from the configuration and
// says what is wrong before it touches anything.
func TestRaftRecoverCommand(t *testing.T) {
	dir := t.TempDir()
	raftFlags := []string{"--server.data_dir=" + dir, "--coordination.backend=raft"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"raft"}, exitUsage, "usage"},
		{append([]string{"raft", "recover"}, raftFlags...), exitUsage, "--members is required"},
		{[]string{"raft", "recover", "--members=n1=127.0.0.1:7946", "--server.data_dir=" + dir}, exitUsage, "for the built-in raft"},
		{append([]string{"raft", "recover", "--members", "n1"}, raftFlags...), exitUsage, "id=host:port"},
		{append([]string{"raft", "recover", "--members", "n1=127.0.0.1:7946"}, raftFlags...), exitError, "no raft state"},
	} {
		code, _, stderr := runCLI(t, c.args)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// fibril restore needs --from and an archive; it never writes into a
// directory that holds something.
func TestRestoreCommand(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runCLI(t, []string{"restore", "--server.data_dir=" + dir}); code != exitUsage || !strings.Contains(stderr, "--from is required") {
		t.Fatalf("restore without --from: %d %q", code, stderr)
	}
	bogus := filepath.Join(dir, "bogus.tar")
	if err := os.WriteFile(bogus, []byte("not a tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, []string{"restore", "--from", bogus, "--server.data_dir=" + dir}); code != exitError || !strings.Contains(stderr, "not empty") {
		t.Fatalf("restore into a directory that is not empty: %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, []string{"restore", "--from", bogus, "--server.data_dir=" + filepath.Join(dir, "new")}); code != exitError || !strings.Contains(stderr, "not a backup archive") {
		t.Fatalf("restore of something else: %d %q", code, stderr)
	}
}
