package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// Owned is a partition this broker serves as its owner, as replication
// sees it.
type Owned struct {
	Log   *storage.Partition
	Epoch uint64
	// Checkpoint takes the state a new follower starts from: the event
	// feed's position and settled set (Log.EventCheckpoint) and the
	// engine's snapshot, at one instant. Nil means Log.EventCheckpoint
	// with no engine snapshot (a log without an engine, as in tests).
	Checkpoint func() (eventNext uint64, settled, engine []byte)
}

// Source is the owner's side of replication: it serves streams (op 93),
// pull reads (op 80) and checkpoint exports (op 84) for the partitions
// Lookup finds.
type Source struct {
	// Lookup returns the partition named by key when this broker owns it
	// and follower (a node id) is one of its followers; otherwise an
	// error whose text the follower gets.
	Lookup func(key wire.QueueKey, follower string) (Owned, error)
	// Progress, if set, hears each durable progress a follower reports:
	// its log holds every record below msgNext, durably, and it applied
	// every event below eventNext.
	Progress func(key wire.QueueKey, follower string, msgNext, eventNext uint64)
	// MaxBatchBytes bounds one batch's records and events (default 1 MiB);
	// a batch always carries at least one record or event when any waits.
	MaxBatchBytes int
	Logger        *slog.Logger
}

func (s *Source) maxBatch() int {
	if s.MaxBatchBytes > 0 {
		return s.MaxBatchBytes
	}
	return 1 << 20
}

// idleWait is how long a stream that has sent everything waits for the
// partition to grow before it looks again (a follower keeps it alive
// with progress frames meanwhile).
const idleWait = time.Second

