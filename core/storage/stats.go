package storage

import (
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/latency"
)

// Process-wide counters over every partition (see Stats).
var (
	statFsyncs     atomic.Uint64
	statBytes      atomic.Uint64
	statAppends    atomic.Uint64
	statWALCommits atomic.Uint64
	statWALRounds  atomic.Uint64
)

// Counters is a snapshot of the process-wide storage counters (Stats).
// They only grow; the broker exports them as fibril_storage_fsyncs_total,
// fibril_storage_bytes_written_total and fibril_storage_appends_total.
type Counters struct {
	// Fsyncs counts sync calls (fdatasync on Linux, fsync elsewhere) on
	// segment and journal files, whatever the reason: group commits, the
	// sealed segment at a roll, journal fsyncs, compaction, recovery
	// truncations. Directory fsyncs (after creating or removing a file)
	// are not counted, nor are index files (never synced).
	Fsyncs uint64
	// BytesWritten counts bytes written to segment and journal files
	// (records, headers, journal entries and snapshots); index files are
	// not counted.
	BytesWritten uint64
	// Appends counts records written to a segment file (by every
	// partition, under every policy), whether or not an fsync covered
	// them yet.
	Appends uint64
	// WALCommits counts partition commits made durable through the WAL,
	// WALRounds the WAL rounds (one write and fsync each) that did it:
	// their ratio is how many partitions shared a round on average.
	// Commits that fsynced their own segment are not counted.
	WALCommits uint64
	WALRounds  uint64
}

// Stats returns the process-wide counters.
func Stats() Counters {
	return Counters{
		Fsyncs:       statFsyncs.Load(),
		BytesWritten: statBytes.Load(),
		Appends:      statAppends.Load(),
		WALCommits:   statWALCommits.Load(),
		WALRounds:    statWALRounds.Load(),
	}
}

// FsyncLatency is how long each sync of a segment, journal or
// write-ahead log file took (the fibril_storage_fsync_seconds histogram).
var FsyncLatency = latency.New(latency.Exponential(50e-6, 2, 16)...) // 50 µs … ~1.6 s

// syncFile syncs a segment or journal file, counts it and times it.
func syncFile(f File) error {
	statFsyncs.Add(1)
	start := time.Now()
	err := f.Sync()
	FsyncLatency.Observe(time.Since(start))
	return err
}

// writeFile writes to a segment or journal file and counts the bytes.
func writeFile(f File, b []byte, at int64) (int, error) {
	n, err := f.WriteAt(b, at)
	statBytes.Add(uint64(n))
	return n, err
}
