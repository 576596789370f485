package main

import (
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/fibrilgo/fibril/core/broker"
	"github.com/fibrilgo/fibril/core/config"
)

// runRestore is `fibril restore --from FILE [config flags]`: make the
// configured server.data_dir (new or empty) hold a backup taken with
// `fibrilctl backup`; start the broker on it afterwards.
func runRestore(args, environ []string, stdout, stderr io.Writer) int {
	const usageText = "usage: fibril restore --from BACKUP.tar [config flags]"
	if slices.Contains(args, "-h") || slices.Contains(args, "--help") {
		fmt.Fprintln(stdout, usageText+"\n\nUnpacks a backup taken with `fibrilctl backup` into server.data_dir, which must be new or empty;\nthe broker started on it afterwards recovers the backup's queues, streams, users and settings.")
		return exitOK
	}
	from, rest := cutFlag(args, "from")
	if from == "" {
		fmt.Fprintln(stderr, "fibril restore: --from is required:", usageText)
		return exitUsage
	}
	cfg, _, err := config.Load(rest, environ)
	if err != nil {
		fmt.Fprintln(stderr, "fibril restore:", err)
		return exitUsage
	}
	f, err := os.Open(from)
	if err != nil {
		fmt.Fprintln(stderr, "fibril restore:", err)
		return exitError
	}
	defer f.Close()
	m, err := broker.Restore(cfg.Server.DataDir, f)
	if err != nil {
		fmt.Fprintln(stderr, "fibril", err)
		return exitError
	}
	fmt.Fprintf(stdout, "restored %d partitions into %s (backup of %s, written by fibril %s); start the broker on it\n",
		len(m.Partitions), cfg.Server.DataDir, m.At.Format("2006-01-02T15:04:05Z"), m.WrittenBy)
	return exitOK
}