// Stream serves one replication stream: start is its
// REPLICATION_STREAM_START, id the stream id (every frame of the stream
// carries it), in the follower's later frames of this stream (PROGRESS,
// RESET, STOP), closed when the connection goes. It pushes batches while
// the follower's credit lasts and ends the stream with
// REPLICATION_STREAM_END — code 2 when the follower must resynchronise
// first — unless the follower stopped it or ctx ended.
func (s *Source) Stream(ctx context.Context, id uint64, start *wire.ReplicationStreamStart, in <-chan Frame, out Sender) error {
	follower := start.ReporterNodeID.Value
	own, err := s.Lookup(start.Key, follower)
	if err != nil {
		return end(out, id, wire.StreamEndError, err.Error())
	}
	msgNext, evNext, credit := start.MessageFrom, start.EventFrom, start.CreditBytes
	if err := fits(own.Log, msgNext, evNext); err != nil {
		return end(out, id, wire.StreamEndCheckpointRequired, err.Error())
	}
	// handle applies one frame of the follower; done reports the stream
	// is over (stopped, or ended with the error).
	handle := func(f Frame) (done bool, err error) {
		switch b := f.Body.(type) {
		case *wire.ReplicationStreamProgress:
			credit += b.CreditAddBytes
			if s.Progress != nil {
				s.Progress(start.Key, follower, b.DurableMessageNext, b.DurableEventNext)
			}
		case *wire.ReplicationStreamReset:
			msgNext, evNext = b.MessageFrom, b.EventFrom
			if err := fits(own.Log, msgNext, evNext); err != nil {
				return true, end(out, id, wire.StreamEndCheckpointRequired, err.Error())
			}
		default:
			if f.Op == wire.OpReplicationStreamStop {
				return true, nil
			}
			return true, end(out, id, wire.StreamEndError, fmt.Sprintf("unexpected op %v on a replication stream", f.Op))
		}
		return false, nil
	}
	for {
		// The follower's frames first, without waiting: progress gives
		// credit back, and a busy stream must not leave them queued.
		for drained := false; !drained; {
			select {
			case f, ok := <-in:
				if !ok {
					return nil // the connection went
				}
				if done, err := handle(f); done {
					return err
				}
			default:
				drained = true
			}
		}
		if credit > 0 {
			// A new batch each time: the Sender may keep it until written.
			batch := new(wire.ReplicationStreamBatch)
			if err := s.fill(&batch.ReadOK, own, msgNext, evNext, min(credit, uint64(s.maxBatch()))); err != nil {
				if errors.Is(err, ErrCheckpointRequired) {
					return end(out, id, wire.StreamEndCheckpointRequired, err.Error())
				}
				return end(out, id, wire.StreamEndError, err.Error())
			}
			if len(batch.Messages.Batch.Records)+len(batch.Events.Batch.Records) > 0 {
				if err := out.Send(wire.OpReplicationStreamBatch, id, batch); err != nil {
					return err
				}
				credit -= min(credit, batchCost(&batch.ReadOK))
				msgNext, evNext = batch.Messages.Batch.NextOffset, batch.Events.Batch.NextOffset
				continue
			}
		}
		var timer <-chan time.Time
		var grown <-chan struct{}
		if credit > 0 {
			grown = own.Log.Grown()
			if n, ev := peek(own.Log, msgNext, evNext); n || ev {
				continue // grew between fill and Grown
			}
			timer = time.After(idleWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-grown:
		case <-timer:
		case f, ok := <-in:
			if !ok {
				return nil // the connection went
			}
			if done, err := handle(f); done {
				return err
			}
		}
	}
}

func end(out Sender, id uint64, code wire.StreamEndCode, msg string) error {
	return out.Send(wire.OpReplicationStreamEnd, id, &wire.ReplicationStreamEnd{Code: code, Message: msg})
}

// fits checks that a follower at (msgNext, evNext) can be served from the
// owner's log and event feed.
func fits(log *storage.Partition, msgNext, evNext uint64) error {
	first, next := log.Bounds()
	switch {
	case msgNext < first:
		return fmt.Errorf("%w: records from %d are gone (the log starts at %d)", ErrCheckpointRequired, msgNext, first)
	case msgNext > next:
		return fmt.Errorf("%w: the follower's log (next %d) is ahead of the owner's (next %d)", ErrCheckpointRequired, msgNext, next)
	}
	if _, _, err := log.Events(evNext, 0); errors.Is(err, storage.ErrEventsTrimmed) {
		return fmt.Errorf("%w: events from %d are not in the owner's feed", ErrCheckpointRequired, evNext)
	}
	return nil
}

// peek reports whether records or events wait past the cursors.
func peek(log *storage.Partition, msgNext, evNext uint64) (records, events bool) {
	_, next := log.Bounds()
	evs, _, _ := log.Events(evNext, 0)
	return next > msgNext, len(evs) > 0
}

// fill puts into b the records from msgNext and the events from evNext,
// up to about budget bytes between them. Events are read first and sent
// only with every record appended before them: a settlement names a
// record that existed when it was made, and a follower applies events
// after the batch's records, so it always holds what they name.
func (s *Source) fill(b *wire.ReadOK, own Owned, msgNext, evNext, budget uint64) error {
	evs, evEnd, err := own.Log.Events(evNext, int(budget/2))
	if errors.Is(err, storage.ErrEventsTrimmed) {
		return fmt.Errorf("%w: events from %d are not in the owner's feed", ErrCheckpointRequired, evNext)
	}
	_, logNext := own.Log.Bounds() // every record an event above names is below it
	// A batch holds records of one epoch of the log's history, and says
	// which: the follower keeps the same history (Follower.apply).
	epoch, epochEnd := own.Log.EpochOf(msgNext)
	m := &b.Messages
	m.Kind = wire.ReadBatch
	m.Batch = wire.MessageBatch{Epoch: epoch, RequestedOffset: msgNext, NextOffset: msgNext, Records: m.Batch.Records[:0]}
	var used uint64
	var hdrs []byte // the records' headers, cut from shared arrays
	err = own.Log.Scan(msgNext, func(r storage.Record) bool {
		if r.Offset != m.Batch.NextOffset || r.Offset >= epochEnd {
			return false // the next epoch's records go in the next batch
		}
		cost := uint64(tsHeaderLen + len(r.Data))
		if len(m.Batch.Records) > 0 && used+cost > budget {
			return false
		}
		if cap(hdrs)-len(hdrs) < tsHeaderLen {
			hdrs = make([]byte, 0, 256*tsHeaderLen)
		}
		hdrs = binary.LittleEndian.AppendUint64(hdrs, uint64(r.Timestamp))
		n := len(hdrs)
		m.Batch.Records = append(m.Batch.Records, wire.MessageRecord{Offset: r.Offset, Headers: hdrs[n-tsHeaderLen : n : n], Payload: r.Data})
		m.Batch.NextOffset++
		used += cost
		return used < budget
	})
	if errors.Is(err, storage.ErrTrimmed) {
		return fmt.Errorf("%w: records from %d are gone", ErrCheckpointRequired, msgNext)
	}
	if err != nil {
		return err
	}
	e := &b.Events
	e.Kind = wire.ReadBatch
	e.Batch = wire.EventBatch{Epoch: own.Epoch, RequestedOffset: evNext, NextOffset: evNext, Records: e.Batch.Records[:0]}
	if m.Batch.NextOffset < logNext {
		return nil // the records are not caught up with the events yet
	}
	for _, ev := range evs {
		e.Batch.Records = append(e.Batch.Records, wire.EventRecord{Offset: ev.Seq, Payload: ev.Payload})
	}
	e.Batch.NextOffset = evEnd
	return nil
}

// Read answers a pull read (op 80): records from req.MessageFrom (up to
// MaxMessages and MaxBytes) and, when MaxEvents > 0, events from
// req.EventFrom; a half that cannot be served answers "checkpoint
// required". With MaxWaitMs > 0 and nothing to send it waits that long
// (at most 30 s) for the partition to grow.
func (s *Source) Read(ctx context.Context, req *wire.ReadRequest) (*wire.ReadOK, error) {
	own, err := s.Lookup(req.Key, req.ReporterNodeID.Value)
	if err != nil {
		return nil, err
	}
	budget := uint64(s.maxBatch())
	if req.MaxBytes > 0 {
		budget = min(budget, req.MaxBytes)
	}
	wait := time.Duration(min(req.MaxWaitMs, 30_000)) * time.Millisecond
	deadline := time.Now().Add(wait)
	for {
		grown := own.Log.Grown()
		out := &wire.ReadOK{}
		if err := s.fill(out, own, req.MessageFrom, req.EventFrom, budget); err != nil && !errors.Is(err, ErrCheckpointRequired) {
			return nil, err
		}
		s.cut(out, own, req)
		if len(out.Messages.Batch.Records)+len(out.Events.Batch.Records) > 0 || out.Messages.Kind != wire.ReadBatch || out.Events.Kind != wire.ReadBatch || time.Now().After(deadline) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-grown:
		case <-time.After(time.Until(deadline)):
		}
	}
}

