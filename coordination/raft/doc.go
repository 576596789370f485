// Package raft is the embedded coordination backend: a core.Coordinator
// replicated by hashicorp/raft between the brokers themselves, so a
// cluster needs no external store. README.md describes its configuration,
// metrics and failure behaviour; DESIGN.md explains the choices (log
// store, lease expiry by the leader, one multiplexed port, membership).
//
// The broker opens it through the plugin registry (setup.go registers
// "raft"); tests and tools may call Open with Options directly.
package raft
