// Package replica moves a partition's records and events from its owner
// to its followers: the owner's side of a replication stream (Source) and
// the follower's (Follower), over the node-only streaming ops of the wire
// protocol (docs/protocol.md#replication-ops). It knows storage partitions
// and frames; which partitions to replicate, from whom, and what a
// follower's progress means for confirms are its callers' business
// (docs/ARCHITECTURE.md#replication).
//
// Record contents are this broker's own encoding: a message record's
// headers carry the storage record's timestamp (u64, little-endian, unix
// milliseconds), its payload the storage record's data; an event record's
// payload is a storage event (storage.Event.Payload), its offset the
// event's sequence number.
package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// Frame is one frame of a replication stream, decoded.
type Frame struct {
	Op        wire.Op
	RequestID uint64
	Body      wire.Body
}

// Sender writes one frame. A stream's frames are sent by one goroutine at
// a time; a Sender shared by several streams serialises them itself. It
// may keep body until the frame is written: the caller does not change a
// body it sent.
type Sender interface {
	Send(op wire.Op, requestID uint64, body wire.Encoder) error
}

// ErrCheckpointRequired ends a stream whose follower cannot continue from
// where it is: its log is behind the owner's first retained record or
// ahead of the owner's log, or the events it needs left the owner's feed.
// The follower resynchronises (a checkpoint, or a truncation) and starts
// again.
var ErrCheckpointRequired = errors.New("replica: checkpoint required")

// batchCost is what a batch costs in credit: the summed length of the
// message records' headers and payloads and of the events' payloads.
func batchCost(b *wire.ReadOK) uint64 {
	var n uint64
	for _, r := range b.Messages.Batch.Records {
		n += uint64(len(r.Headers) + len(r.Payload))
	}
	for _, e := range b.Events.Batch.Records {
		n += uint64(len(e.Payload))
	}
	return n
}

// tsHeaderLen is the length of a message record's headers: the timestamp.
const tsHeaderLen = 8

// decodeRecord decodes m, copying its payload to the end of arena (the
// frame buffer is reused; one arena serves a whole batch).
func decodeRecord(m wire.MessageRecord, arena []byte) (storage.Record, []byte, error) {
	if len(m.Headers) != tsHeaderLen || m.Flags != 0 {
		return storage.Record{}, arena, fmt.Errorf("replica: record %d: %d header bytes, flags %#x; want %d and 0", m.Offset, len(m.Headers), m.Flags, tsHeaderLen)
	}
	n := len(arena)
	arena = append(arena, m.Payload...)
	return storage.Record{
		Offset:    m.Offset,
		Timestamp: int64(binary.LittleEndian.Uint64(m.Headers)),
		Data:      arena[n:len(arena):len(arena)],
	}, arena, nil
}
