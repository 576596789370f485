package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	hraft "github.com/hashicorp/raft"
)

// Recover rewrites the raft configuration held in one member's data
// directory so that members are its only voters: the way back for a group
// that lost its quorum for good (more voters gone than can come back).
// It runs with the broker stopped (the log store's lock refuses a running
// one), on every member that is to be in the new group, with the same
// list; started again, they elect a leader among themselves from the
// state they hold. Writes the group made after the newest of those states
// are lost — that is the price of giving up the quorum, and why this is
// for a quorum that is not coming back (coordination/raft/README.md#lost-quorum).
func Recover(dataDir string, members []Peer, logger *slog.Logger) error {
	if len(members) == 0 {
		return errors.New("raft recover: name the members of the new group (id=host:port)")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	path := filepath.Join(dataDir, "raft.db")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("raft recover: %s holds no raft state (%v); a member without state joins the recovered group by itself", dataDir, err)
	}
	store, err := openBoltStore(path, time.Second)
	if errors.Is(err, errStoreLocked) {
		return fmt.Errorf("raft recover: %s is in use: the broker is still running; stop it first", path)
	}
	if err != nil {
		return fmt.Errorf("raft recover: %w", err)
	}
	defer store.Close()
	snaps, err := hraft.NewFileSnapshotStoreWithLogger(dataDir, 2, newHCLog(logger, "raft-snapshot"))
	if err != nil {
		return fmt.Errorf("raft recover: snapshot store in %s: %w", dataDir, err)
	}
	has, err := hraft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("raft recover: reading the state in %s: %w", dataDir, err)
	}
	if !has {
		return fmt.Errorf("raft recover: %s holds no raft state; a member without state joins the recovered group by itself", dataDir)
	}
	conf := hraft.DefaultConfig()
	conf.LocalID = hraft.ServerID(members[0].ID)
	conf.Logger = newHCLog(logger, "raft")
	conf.NoLegacyTelemetry = true
	servers := make([]hraft.Server, 0, len(members))
	seen := map[string]bool{}
	for _, m := range members {
		if m.ID == "" || m.Addr == "" || seen[m.ID] {
			return fmt.Errorf("raft recover: member %q at %q: every member needs a distinct id and an address", m.ID, m.Addr)
		}
		seen[m.ID] = true
		servers = append(servers, hraft.Server{Suffrage: hraft.Voter, ID: hraft.ServerID(m.ID), Address: hraft.ServerAddress(m.Addr)})
	}
	_, trans := hraft.NewInmemTransport("")
	if err := hraft.RecoverCluster(conf, newFSM(), store, store, snaps, trans, hraft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("raft recover: %w", err)
	}
	logger.Warn("raft: configuration rewritten for recovery", "dir", dataDir, "voters", len(servers))
	return nil
}
