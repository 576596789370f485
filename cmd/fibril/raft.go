package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/fibrilgo/fibril/coordination/raft"
	"github.com/fibrilgo/fibril/core/config"
)

// runRaft is `fibril raft recover --members ID=HOST:PORT,... [config
// flags]`: with the broker stopped, rewrite its raft configuration so the
// listed members are the group's only voters — the way back for a group
// that lost its quorum for good (coordination/raft/README.md#lost-quorum).
// The data directory comes from the broker's configuration, as when it
// runs.
func runRaft(args, environ []string, stdout, stderr io.Writer) int {
	const usageText = "usage: fibril raft recover --members ID=HOST:PORT,... [config flags]"
	if len(args) == 0 || args[0] != "recover" {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stdout, usageText+"\n\nWith this broker stopped, makes the listed raft members the only voters of its group: run it on\neach of them, with the same list, then start them. Writes made after the newest state they hold are\nlost. For a quorum that will not come back; otherwise bring members back or use fibrilctl raft.")
			return exitOK
		}
		fmt.Fprintln(stderr, "fibril raft:", usageText)
		return exitUsage
	}
	list, rest := cutFlag(args[1:], "members")
	if list == "" {
		fmt.Fprintln(stderr, "fibril raft recover: --members is required:", usageText)
		return exitUsage
	}
	var members []raft.Peer
	for _, s := range strings.Split(list, ",") {
		p, err := config.ParseRaftPeer(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(stderr, "fibril raft recover: --members:", err)
			return exitUsage
		}
		members = append(members, raft.Peer{ID: p.ID, Addr: p.Addr})
	}
	cfg, _, err := config.Load(rest, environ)
	if err != nil {
		fmt.Fprintln(stderr, "fibril raft recover:", err)
		return exitUsage
	}
	if cfg.Coordination.Backend != "raft" {
		fmt.Fprintf(stderr, "fibril raft recover: coordination.backend is %q; recovery is for the built-in raft\n", cfg.Coordination.Backend)
		return exitUsage
	}
	dir := filepath.Join(cfg.Server.DataDir, "coordination", "raft")
	logger, _ := newLogger(stderr, cfg.Log)
	if err := raft.Recover(dir, members, logger); err != nil {
		fmt.Fprintln(stderr, "fibril raft recover:", err)
		return exitError
	}
	fmt.Fprintf(stdout, "raft configuration in %s rewritten: %d voter(s). Start this broker; do the same on the other listed members.\n", dir, len(members))
	return exitOK
}
