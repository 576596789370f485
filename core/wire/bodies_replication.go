package wire

import "math"

// Node-only replication bodies, ops 80–87 and 93–100
// (docs/protocol.md#replication-ops). Only brokers speak them: a follower
// pulls (REPLICATION_READ, STREAM_REPLICATION_READ) or streams
// (REPLICATION_STREAM_*) a partition's records from its owner, and the
// checkpoint ops move a whole state snapshot when the owner no longer has
// the records the follower needs.
//
// Three magics collide with client-facing ones (FSB1 is also SUBSCRIBE,
// FSP1 also SUBSCRIBE_STREAM, FSR1 is both REPLICATION_STREAM_RESET and
// STREAM_REPLICATION_READ_OK): as everywhere in this package the op picks
// the body type and the magic is only checked, never used to choose.
//
// Record headers, event payloads and state snapshots are the storage
// engine's own encodings; this file frames them as opaque bytes. Decoded
// `bytes` fields alias the input buffer, as Publish.Payload does (see the
// package documentation).

const (
	magicReplicationRead                = "FRQ1"
	magicReplicationReadOK              = "FRR2"
	magicReplicationApply               = "FRA1"
	magicReplicationApplyOK             = "FAO1"
	magicReplicationCheckpointExport    = "FCE1"
	magicReplicationCheckpointExportOK  = "FCO1"
	magicReplicationCheckpointInstall   = "FCI1"
	magicReplicationCheckpointInstallOK = "FCK1"
	magicReplicationStreamStart         = "FSS1"
	magicReplicationStreamBatch         = "FSB1"
	magicReplicationStreamProgress      = "FSP1"
	magicReplicationStreamReset         = "FSR1"
	magicReplicationStreamEnd           = "FSE1"
	magicStreamReplicationRead          = "FSQ1"
	magicStreamReplicationReadOK        = "FSR1"
)

// Minimum wire sizes of records, used to bound list counts before
// allocating.
const (
	minMessageRecordSize = 8 + 2 + 4 + 4 // offset, flags, headers length, payload length
	minEventRecordSize   = 8 + 4         // offset, payload length
)

// QueueKey names one queue partition in the order topic, partition, group
// (docs/protocol.md#replication-ops). Group is the queue namespace inside
// the topic (absent = the default namespace), not a consumer group.
type QueueKey struct {
	Topic     string
	Partition uint32
	Group     Option[string]
}

func (k *QueueKey) appendTo(b []byte) []byte {
	b = appendStr(b, k.Topic)
	b = appendU32(b, k.Partition)
	return appendOptStr(b, k.Group)
}

func (k *QueueKey) read(r *reader) {
	k.Topic = r.str("topic")
	k.Partition = r.u32("partition")
	k.Group = r.optStr("group")
}

// MessageRecord is one queue message as the owner's log stores it. Headers
// is the storage engine's encoding of the message metadata, not a wire
// Headers list; the codec treats it as opaque.
type MessageRecord struct {
	Offset  uint64
	Flags   uint16
	Headers []byte // aliases the decoded buffer
	Payload []byte // aliases the decoded buffer
}

// EventRecord is one entry of a partition's event log (the state changes
// that followers replay next to the messages). Payload is opaque.
type EventRecord struct {
	Offset  uint64
	Payload []byte // aliases the decoded buffer
}

func appendMessageRecords(b []byte, recs []MessageRecord) []byte {
	b = appendLen(b, len(recs))
	for i := range recs {
		m := &recs[i]
		b = appendU64(b, m.Offset)
		b = appendU16(b, m.Flags)
		b = appendBytes(b, m.Headers)
		b = appendBytes(b, m.Payload)
	}
	return b
}

func appendEventRecords(b []byte, recs []EventRecord) []byte {
	b = appendLen(b, len(recs))
	for i := range recs {
		b = appendU64(b, recs[i].Offset)
		b = appendBytes(b, recs[i].Payload)
	}
	return b
}

