package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// ErrDiverged: the follower's log holds records past the owner's end. It
// must be cut back (storage.TruncatePartition, on the closed partition)
// before it follows again; a *DivergedError says where.
var ErrDiverged = errors.New("replica: the follower's log is ahead of the owner's")

// DivergedError is ErrDiverged with the offsets: the follower keeps its
// records below OwnerNext.
type DivergedError struct {
	OwnerNext, FollowerNext uint64
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("%v: follower next %d, owner next %d", ErrDiverged, e.FollowerNext, e.OwnerNext)
}

func (e *DivergedError) Is(target error) bool { return target == ErrDiverged }

// BehindError: the follower's log ends before the owner's first retained
// record (retention deleted the owner's settled head), so the records in
// between cannot be copied. The follower's log must be emptied and started
// at OwnerFirst (storage.ResetPartition, on the closed partition) before
// it follows again; everything it holds is older than what the owner
// keeps.
type BehindError struct {
	OwnerFirst, FollowerNext uint64
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("replica: the owner's log starts at %d, past this follower's end %d", e.OwnerFirst, e.FollowerNext)
}

// Follower replicates one partition from its owner into Log.
type Follower struct {
	Key    wire.QueueKey
	NodeID string // this broker's node id, reported to the owner
	Log    *storage.Partition
	// CreditBytes is how many bytes of records and events the owner may
	// send ahead of this follower's durable progress (default 4 MiB).
	CreditBytes uint64
	// MaxFrameBytes bounds a frame read from the owner (default 64 MiB).
	MaxFrameBytes uint32
	Logger        *slog.Logger
	// Stats, when set, counts what this follower did (shared by the
	// followers of one broker, for its metrics).
	Stats *FollowerStats

	// The event cursor: valid once a checkpoint was installed in this
	// process (events are numbered per owner process, see Owned).
	eventNext  uint64
	haveEvents bool
	reqID      uint64

	durable atomic.Uint64 // every record below it is on this follower's disk
}

// FollowerStats counts followers' work: checkpoints installed, and the
// record bytes (payloads) appended while catching up and while streaming.
type FollowerStats struct {
	CheckpointInstalls atomic.Uint64
	CatchUpBytes       atomic.Uint64
	StreamedBytes      atomic.Uint64
}

func (f *Follower) count(c *atomic.Uint64, recs []storage.Record) {
	if f.Stats == nil {
		return
	}
	var n uint64
	for _, r := range recs {
		n += uint64(len(r.Data))
	}
	c.Add(n)
}

// DurableNext is the replica's durable tail as far as this follower knows:
// every record below it is on its disk (0 before it first streamed).
func (f *Follower) DurableNext() uint64 { return f.durable.Load() }

// noteDurable raises DurableNext.
func (f *Follower) noteDurable(next uint64) {
	for {
		cur := f.durable.Load()
		if next <= cur || f.durable.CompareAndSwap(cur, next) {
			return
		}
	}
}

func (f *Follower) credit() uint64 {
	if f.CreditBytes > 0 {
		return f.CreditBytes
	}
	return 4 << 20
}

func (f *Follower) maxFrame() uint32 {
	if f.MaxFrameBytes > 0 {
		return f.MaxFrameBytes
	}
	return 64 << 20
}

// keepaliveEvery is how often an idle follower reports (unchanged)
// progress, so the owner knows it is there.
const keepaliveEvery = time.Second

// Run replicates over conn, a connection to the owner already logged in
// as the node principal, until ctx ends, the connection fails or the
// owner ends the stream; it returns why. A follower without an event
// cursor first takes the owner's checkpoint (op 84), pulls the records it
// needs up to it (op 80) and installs it; then it streams (op 93),
// applying records, then their events, and reporting progress once the
// records are durable. ErrCheckpointRequired means: run again (a new
// checkpoint is taken); ErrDiverged: cut the log back first.
func (f *Follower) Run(ctx context.Context, conn io.ReadWriter) error {
	stop := context.AfterFunc(ctx, func() {
		if c, ok := conn.(io.Closer); ok {
			c.Close() // unblocks the reads below
		}
	})
	defer stop()
	fr := &frames{conn: conn, max: f.maxFrame()}
	if !f.haveEvents {
		if err := f.catchUp(fr); err != nil {
			return err
		}
	}
	return f.stream(ctx, fr)
}

