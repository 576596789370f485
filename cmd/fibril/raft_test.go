package main

import (
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