// batchCheck applies the batch rules of a MessageRead/EventRead while its
// records are read (docs/protocol.md#replication-ops): the first offset is
// at least requested_offset, each later one is its predecessor plus one,
// no record sits at 2^64−1 (its successor would overflow), and next_offset
// is at least the last offset plus one (requested_offset for an empty
// batch). A nil *batchCheck checks nothing, which is how REPLICATION_APPLY
// reads its lists.
type batchCheck struct {
	requested uint64
	want      uint64 // offset the next record must carry, once seen
	seen      bool
}

func (c *batchCheck) record(r *reader, field string, at int, off uint64) {
	if c == nil || r.err != nil {
		return
	}
	switch {
	case off == math.MaxUint64,
		!c.seen && off < c.requested,
		c.seen && off != c.want:
		r.fail(field, at, ErrBadBatch)
		return
	}
	c.seen = true
	c.want = off + 1
}

// end checks next_offset, read earlier at byte at.
func (c *batchCheck) end(r *reader, field string, at int, next uint64) {
	if c == nil || r.err != nil {
		return
	}
	min := c.requested
	if c.seen {
		min = c.want
	}
	if next < min {
		r.fail(field, at, ErrBadBatch)
	}
}

// messageRecords reads a list<MessageRecord> into s, reusing its capacity.
func (r *reader) messageRecords(s []MessageRecord, c *batchCheck) []MessageRecord {
	s = resize(s, r.count("messages.records", minMessageRecordSize))
	for i := range s {
		m := &s[i]
		at := r.off
		m.Offset = r.u64("messages.offset")
		c.record(r, "messages.offset", at, m.Offset)
		m.Flags = r.u16("messages.flags")
		m.Headers = r.bytes("messages.headers")
		m.Payload = r.bytes("messages.payload")
	}
	return s
}

// eventRecords reads a list<EventRecord> into s, reusing its capacity.
func (r *reader) eventRecords(s []EventRecord, c *batchCheck) []EventRecord {
	s = resize(s, r.count("events.records", minEventRecordSize))
	for i := range s {
		e := &s[i]
		at := r.off
		e.Offset = r.u64("events.offset")
		c.record(r, "events.offset", at, e.Offset)
		e.Payload = r.bytes("events.payload")
	}
	return s
}

// CheckpointRequired answers a read whose requested offset the owner no
// longer holds: the follower must install a checkpoint
// (REPLICATION_CHECKPOINT_EXPORT/INSTALL) before reading on from
// NextOffset.
type CheckpointRequired struct {
	Epoch           uint64
	RequestedOffset uint64
	HeadOffset      uint64 // oldest offset the owner still has
	NextOffset      uint64
}

func (c *CheckpointRequired) appendTo(b []byte) []byte {
	b = appendU64(b, c.Epoch)
	b = appendU64(b, c.RequestedOffset)
	b = appendU64(b, c.HeadOffset)
	return appendU64(b, c.NextOffset)
}

// checkpointFields names the CheckpointRequired fields of the message
// half (0) and the event half (1) in decode errors.
var checkpointFields = [2][4]string{
	{"messages.epoch", "messages.requested_offset", "messages.head_offset", "messages.next_offset"},
	{"events.epoch", "events.requested_offset", "events.head_offset", "events.next_offset"},
}

func (c *CheckpointRequired) read(r *reader, half int) {
	names := &checkpointFields[half]
	c.Epoch = r.u64(names[0])
	c.RequestedOffset = r.u64(names[1])
	c.HeadOffset = r.u64(names[2])
	c.NextOffset = r.u64(names[3])
}

// ReadKind is the enum8 that opens a MessageRead or EventRead: a batch of
// records or a request to fall back to a checkpoint. Any other value is a
// malformed body.
type ReadKind uint8

const (
	ReadBatch              ReadKind = 0
	ReadCheckpointRequired ReadKind = 1
)

