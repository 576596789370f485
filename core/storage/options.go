package storage

import (
	"fmt"
	"log/slog"
	"time"
)

// FsyncPolicy says when an appended record counts as durable. README.md has
// the table of what each policy promises after a process crash and after a
// power loss.
type FsyncPolicy int

const (
	// FsyncAlways: Append returns (and AppendAsync's done fires) only after an
	// fsync covers the record. Concurrent appends share one fsync.
	FsyncAlways FsyncPolicy = iota
	// FsyncInterval: Append returns once the record is written to the OS; a
	// write that leaves the log or journal dirty schedules one fsync
	// Options.FsyncInterval later (nothing is scheduled while all is synced).
	FsyncInterval
	// FsyncNone: Append returns once the record is written to the OS; the
	// partition never fsyncs on its own except at segment roll, before a
	// retention deletion, on Sync and on Close.
	FsyncNone
)

// ParseFsyncPolicy parses the config spelling (storage.fsync).
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	switch s {
	case "always", "":
		return FsyncAlways, nil
	case "interval":
		return FsyncInterval, nil
	case "none":
		return FsyncNone, nil
	}
	return FsyncAlways, fmt.Errorf("storage: unknown fsync policy %q (want always, interval or none)", s)
}

func (p FsyncPolicy) String() string {
	switch p {
	case FsyncAlways:
		return "always"
	case FsyncInterval:
		return "interval"
	case FsyncNone:
		return "none"
	}
	return fmt.Sprintf("FsyncPolicy(%d)", int(p))
}

// Retention bounds what a partition keeps.
type Retention struct {
	// ByLimits selects stream mode: whole oldest segments are deleted while
	// any bound below is exceeded; the active segment never is. When false
	// (queue mode, the default) a segment is deleted once every record in it
	// — and in every older segment — is settled and that settlement is on
	// disk.
	ByLimits   bool
	MaxBytes   int64         // total segment bytes; 0 = unbounded
	MaxAge     time.Duration // by the newest record timestamp in a segment; 0 = unbounded
	MaxRecords uint64        // 0 = unbounded
}

// Options configure a Partition. The zero value is usable.
type Options struct {
	Fsync           FsyncPolicy
	FsyncInterval   time.Duration // used by FsyncInterval; default 100ms
	SegmentMaxBytes int64         // roll past this; default 64 MiB, at most 1 GiB
	IndexEveryBytes int           // sparse index granularity; default 4 KiB
	Retention       Retention
	FS              FS               // nil = OSFS
	Logger          *slog.Logger     // nil = slog.Default()
	Now             func() time.Time // nil = time.Now (age retention)
	// MaxPendingBytes bounds encoded records accepted but not yet written
	// to the OS; appenders block at the bound. Default 16 MiB.
	MaxPendingBytes int
	// WAL, when set, is the broker's write-ahead log (wal.go): under
	// FsyncAlways a commit's records are made durable by one fsync of the
	// WAL shared with every other partition committing at the same time,
	// instead of an fsync of this partition's segment. The partition's
	// directory must be under the WAL's root. Ignored by the other
	// policies.
	WAL *WAL

	// replay: OpenWAL's recovery opens a partition with the entries the
	// WAL holds for it (see replayWAL).
	replay walRefSet
}

const (
	defaultSegmentMaxBytes = 64 << 20
	maxSegmentMaxBytes     = 1 << 30
	defaultIndexEvery      = 4 << 10
	defaultFsyncInterval   = 100 * time.Millisecond
	defaultMaxPending      = 16 << 20
	// MaxRecordBytes is the largest record payload (and state entry) the
	// partition accepts. It keeps every file position inside a uint32 index
	// entry (segment bound 1 GiB + one record) and lets recovery reject
	// absurd length fields early.
	MaxRecordBytes = 256 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.Fsync < FsyncAlways || o.Fsync > FsyncNone {
		return o, fmt.Errorf("storage: invalid fsync policy %d", int(o.Fsync))
	}
	if o.FsyncInterval <= 0 {
		o.FsyncInterval = defaultFsyncInterval
	}
	if o.SegmentMaxBytes <= 0 {
		o.SegmentMaxBytes = defaultSegmentMaxBytes
	}
	if o.SegmentMaxBytes > maxSegmentMaxBytes {
		return o, fmt.Errorf("storage: SegmentMaxBytes %d above the 1 GiB limit", o.SegmentMaxBytes)
	}
	if o.IndexEveryBytes <= 0 {
		o.IndexEveryBytes = defaultIndexEvery
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = defaultMaxPending
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}
