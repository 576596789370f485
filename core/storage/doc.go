// Package storage is the durable partition log: one directory per queue
// partition holding a segmented, append-only record log (records with
// length, CRC32C and offset, plus a sparse index that is only an
// accelerator) and a state journal beside it (settlements and the queue
// engine's opaque state entries, compacted with snapshots).
//
// It owns three things and nothing else: what is on disk and in which
// format, when it is fsynced (the FsyncPolicy and the group committer),
// and what is true after a crash (recovery on open: a torn tail is cut, a
// damaged middle quarantines the partition). It knows nothing of queues,
// leases or the wire; the queue engine (core/queue) gives it bytes and
// opaque state entries and gets offsets and callbacks back.
//
// Data flows one way on the write path: an appender encodes its record
// into the current batch and returns its offset at once (the record is
// readable immediately, before it is durable); the one committer
// goroutine writes every pending batch, fsyncs once for all of them
// (group commit) and then runs the appenders' callbacks in offset order
// — that callback is where the broker sends PUBLISH_OK. Settlements and
// state entries are written to the OS before the call returns and reach
// the disk with a later journal fsync. On the read path, Read and Scan
// serve records from the active segment and from sealed segments opened
// on demand through a process-wide descriptor cache; retention deletes
// whole segments from the head once they are settled (queues) or past a
// bound (streams).
//
// README.md describes the on-disk format, group commit, what each fsync
// policy promises after a process crash and after a power loss, and the
// recovery rules, with the tests that check them.
package storage