var readKindNames = []string{"batch", "checkpoint_required"}

func (k ReadKind) String() string { return enumString(readKindNames, "ReadKind", int(k)) }

// Valid reports whether k is in the table.
func (k ReadKind) Valid() bool { return int(k) < len(readKindNames) }

// MessageBatch is the batch arm of a MessageRead: records from
// RequestedOffset on (the first may start above it) and the offset the
// follower should ask for next.
type MessageBatch struct {
	Epoch           uint64
	RequestedOffset uint64
	NextOffset      uint64
	Records         []MessageRecord
}

// EventBatch is the batch arm of an EventRead; see MessageBatch.
type EventBatch struct {
	Epoch           uint64
	RequestedOffset uint64
	NextOffset      uint64
	Records         []EventRecord
}

// MessageRead is the message half of a read answer. Kind selects which
// of Batch and Checkpoint is on the wire; the other is ignored when
// encoding and zero after decoding. Decode validates a batch's offsets
// (see ErrBadBatch).
type MessageRead struct {
	Kind       ReadKind
	Batch      MessageBatch
	Checkpoint CheckpointRequired
}

// EventRead is the event half of a read answer, laid out like MessageRead
// with EventRecords.
type EventRead struct {
	Kind       ReadKind
	Batch      EventBatch
	Checkpoint CheckpointRequired
}

func (m *MessageRead) appendTo(b []byte) []byte {
	b = append(b, byte(m.Kind))
	if m.Kind == ReadCheckpointRequired {
		return m.Checkpoint.appendTo(b)
	}
	b = appendU64(b, m.Batch.Epoch)
	b = appendU64(b, m.Batch.RequestedOffset)
	b = appendU64(b, m.Batch.NextOffset)
	return appendMessageRecords(b, m.Batch.Records)
}

func (m *MessageRead) read(r *reader) {
	m.Kind = ReadKind(r.enum8("messages.kind", uint8(len(readKindNames))))
	if m.Kind == ReadCheckpointRequired {
		m.Batch = MessageBatch{Records: m.Batch.Records[:0]}
		m.Checkpoint.read(r, 0)
		return
	}
	m.Checkpoint = CheckpointRequired{}
	m.Batch.Epoch = r.u64("messages.epoch")
	m.Batch.RequestedOffset = r.u64("messages.requested_offset")
	nextAt := r.off
	m.Batch.NextOffset = r.u64("messages.next_offset")
	c := batchCheck{requested: m.Batch.RequestedOffset}
	m.Batch.Records = r.messageRecords(m.Batch.Records, &c)
	c.end(r, "messages.next_offset", nextAt, m.Batch.NextOffset)
}

func (e *EventRead) appendTo(b []byte) []byte {
	b = append(b, byte(e.Kind))
	if e.Kind == ReadCheckpointRequired {
		return e.Checkpoint.appendTo(b)
	}
	b = appendU64(b, e.Batch.Epoch)
	b = appendU64(b, e.Batch.RequestedOffset)
	b = appendU64(b, e.Batch.NextOffset)
	return appendEventRecords(b, e.Batch.Records)
}

func (e *EventRead) read(r *reader) {
	e.Kind = ReadKind(r.enum8("events.kind", uint8(len(readKindNames))))
	if e.Kind == ReadCheckpointRequired {
		e.Batch = EventBatch{Records: e.Batch.Records[:0]}
		e.Checkpoint.read(r, 1)
		return
	}
	e.Checkpoint = CheckpointRequired{}
	e.Batch.Epoch = r.u64("events.epoch")
	e.Batch.RequestedOffset = r.u64("events.requested_offset")
	nextAt := r.off
	e.Batch.NextOffset = r.u64("events.next_offset")
	c := batchCheck{requested: e.Batch.RequestedOffset}
	e.Batch.Records = r.eventRecords(e.Batch.Records, &c)
	c.end(r, "events.next_offset", nextAt, e.Batch.NextOffset)
}