// smallFrame is the read buffer a replica keeps while its stream is
// quiet; a follower may keep thousands of replicas, so a buffer grown by
// a catch-up's large batches is given back once frames are small again.
const smallFrame = 16 << 10

// frames reads and writes one connection's frames.
type frames struct {
	conn io.ReadWriter
	max  uint32
	rbuf []byte
	wmu  sync.Mutex
	wbuf []byte
}

func (c *frames) Send(op wire.Op, id uint64, body wire.Encoder) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = wire.AppendFrame(c.wbuf[:0], op, id, body)
	_, err := c.conn.Write(c.wbuf)
	return err
}

// read returns the next frame, decoded; its byte slices alias a buffer
// the next read reuses. A broker's PING is answered and skipped, and so
// is a TOPOLOGY_UPDATE the owner pushes to every session when its view
// changes (a follower takes its view from coordination, not from it).
func (c *frames) read() (Frame, error) {
	if cap(c.rbuf) < smallFrame {
		c.rbuf = make([]byte, smallFrame)
	}
	h, body, err := wire.ReadFrame(c.conn, c.rbuf, c.max)
	for err == nil && (h.Op == wire.OpPing || h.Op == wire.OpTopologyUpdate) {
		if h.Op == wire.OpPing {
			err = c.Send(wire.OpPong, h.RequestID, nil)
		}
		if err == nil {
			h, body, err = wire.ReadFrame(c.conn, c.rbuf, c.max)
		}
	}
	if err != nil {
		return Frame{}, err
	}
	switch {
	case cap(body) > cap(c.rbuf):
		c.rbuf = body[:0] // a busy stream: keep the larger buffer
	case len(body) <= smallFrame && cap(c.rbuf) > 4*smallFrame:
		c.rbuf = nil // quiet again: give the large buffer back (body still holds it)
	}
	b, err := wire.DecodeBody(h.Op, body)
	if err != nil {
		return Frame{}, fmt.Errorf("replica: from the owner: %w", err)
	}
	return Frame{Op: h.Op, RequestID: h.RequestID, Body: b}, nil
}

// call sends a request and reads its answer, which must be want (an
// ERROR answer is returned as an error).
func (f *Follower) call(fr *frames, op wire.Op, body wire.Encoder, want wire.Op) (wire.Body, error) {
	f.reqID++
	if err := fr.Send(op, f.reqID, body); err != nil {
		return nil, err
	}
	ans, err := fr.read()
	if err != nil {
		return nil, err
	}
	if e, ok := ans.Body.(*wire.ErrorBody); ok {
		return nil, fmt.Errorf("replica: the owner answered %v with %d: %s", op, e.Code, e.Message)
	}
	if ans.Op != want || ans.RequestID != f.reqID {
		return nil, fmt.Errorf("replica: the owner answered %v (request %d) to %v (request %d)", ans.Op, ans.RequestID, op, f.reqID)
	}
	return ans.Body, nil
}

