// Package sim runs a whole Fibril cluster in one process on a simulated
// network and, inside a testing/synctest bubble, a simulated clock:
// brokers (public and private) from core/broker, the in-memory
// coordinator (core/memcoord), an inter-broker transport and client
// connections over Net, whose directions between two hosts the harness
// delays, cuts (one way or both) and heals, and brokers that crash and
// restart with their storage kept. The faults of a run come from its
// seed: the same seed gives the same faults at the same simulated
// instants. Goroutine interleavings are the Go scheduler's and are not
// reproduced, so a seed reproduces the schedule of faults, not every
// outcome.
//
// The checks (Ledger) are the cluster's promises to clients: a confirm
// means the message is delivered after the faults heal, at the offset the
// confirm named; no client ever dials a private broker; a settled message
// is not delivered again; nothing leaks once the cluster is shut down.
package sim