// ReadOK is the ReadOkBody shared byte for byte (after the magic) by
// REPLICATION_READ_OK (81), REPLICATION_STREAM_BATCH (94) and
// STREAM_REPLICATION_READ_OK (100): the message half, then the event half.
type ReadOK struct {
	Messages MessageRead
	Events   EventRead
}

func (o *ReadOK) appendFields(b []byte) []byte {
	return o.Events.appendTo(o.Messages.appendTo(b))
}

func decodeReadOK(o *ReadOK, b []byte, op Op, magic string) error {
	var r reader
	r.begin(b, op)
	for r.next() {
		r.magic(magic)
		o.Messages.read(&r)
		o.Events.read(&r)
		r.end()
	}
	return r.result()
}

// ReplicationReadOK is the REPLICATION_READ_OK reply (op 81, magic FRR2).
type ReplicationReadOK struct{ ReadOK }

// AppendTo appends the FRR2 body.
func (o *ReplicationReadOK) AppendTo(b []byte) []byte {
	return o.appendFields(append(b, magicReplicationReadOK...))
}

// Decode parses an FRR2 body, validating both batches.
func (o *ReplicationReadOK) Decode(b []byte) error {
	return decodeReadOK(&o.ReadOK, b, OpReplicationReadOK, magicReplicationReadOK)
}

// ReplicationStreamBatch is the REPLICATION_STREAM_BATCH push (op 94,
// magic FSB1, the same magic as SUBSCRIBE): records the owner sends while
// the stream has credit.
type ReplicationStreamBatch struct{ ReadOK }

// AppendTo appends the FSB1 body.
func (o *ReplicationStreamBatch) AppendTo(b []byte) []byte {
	return o.appendFields(append(b, magicReplicationStreamBatch...))
}

// Decode parses a REPLICATION_STREAM_BATCH FSB1 body, validating both
// batches.
func (o *ReplicationStreamBatch) Decode(b []byte) error {
	return decodeReadOK(&o.ReadOK, b, OpReplicationStreamBatch, magicReplicationStreamBatch)
}

// StreamReplicationReadOK is the STREAM_REPLICATION_READ_OK reply (op 100,
// magic FSR1, the same magic as REPLICATION_STREAM_RESET).
type StreamReplicationReadOK struct{ ReadOK }

// AppendTo appends the FSR1 body.
func (o *StreamReplicationReadOK) AppendTo(b []byte) []byte {
	return o.appendFields(append(b, magicStreamReplicationReadOK...))
}

// Decode parses a STREAM_REPLICATION_READ_OK FSR1 body, validating both
// batches.
func (o *StreamReplicationReadOK) Decode(b []byte) error {
	return decodeReadOK(&o.ReadOK, b, OpStreamReplicationReadOK, magicStreamReplicationReadOK)
}

// ReadRequest is the ReadRequestBody shared (after the magic) by
// REPLICATION_READ (80) and STREAM_REPLICATION_READ (99): read messages
// from MessageFrom and events from EventFrom, within the given limits.
type ReadRequest struct {
	Key         QueueKey
	MessageFrom uint64
	EventFrom   uint64
	MaxMessages uint32
	MaxEvents   uint32
	MaxBytes    uint64
	MaxWaitMs   uint32 // 0 = answer at once, else long-poll up to this long
	// ReporterNodeID is the follower's node id; when present the read
	// also reports the follower's durable progress to the owner.
	ReporterNodeID Option[string]
}