// cut applies a pull read's count limits, and answers "checkpoint
// required" for a half the owner cannot serve.
func (s *Source) cut(out *wire.ReadOK, own Owned, req *wire.ReadRequest) {
	first, next := own.Log.Bounds()
	if req.MessageFrom < first || req.MessageFrom > next {
		out.Messages = wire.MessageRead{Kind: wire.ReadCheckpointRequired, Checkpoint: wire.CheckpointRequired{Epoch: own.Epoch, RequestedOffset: req.MessageFrom, HeadOffset: first, NextOffset: next}}
	} else if m := &out.Messages.Batch; uint64(len(m.Records)) > uint64(req.MaxMessages) {
		m.Records = m.Records[:req.MaxMessages]
		m.NextOffset = m.RequestedOffset + uint64(req.MaxMessages)
	}
	if req.MaxEvents == 0 {
		out.Events = wire.EventRead{Kind: wire.ReadBatch, Batch: wire.EventBatch{Epoch: own.Epoch, RequestedOffset: req.EventFrom, NextOffset: req.EventFrom}}
		return
	}
	if _, _, err := own.Log.Events(req.EventFrom, 0); errors.Is(err, storage.ErrEventsTrimmed) {
		out.Events = wire.EventRead{Kind: wire.ReadCheckpointRequired, Checkpoint: wire.CheckpointRequired{Epoch: own.Epoch, RequestedOffset: req.EventFrom}}
	} else if e := &out.Events.Batch; uint64(len(e.Records)) > uint64(req.MaxEvents) {
		e.Records = e.Records[:req.MaxEvents]
		e.NextOffset = e.Records[len(e.Records)-1].Offset + 1
	}
}

// Checkpoint answers a checkpoint export (op 84): the state a follower
// installs before it streams events (see Owned.Checkpoint).
func (s *Source) Checkpoint(key wire.QueueKey, follower string) (*wire.StateCheckpoint, error) {
	own, err := s.Lookup(key, follower)
	if err != nil {
		return nil, err
	}
	var evNext uint64
	var settled, engine []byte
	if own.Checkpoint != nil {
		evNext, settled, engine = own.Checkpoint()
	} else {
		evNext, settled = own.Log.EventCheckpoint(0)
	}
	first, next := own.Log.Bounds()
	return &wire.StateCheckpoint{
		MessageEpoch: own.Epoch, EventEpoch: own.Epoch,
		MessageCheckpointOffset: first, MessageNextOffset: next,
		EventNextOffset: evNext, AppliedEventOffset: evNext,
		StateSnapshot: encodeSnapshot(settled, own.Log.Epochs(), engine),
	}, nil
}

// A checkpoint's state snapshot, this broker's encoding: u8 version 2,
// uvarint length of the settled set, the settled set
// (storage.Partition.EventCheckpoint's encoding), uvarint count of the
// owner's epoch history entries, each a uvarint epoch and start, then the
// engine snapshot. Version 1 (no history) is still read.
const snapshotVersion = 2

func encodeSnapshot(settled []byte, history []storage.EpochStart, engine []byte) []byte {
	b := []byte{snapshotVersion}
	b = binary.AppendUvarint(b, uint64(len(settled)))
	b = append(b, settled...)
	b = binary.AppendUvarint(b, uint64(len(history)))
	for _, e := range history {
		b = binary.AppendUvarint(b, e.Epoch)
		b = binary.AppendUvarint(b, e.Start)
	}
	return append(b, engine...)
}

func decodeSnapshot(b []byte) (settled []byte, history []storage.EpochStart, engine []byte, err error) {
	bad := errors.New("replica: malformed state snapshot")
	if len(b) == 0 || b[0] < 1 || b[0] > snapshotVersion {
		return nil, nil, nil, errors.New("replica: unknown state snapshot version")
	}
	version := b[0]
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil, nil, nil, bad
	}
	rest := b[1+k:]
	settled, rest = rest[:n], rest[n:]
	if version >= 2 {
		count, k := binary.Uvarint(rest)
		if k <= 0 || count > uint64(len(rest)) {
			return nil, nil, nil, bad
		}
		rest = rest[k:]
		for range count {
			e, k1 := binary.Uvarint(rest)
			if k1 <= 0 {
				return nil, nil, nil, bad
			}
			st, k2 := binary.Uvarint(rest[k1:])
			if k2 <= 0 {
				return nil, nil, nil, bad
			}
			history = append(history, storage.EpochStart{Epoch: e, Start: st})
			rest = rest[k1+k2:]
		}
	}
	return settled, history, rest, nil
}
