package storage

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test them with errors.Is; the storage package
// wraps them with context (file, offset, underlying I/O error).
var (
	// ErrQuarantined: the partition's files hold damage that is not a torn
	// tail (a bad record followed by intact ones, a bad older segment, a gap
	// in offsets). The partition refuses to serve rather than serve wrong
	// data or silently drop acknowledged data. See CorruptionError.
	ErrQuarantined = errors.New("storage: partition quarantined")
	// ErrClosed: the partition was closed.
	ErrClosed = errors.New("storage: partition closed")
	// ErrFailed: a write or fsync failed earlier; the partition is fail-stop
	// until it is reopened (which re-reads what really reached the disk).
	ErrFailed = errors.New("storage: partition failed")
	// ErrOutOfRange: the offset has not been assigned yet.
	ErrOutOfRange = errors.New("storage: offset out of range")
	// ErrTrimmed: the offset was deleted by retention.
	ErrTrimmed = errors.New("storage: offset trimmed by retention")
	// ErrTooLarge: a record or state entry exceeds MaxRecordBytes.
	ErrTooLarge = errors.New("storage: record too large")
)

// CorruptionError describes damage that is not a torn tail. It matches
// ErrQuarantined with errors.Is.
type CorruptionError struct {
	File           string // path of the damaged file
	Pos            int64  // byte position of the first bad record or header
	ExpectedOffset uint64 // the log offset (or journal entry number) expected there
	Reason         string // what was wrong
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("storage: partition quarantined: %s at byte %d (expected offset %d): %s",
		e.File, e.Pos, e.ExpectedOffset, e.Reason)
}

// Is makes errors.Is(err, ErrQuarantined) true for every CorruptionError.
func (e *CorruptionError) Is(target error) bool { return target == ErrQuarantined }

// OffsetMismatchError refuses a replica batch that does not start at the
// partition's next offset (Partition.AppendReplica): Next < Want is a gap,
// Next > Want an overlap with records this replica already holds.
type OffsetMismatchError struct {
	Want uint64 // where the batch starts
	Next uint64 // the partition's next offset
}

func (e *OffsetMismatchError) Error() string {
	kind := "a gap"
	if e.Next > e.Want {
		kind = "an overlap"
	}
	return fmt.Sprintf("storage: replica batch at offset %d, partition next %d: %s", e.Want, e.Next, kind)
}