// appendFields appends the body after the magic; noGroup writes the group
// as absent whatever Key.Group holds.
func (q *ReadRequest) appendFields(b []byte, noGroup bool) []byte {
	b = appendStr(b, q.Key.Topic)
	b = appendU32(b, q.Key.Partition)
	if noGroup {
		b = append(b, 0)
	} else {
		b = appendOptStr(b, q.Key.Group)
	}
	b = appendU64(b, q.MessageFrom)
	b = appendU64(b, q.EventFrom)
	b = appendU32(b, q.MaxMessages)
	b = appendU32(b, q.MaxEvents)
	b = appendU64(b, q.MaxBytes)
	b = appendU32(b, q.MaxWaitMs)
	return appendOptStr(b, q.ReporterNodeID)
}

func decodeReadRequest(q *ReadRequest, b []byte, op Op, magic string, noGroup bool) error {
	var r reader
	r.begin(b, op)
	for r.next() {
		r.magic(magic)
		q.Key.Topic = r.str("topic")
		q.Key.Partition = r.u32("partition")
		groupAt := r.off
		q.Key.Group = r.optStr("group")
		if noGroup && q.Key.Group.Present {
			r.fail("group", groupAt, ErrBadOptionTag)
			q.Key.Group = Option[string]{}
		}
		q.MessageFrom = r.u64("message_from")
		q.EventFrom = r.u64("event_from")
		q.MaxMessages = r.u32("max_messages")
		q.MaxEvents = r.u32("max_events")
		q.MaxBytes = r.u64("max_bytes")
		q.MaxWaitMs = r.u32("max_wait_ms")
		q.ReporterNodeID = r.optStr("reporter_node_id")
		r.end()
	}
	return r.result()
}

// ReplicationRead is the REPLICATION_READ request (op 80, magic FRQ1): a
// pull of a queue partition's records, answered by REPLICATION_READ_OK.
type ReplicationRead struct{ ReadRequest }

// AppendTo appends the FRQ1 body.
func (q *ReplicationRead) AppendTo(b []byte) []byte {
	return q.appendFields(append(b, magicReplicationRead...), false)
}

// Decode parses an FRQ1 body.
func (q *ReplicationRead) Decode(b []byte) error {
	return decodeReadRequest(&q.ReadRequest, b, OpReplicationRead, magicReplicationRead, false)
}

// StreamReplicationRead is the STREAM_REPLICATION_READ request (op 99,
// magic FSQ1), the pull of a stream partition, answered by
// STREAM_REPLICATION_READ_OK. Streams have no queue namespace, so the
// group is always absent: AppendTo writes it absent whatever Key.Group
// holds, and Decode rejects a present group as an invalid option tag.
type StreamReplicationRead struct{ ReadRequest }

// AppendTo appends the FSQ1 body (group absent).
func (q *StreamReplicationRead) AppendTo(b []byte) []byte {
	return q.appendFields(append(b, magicStreamReplicationRead...), true)
}

// Decode parses an FSQ1 body; a present group is malformed.
func (q *StreamReplicationRead) Decode(b []byte) error {
	return decodeReadRequest(&q.ReadRequest, b, OpStreamReplicationRead, magicStreamReplicationRead, true)
}

// MessageApply is the message part of a REPLICATION_APPLY: records the
// follower is to append under Epoch.
type MessageApply struct {
	Epoch   uint64
	Records []MessageRecord
}

// EventApply is the event part of a REPLICATION_APPLY.
type EventApply struct {
	Epoch   uint64
	Records []EventRecord
}

// ReplicationApply is the REPLICATION_APPLY request (op 82, magic FRA1):
// the owner pushes records for a follower to apply. Unlike a read answer,
// its record lists are decoded without the batch offset checks.
type ReplicationApply struct {
	Key      QueueKey
	Messages Option[MessageApply]
	Events   Option[EventApply]
}

// AppendTo appends the FRA1 body.
func (a *ReplicationApply) AppendTo(b []byte) []byte {
	b = append(b, magicReplicationApply...)
	b = a.Key.appendTo(b)
	if a.Messages.Present {
		b = appendU64(append(b, 1), a.Messages.Value.Epoch)
		b = appendMessageRecords(b, a.Messages.Value.Records)
	} else {
		b = append(b, 0)
	}
	if a.Events.Present {
		b = appendU64(append(b, 1), a.Events.Value.Epoch)
		b = appendEventRecords(b, a.Events.Value.Records)
	} else {
		b = append(b, 0)
	}
	return b
}