// catchUp takes the owner's checkpoint, pulls the records up to it and
// installs it.
func (f *Follower) catchUp(fr *frames) error {
	body, err := f.call(fr, wire.OpReplicationCheckpointExport, &wire.ReplicationCheckpointExport{Key: f.Key}, wire.OpReplicationCheckpointExportOK)
	if err != nil {
		return err
	}
	cp := body.(*wire.ReplicationCheckpointExportOK).StateCheckpoint
	settled, history, engine, err := decodeSnapshot(cp.StateSnapshot)
	if err != nil {
		return err
	}
	settled, engine = append([]byte(nil), settled...), append([]byte(nil), engine...)
	if end, ok := divergence(f.Log.Epochs(), history, cp.MessageNextOffset); ok {
		if _, next := f.Log.Bounds(); next > end {
			return &DivergedError{OwnerNext: end, FollowerNext: next}
		}
	}
	for {
		_, next := f.Log.Bounds()
		switch {
		case next > cp.MessageNextOffset:
			return &DivergedError{OwnerNext: cp.MessageNextOffset, FollowerNext: next}
		case next < cp.MessageCheckpointOffset:
			return &BehindError{OwnerFirst: cp.MessageCheckpointOffset, FollowerNext: next}
		case next == cp.MessageNextOffset:
			if err := f.Log.InstallState(settled, engine); err != nil {
				return err
			}
			if f.Stats != nil {
				f.Stats.CheckpointInstalls.Add(1)
			}
			f.eventNext, f.haveEvents = cp.EventNextOffset, true
			return nil
		}
		req := &wire.ReplicationRead{ReadRequest: wire.ReadRequest{Key: f.Key, MessageFrom: next,
			MaxMessages: 1 << 16, MaxBytes: f.credit(), ReporterNodeID: wire.Some(f.NodeID)}}
		body, err := f.call(fr, wire.OpReplicationRead, req, wire.OpReplicationReadOK)
		if err != nil {
			return err
		}
		m := body.(*wire.ReplicationReadOK).Messages
		if m.Kind != wire.ReadBatch {
			return fmt.Errorf("%w: the owner no longer holds records from %d", ErrCheckpointRequired, next)
		}
		if len(m.Batch.Records) == 0 {
			return fmt.Errorf("replica: the owner sent no records from %d, below its checkpoint's %d", next, cp.MessageNextOffset)
		}
		recs, err := decodeRecords(m.Batch.Records)
		if err != nil {
			return err
		}
		if len(recs) > int(cp.MessageNextOffset-next) {
			recs = recs[:cp.MessageNextOffset-next] // the owner grew meanwhile: stop at the checkpoint
		}
		if m.Batch.Epoch > 0 {
			if err := f.Log.BeginEpochAt(m.Batch.Epoch, next); err != nil {
				return err
			}
		}
		done := make(chan error, 1)
		if err := f.Log.AppendReplica(next, recs, func(_ uint64, err error) { done <- err }); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		if f.Stats != nil {
			f.count(&f.Stats.CatchUpBytes, recs)
		}
	}
}

// divergence finds where a follower's log must end to be a prefix of
// the owner's, from the two epoch histories (the way Kafka finds it): the
// follower's records of its last epoch are the owner's only up to where
// that epoch — or the largest owner epoch not above it — ends on the
// owner. ok is false when either history is empty (nothing to compare).
func divergence(mine, owner []storage.EpochStart, ownerNext uint64) (end uint64, ok bool) {
	if len(mine) == 0 || len(owner) == 0 {
		return 0, false
	}
	last := mine[len(mine)-1].Epoch
	for i := len(owner) - 1; i >= 0; i-- {
		if owner[i].Epoch > last {
			continue
		}
		if i+1 < len(owner) {
			return owner[i+1].Start, true
		}
		return ownerNext, true
	}
	return owner[0].Start, true // the owner has no epoch that old: keep what precedes its history
}