// Decode parses an FRA1 body.
func (a *ReplicationApply) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationApply)
	for r.next() {
		r.magic(magicReplicationApply)
		a.Key.read(&r)
		if r.present("messages") {
			a.Messages.Present = true
			a.Messages.Value.Epoch = r.u64("messages.epoch")
			a.Messages.Value.Records = r.messageRecords(a.Messages.Value.Records, nil)
		} else {
			a.Messages = Option[MessageApply]{}
		}
		if r.present("events") {
			a.Events.Present = true
			a.Events.Value.Epoch = r.u64("events.epoch")
			a.Events.Value.Records = r.eventRecords(a.Events.Value.Records, nil)
		} else {
			a.Events = Option[EventApply]{}
		}
		r.end()
	}
	return r.result()
}

// ReplicationApplyOK is the REPLICATION_APPLY_OK reply (op 83, magic FAO1):
// which of the two parts the follower applied.
type ReplicationApplyOK struct {
	MessagesApplied bool
	EventsApplied   bool
}

// AppendTo appends the FAO1 body.
func (a *ReplicationApplyOK) AppendTo(b []byte) []byte {
	b = append(b, magicReplicationApplyOK...)
	b = appendBool(b, a.MessagesApplied)
	return appendBool(b, a.EventsApplied)
}

// Decode parses an FAO1 body.
func (a *ReplicationApplyOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationApplyOK)
	for r.next() {
		r.magic(magicReplicationApplyOK)
		a.MessagesApplied = r.boolean("messages_applied")
		a.EventsApplied = r.boolean("events_applied")
		r.end()
	}
	return r.result()
}

// StateCheckpoint is a queue partition's state at one point of its logs:
// the cursors a follower resumes from after installing it, and the
// storage engine's opaque snapshot of everything before them.
type StateCheckpoint struct {
	MessageEpoch            uint64
	EventEpoch              uint64
	MessageCheckpointOffset uint64
	MessageNextOffset       uint64
	EventNextOffset         uint64
	AppliedEventOffset      uint64
	StateSnapshot           []byte // aliases the decoded buffer
}

func (s *StateCheckpoint) appendTo(b []byte) []byte {
	b = appendU64(b, s.MessageEpoch)
	b = appendU64(b, s.EventEpoch)
	b = appendU64(b, s.MessageCheckpointOffset)
	b = appendU64(b, s.MessageNextOffset)
	b = appendU64(b, s.EventNextOffset)
	b = appendU64(b, s.AppliedEventOffset)
	return appendBytes(b, s.StateSnapshot)
}

func (s *StateCheckpoint) read(r *reader) {
	s.MessageEpoch = r.u64("message_epoch")
	s.EventEpoch = r.u64("event_epoch")
	s.MessageCheckpointOffset = r.u64("message_checkpoint_offset")
	s.MessageNextOffset = r.u64("message_next_offset")
	s.EventNextOffset = r.u64("event_next_offset")
	s.AppliedEventOffset = r.u64("applied_event_offset")
	s.StateSnapshot = r.bytes("state_snapshot")
}

// ReplicationCheckpointExport is the REPLICATION_CHECKPOINT_EXPORT request
// (op 84, magic FCE1): ask the owner for a checkpoint of Key.
type ReplicationCheckpointExport struct {
	Key QueueKey
}

// AppendTo appends the FCE1 body.
func (x *ReplicationCheckpointExport) AppendTo(b []byte) []byte {
	return x.Key.appendTo(append(b, magicReplicationCheckpointExport...))
}

// Decode parses an FCE1 body.
func (x *ReplicationCheckpointExport) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationCheckpointExport)
	for r.next() {
		r.magic(magicReplicationCheckpointExport)
		x.Key.read(&r)
		r.end()
	}
	return r.result()
}

// ReplicationCheckpointExportOK is the REPLICATION_CHECKPOINT_EXPORT_OK
// reply (op 85, magic FCO1) carrying the checkpoint.
type ReplicationCheckpointExportOK struct{ StateCheckpoint }

// AppendTo appends the FCO1 body.
func (x *ReplicationCheckpointExportOK) AppendTo(b []byte) []byte {
	return x.appendTo(append(b, magicReplicationCheckpointExportOK...))
}

// Decode parses an FCO1 body.
func (x *ReplicationCheckpointExportOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationCheckpointExportOK)
	for r.next() {
		r.magic(magicReplicationCheckpointExportOK)
		x.read(&r)
		r.end()
	}
	return r.result()
}

// ReplicationCheckpointInstall is the REPLICATION_CHECKPOINT_INSTALL
// request (op 86, magic FCI1): the follower is to replace its state of Key
// with Checkpoint.
type ReplicationCheckpointInstall struct {
	Key        QueueKey
	Checkpoint StateCheckpoint
}

// AppendTo appends the FCI1 body.
func (x *ReplicationCheckpointInstall) AppendTo(b []byte) []byte {
	b = x.Key.appendTo(append(b, magicReplicationCheckpointInstall...))
	return x.Checkpoint.appendTo(b)
}

// Decode parses an FCI1 body.
func (x *ReplicationCheckpointInstall) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationCheckpointInstall)
	for r.next() {
		r.magic(magicReplicationCheckpointInstall)
		x.Key.read(&r)
		x.Checkpoint.read(&r)
		r.end()
	}
	return r.result()
}

// ReplicationCheckpointInstallOK is the REPLICATION_CHECKPOINT_INSTALL_OK
// reply (op 87, magic FCK1): the cursors the follower now stands at.
type ReplicationCheckpointInstallOK struct {
	MessageNextOffset  uint64
	EventNextOffset    uint64
	AppliedEventOffset uint64
}

// AppendTo appends the FCK1 body.
func (x *ReplicationCheckpointInstallOK) AppendTo(b []byte) []byte {
	b = append(b, magicReplicationCheckpointInstallOK...)
	b = appendU64(b, x.MessageNextOffset)
	b = appendU64(b, x.EventNextOffset)
	return appendU64(b, x.AppliedEventOffset)
}

// Decode parses an FCK1 body.
func (x *ReplicationCheckpointInstallOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationCheckpointInstallOK)
	for r.next() {
		r.magic(magicReplicationCheckpointInstallOK)
		x.MessageNextOffset = r.u64("message_next_offset")
		x.EventNextOffset = r.u64("event_next_offset")
		x.AppliedEventOffset = r.u64("applied_event_offset")
		r.end()
	}
	return r.result()
}

// ReplicationStreamStart is the REPLICATION_STREAM_START request (op 93,
// magic FSS1): open a push stream of Key from the given cursors with an
// initial byte credit. The frame's request id is the stream id that every
// later frame of the stream carries.
type ReplicationStreamStart struct {
	Key            QueueKey
	MessageFrom    uint64
	EventFrom      uint64
	CreditBytes    uint64
	ReporterNodeID Option[string] // the follower's node id
}

// AppendTo appends the FSS1 body.
func (s *ReplicationStreamStart) AppendTo(b []byte) []byte {
	b = s.Key.appendTo(append(b, magicReplicationStreamStart...))
	b = appendU64(b, s.MessageFrom)
	b = appendU64(b, s.EventFrom)
	b = appendU64(b, s.CreditBytes)
	return appendOptStr(b, s.ReporterNodeID)
}