func decodeRecords(in []wire.MessageRecord) ([]storage.Record, error) {
	out := make([]storage.Record, 0, len(in))
	size := 0
	for _, m := range in {
		size += len(m.Payload)
	}
	arena := make([]byte, 0, size) // one copy of the batch's payloads
	for _, m := range in {
		var r storage.Record
		var err error
		if r, arena, err = decodeRecord(m, arena); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// reporter gathers what the next PROGRESS frame says: the durable
// record cursor, the applied event cursor and the credit given back. It
// is fed from commit callbacks, which must not block.
type reporter struct {
	mu                         sync.Mutex
	msgNext, eventNext, credit uint64
	kick                       chan struct{}
}

func (r *reporter) add(msgNext, eventNext, credit uint64) {
	r.mu.Lock()
	r.msgNext, r.eventNext = max(r.msgNext, msgNext), max(r.eventNext, eventNext)
	r.credit += credit
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *reporter) take() *wire.ReplicationStreamProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &wire.ReplicationStreamProgress{DurableMessageNext: r.msgNext, DurableEventNext: r.eventNext, CreditAddBytes: r.credit}
	r.credit = 0
	return p
}

// stream runs the replication stream until it ends.
func (f *Follower) stream(ctx context.Context, fr *frames) error {
	f.reqID++
	id := f.reqID
	_, next := f.Log.Bounds()
	start := &wire.ReplicationStreamStart{Key: f.Key, MessageFrom: next, EventFrom: f.eventNext,
		CreditBytes: f.credit(), ReporterNodeID: wire.Some(f.NodeID)}
	if err := fr.Send(wire.OpReplicationStreamStart, id, start); err != nil {
		return err
	}
	// The writer: progress as records become durable, keepalives when idle.
	f.durable.Store(next) // what it holds when it starts is on its disk (and no more, after a cut)
	rep := &reporter{msgNext: next, eventNext: f.eventNext, kick: make(chan struct{}, 1)}
	rep.kick <- struct{}{} // report at once: the owner counts a follower only once it heard from it
	werr := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		tick := time.NewTicker(keepaliveEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-rep.kick:
			case <-tick.C:
			}
			if err := fr.Send(wire.OpReplicationStreamProgress, id, rep.take()); err != nil {
				werr <- err
				return
			}
		}
	}()
	for {
		select {
		case err := <-werr:
			return err
		default:
		}
		fm, err := fr.read()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if fm.RequestID != id {
			return fmt.Errorf("replica: frame %v for stream %d on stream %d", fm.Op, fm.RequestID, id)
		}
		switch b := fm.Body.(type) {
		case *wire.ReplicationStreamBatch:
			if err := f.apply(&b.ReadOK, rep); err != nil {
				return err
			}
		case *wire.ReplicationStreamEnd:
			if b.Code == wire.StreamEndCheckpointRequired {
				f.haveEvents = false
				return fmt.Errorf("%w: %s", ErrCheckpointRequired, b.Message)
			}
			return fmt.Errorf("replica: the owner ended the stream (code %d): %s", b.Code, b.Message)
		default:
			return fmt.Errorf("replica: unexpected %v on a replication stream", fm.Op)
		}
	}
}

// apply writes one batch: its records (AppendReplica), then its events;
// progress for the records is reported once they are durable.
func (f *Follower) apply(b *wire.ReadOK, rep *reporter) error {
	m, e := &b.Messages, &b.Events
	if m.Kind != wire.ReadBatch || e.Kind != wire.ReadBatch {
		f.haveEvents = false
		return fmt.Errorf("%w: in a stream batch", ErrCheckpointRequired)
	}
	recs, err := decodeRecords(m.Batch.Records)
	if err != nil {
		return err
	}
	if len(e.Batch.Records) > 0 && e.Batch.RequestedOffset != f.eventNext {
		return fmt.Errorf("replica: events from %d, follower expects %d", e.Batch.RequestedOffset, f.eventNext)
	}
	var recCost uint64
	for _, r := range m.Batch.Records {
		recCost += uint64(len(r.Headers) + len(r.Payload))
	}
	if len(recs) > 0 && m.Batch.Epoch > 0 {
		// The owner's history: these records were written in that epoch.
		if err := f.Log.BeginEpochAt(m.Batch.Epoch, recs[0].Offset); err != nil {
			return err
		}
	}
	if len(recs) > 0 {
		next := m.Batch.NextOffset
		err := f.Log.AppendReplica(recs[0].Offset, recs, func(_ uint64, err error) {
			if err == nil {
				f.noteDurable(next)
				rep.add(next, 0, recCost)
			}
		})
		var om *storage.OffsetMismatchError
		if errors.As(err, &om) && om.Next > om.Want {
			return &DivergedError{OwnerNext: om.Want, FollowerNext: om.Next}
		}
		if err != nil {
			return err
		}
		if f.Stats != nil {
			f.count(&f.Stats.StreamedBytes, recs)
		}
	}
	for _, ev := range e.Batch.Records {
		if err := f.Log.ApplyEvent(ev.Payload); err != nil {
			return fmt.Errorf("replica: event %d: %w", ev.Offset, err)
		}
		f.eventNext = ev.Offset + 1
	}
	rep.add(0, f.eventNext, batchCost(b)-recCost)
	return nil
}