// Decode parses an FSS1 body.
func (s *ReplicationStreamStart) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationStreamStart)
	for r.next() {
		r.magic(magicReplicationStreamStart)
		s.Key.read(&r)
		s.MessageFrom = r.u64("message_from")
		s.EventFrom = r.u64("event_from")
		s.CreditBytes = r.u64("credit_bytes")
		s.ReporterNodeID = r.optStr("reporter_node_id")
		r.end()
	}
	return r.result()
}

// ReplicationStreamProgress is the REPLICATION_STREAM_PROGRESS frame (op
// 95, magic FSP1, the same magic as SUBSCRIBE_STREAM): the follower's
// durable cursors plus credit to add (0 as an idle keepalive).
type ReplicationStreamProgress struct {
	DurableMessageNext uint64
	DurableEventNext   uint64
	CreditAddBytes     uint64
}

// AppendTo appends the FSP1 body.
func (p *ReplicationStreamProgress) AppendTo(b []byte) []byte {
	b = append(b, magicReplicationStreamProgress...)
	b = appendU64(b, p.DurableMessageNext)
	b = appendU64(b, p.DurableEventNext)
	return appendU64(b, p.CreditAddBytes)
}

// Decode parses a REPLICATION_STREAM_PROGRESS FSP1 body.
func (p *ReplicationStreamProgress) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationStreamProgress)
	for r.next() {
		r.magic(magicReplicationStreamProgress)
		p.DurableMessageNext = r.u64("durable_message_next")
		p.DurableEventNext = r.u64("durable_event_next")
		p.CreditAddBytes = r.u64("credit_add_bytes")
		r.end()
	}
	return r.result()
}

// ReplicationStreamReset is the REPLICATION_STREAM_RESET frame (op 96,
// magic FSR1, the same magic as STREAM_REPLICATION_READ_OK): the follower
// rewinds the owner's cursors.
type ReplicationStreamReset struct {
	MessageFrom uint64
	EventFrom   uint64
}

// AppendTo appends the FSR1 body.
func (s *ReplicationStreamReset) AppendTo(b []byte) []byte {
	b = append(b, magicReplicationStreamReset...)
	b = appendU64(b, s.MessageFrom)
	return appendU64(b, s.EventFrom)
}

// Decode parses a REPLICATION_STREAM_RESET FSR1 body.
func (s *ReplicationStreamReset) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationStreamReset)
	for r.next() {
		r.magic(magicReplicationStreamReset)
		s.MessageFrom = r.u64("message_from")
		s.EventFrom = r.u64("event_from")
		r.end()
	}
	return r.result()
}

// StreamEndCode is the u16 code of REPLICATION_STREAM_END. It is a plain
// u16 on the wire, not an enum8, so the decoder keeps any value; a
// receiver should treat a code it does not know like StreamEndError.
type StreamEndCode uint16

const (
	StreamEndClosed             StreamEndCode = 0
	StreamEndError              StreamEndCode = 1
	StreamEndCheckpointRequired StreamEndCode = 2 // fall back to checkpoint install
)

var streamEndCodeNames = []string{"closed", "error", "checkpoint_required"}

func (c StreamEndCode) String() string {
	return enumString(streamEndCodeNames, "StreamEndCode", int(c))
}

// ReplicationStreamEnd is the REPLICATION_STREAM_END frame (op 98, magic
// FSE1): the owner ends the stream.
type ReplicationStreamEnd struct {
	Code    StreamEndCode
	Message string
}

// AppendTo appends the FSE1 body.
func (e *ReplicationStreamEnd) AppendTo(b []byte) []byte {
	b = appendU16(append(b, magicReplicationStreamEnd...), uint16(e.Code))
	return appendStr(b, e.Message)
}

// Decode parses an FSE1 body.
func (e *ReplicationStreamEnd) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReplicationStreamEnd)
	for r.next() {
		r.magic(magicReplicationStreamEnd)
		e.Code = StreamEndCode(r.u16("code"))
		e.Message = r.str("message")
		r.end()
	}
	return r.result()
}
