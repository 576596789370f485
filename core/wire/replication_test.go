package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Tests for the replication bodies (docs/protocol.md#replication-ops).
// Empty lists and empty byte strings are written as nil below because a
// fresh decode yields nil for them.

const maxU64 = math.MaxUint64

func sampleMessages() []MessageRecord {
	return []MessageRecord{
		{Offset: 10, Flags: 0x0102, Headers: []byte("hdr"), Payload: []byte("payload")},
		{Offset: 11},
		{Offset: 12, Flags: 0xffff, Payload: bytes.Repeat([]byte{0xab}, 300)},
	}
}

func sampleEvents() []EventRecord {
	return []EventRecord{{Offset: 100, Payload: []byte("ev")}, {Offset: 101}}
}

func sampleReadOK() ReadOK {
	return ReadOK{
		Messages: MessageRead{Kind: ReadBatch, Batch: MessageBatch{Epoch: 3, RequestedOffset: 9,
			NextOffset: 13, Records: sampleMessages()}},
		Events: EventRead{Kind: ReadCheckpointRequired, Checkpoint: CheckpointRequired{Epoch: 4,
			RequestedOffset: 5, HeadOffset: 50, NextOffset: 102}},
	}
}

func sampleCheckpoint() StateCheckpoint {
	return StateCheckpoint{MessageEpoch: 1, EventEpoch: 2, MessageCheckpointOffset: 3,
		MessageNextOffset: 4, EventNextOffset: 5, AppliedEventOffset: 6, StateSnapshot: []byte("snapshot")}
}

type replCase struct {
	name string
	op   Op
	body Body
}

// replicationCases covers every replication op with typical values, empty
// lists, absent and present-empty options, and maximal integers.
func replicationCases() []replCase {
	maxReq := ReadRequest{Key: QueueKey{Topic: "q", Partition: math.MaxUint32, Group: Some("")},
		MessageFrom: maxU64, EventFrom: maxU64, MaxMessages: math.MaxUint32, MaxEvents: math.MaxUint32,
		MaxBytes: maxU64, MaxWaitMs: math.MaxUint32, ReporterNodeID: Some("")}
	emptyBatches := ReadOK{
		Messages: MessageRead{Batch: MessageBatch{Epoch: maxU64, RequestedOffset: 7, NextOffset: 7}},
		Events:   EventRead{Batch: EventBatch{RequestedOffset: maxU64, NextOffset: maxU64}},
	}
	bothCheckpoints := ReadOK{
		Messages: MessageRead{Kind: ReadCheckpointRequired, Checkpoint: CheckpointRequired{maxU64, maxU64, maxU64, maxU64}},
		Events:   EventRead{Kind: ReadCheckpointRequired},
	}
	edgeBatch := ReadOK{ // first record above requested; last record at 2^64-2
		Messages: MessageRead{Batch: MessageBatch{RequestedOffset: 1, NextOffset: maxU64,
			Records: []MessageRecord{{Offset: maxU64 - 2}, {Offset: maxU64 - 1}}}},
		Events: EventRead{Batch: EventBatch{RequestedOffset: 0, NextOffset: 1000,
			Records: sampleEvents()}},
	}
	cases := []replCase{
		{"read", OpReplicationRead, &ReplicationRead{ReadRequest{Key: QueueKey{Topic: "orders", Partition: 2,
			Group: Some("billing")}, MessageFrom: 10, EventFrom: 20, MaxMessages: 500, MaxEvents: 100,
			MaxBytes: 1 << 20, MaxWaitMs: 1000, ReporterNodeID: Some("node-b")}}},
		{"read_min", OpReplicationRead, &ReplicationRead{}},
		{"read_max", OpReplicationRead, &ReplicationRead{maxReq}},
		{"stream_read", OpStreamReplicationRead, &StreamReplicationRead{ReadRequest{Key: QueueKey{Topic: "events",
			Partition: 1}, MessageFrom: 1, EventFrom: 2, MaxMessages: 3, MaxEvents: 4, MaxBytes: 5,
			ReporterNodeID: Some("n")}}},
		{"stream_read_min", OpStreamReplicationRead, &StreamReplicationRead{}},
	}
	for _, ok := range []struct {
		name string
		v    ReadOK
	}{{"", sampleReadOK()}, {"_empty", emptyBatches}, {"_checkpoints", bothCheckpoints}, {"_edge", edgeBatch}} {
		cases = append(cases,
			replCase{"read_ok" + ok.name, OpReplicationReadOK, &ReplicationReadOK{ok.v}},
			replCase{"stream_batch" + ok.name, OpReplicationStreamBatch, &ReplicationStreamBatch{ok.v}},
			replCase{"stream_read_ok" + ok.name, OpStreamReplicationReadOK, &StreamReplicationReadOK{ok.v}},
		)
	}
	return append(cases,
		replCase{"apply", OpReplicationApply, &ReplicationApply{Key: QueueKey{Topic: "t", Group: Some("g")},
			Messages: Some(MessageApply{Epoch: 3, Records: sampleMessages()}),
			Events:   Some(EventApply{Epoch: 4, Records: sampleEvents()})}},
		replCase{"apply_none", OpReplicationApply, &ReplicationApply{Key: QueueKey{Topic: "t"}}},
		replCase{"apply_empty_lists", OpReplicationApply, &ReplicationApply{Messages: Some(MessageApply{}),
			Events: Some(EventApply{Epoch: maxU64})}},
		// APPLY lists are not batch-checked: descending, duplicate, 2^64-1.
		replCase{"apply_unordered", OpReplicationApply, &ReplicationApply{
			Messages: Some(MessageApply{Records: []MessageRecord{{Offset: 5}, {Offset: 5}, {Offset: 1}, {Offset: maxU64}}}),
			Events:   Some(EventApply{Records: []EventRecord{{Offset: maxU64}, {Offset: 0}}})}},
		replCase{"apply_ok", OpReplicationApplyOK, &ReplicationApplyOK{MessagesApplied: true}},
		replCase{"apply_ok_both", OpReplicationApplyOK, &ReplicationApplyOK{MessagesApplied: true, EventsApplied: true}},
		replCase{"apply_ok_none", OpReplicationApplyOK, &ReplicationApplyOK{}},
		replCase{"export", OpReplicationCheckpointExport, &ReplicationCheckpointExport{Key: QueueKey{Topic: "t", Partition: 9}}},
		replCase{"export_ok", OpReplicationCheckpointExportOK, &ReplicationCheckpointExportOK{sampleCheckpoint()}},
		replCase{"export_ok_empty", OpReplicationCheckpointExportOK, &ReplicationCheckpointExportOK{}},
		replCase{"export_ok_max", OpReplicationCheckpointExportOK, &ReplicationCheckpointExportOK{StateCheckpoint{
			maxU64, maxU64, maxU64, maxU64, maxU64, maxU64, []byte{0}}}},
		replCase{"install", OpReplicationCheckpointInstall, &ReplicationCheckpointInstall{
			Key: QueueKey{Topic: "t", Group: Some("g")}, Checkpoint: sampleCheckpoint()}},
		replCase{"install_ok", OpReplicationCheckpointInstallOK, &ReplicationCheckpointInstallOK{1, 2, maxU64}},
		replCase{"stream_start", OpReplicationStreamStart, &ReplicationStreamStart{Key: QueueKey{Topic: "t",
			Partition: 1, Group: Some("g")}, MessageFrom: 1, EventFrom: 2, CreditBytes: 4 << 20,
			ReporterNodeID: Some("node-b")}},
		replCase{"stream_start_min", OpReplicationStreamStart, &ReplicationStreamStart{}},
		replCase{"stream_progress", OpReplicationStreamProgress, &ReplicationStreamProgress{1, 2, 3}},
		replCase{"stream_progress_max", OpReplicationStreamProgress, &ReplicationStreamProgress{maxU64, maxU64, maxU64}},
		replCase{"stream_reset", OpReplicationStreamReset, &ReplicationStreamReset{MessageFrom: 7, EventFrom: maxU64}},
		replCase{"stream_stop", OpReplicationStreamStop, &Empty{}},
		replCase{"stream_end", OpReplicationStreamEnd, &ReplicationStreamEnd{Code: StreamEndCheckpointRequired,
			Message: "follower too far behind"}},
		replCase{"stream_end_closed", OpReplicationStreamEnd, &ReplicationStreamEnd{}},
		replCase{"stream_end_unknown_code", OpReplicationStreamEnd, &ReplicationStreamEnd{Code: 0xffff, Message: "é"}},
	)
}

// TestReplicationRoundTrip: every body decodes (through DecodeBody, so
// NewBody dispatches it) to the value it was encoded from, AppendTo keeps
// the caller's prefix, and decoding into a value holding another body of
// the same type gives the same result.
func TestReplicationRoundTrip(t *testing.T) {
	cases := replicationCases()
	seen := map[Op]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen[c.op] = true
			enc := c.body.AppendTo(nil)
			got, err := DecodeBody(c.op, enc)
			if err != nil {
				t.Fatalf("decode %x: %v", enc, err)
			}
			if !reflect.DeepEqual(got, c.body) {
				t.Fatalf("decode(encode(x)) != x:\n got %#v\nwant %#v", got, c.body)
			}
			if out := got.AppendTo([]byte("prefix")); !bytes.Equal(out, append([]byte("prefix"), enc...)) {
				t.Fatalf("AppendTo with a prefix: %x", out)
			}
			for _, other := range cases {
				if reflect.TypeOf(other.body) != reflect.TypeOf(c.body) {
					continue
				}
				reused, _ := NewBody(c.op)
				if err := reused.Decode(other.body.AppendTo(nil)); err != nil {
					t.Fatalf("prior %s: %v", other.name, err)
				}
				if err := reused.Decode(enc); err != nil {
					t.Fatal(err)
				}
				if !sameValue(reflect.ValueOf(reused), reflect.ValueOf(got)) {
					t.Fatalf("decode after %s differs:\n%#v\n%#v", other.name, reused, got)
				}
			}
		})
	}
	for op := OpReplicationRead; op <= OpStreamReplicationReadOK; op++ {
		if op.NodeOnly() && !seen[op] {
			t.Errorf("no round-trip case for %v", op)
		}
	}
}

// hexv decodes hex written with spaces and newlines between fields.
func hexv(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplicationByteVectors pins field order with bytes written by hand
// from the layouts of docs/protocol.md#replication-ops. Every field has a
// distinct value, so two swapped fields fail.
func TestReplicationByteVectors(t *testing.T) {
	cases := []struct {
		name string
		op   Op
		body Body
		hex  string
	}{
		{"apply with one MessageRecord", OpReplicationApply, &ReplicationApply{
			Key:      QueueKey{Topic: "q", Partition: 7},
			Messages: Some(MessageApply{Epoch: 5, Records: []MessageRecord{{Offset: 0x0102030405060708, Flags: 0x0a0b, Headers: []byte("h1"), Payload: []byte("xyz")}}}),
			Events:   Some(EventApply{Epoch: 6, Records: []EventRecord{{Offset: 0x11, Payload: []byte("e")}}}),
		}, `
			46524131                  magic FRA1
			00000001 71               topic "q"
			00000007                  partition 7
			00                        group absent
			01                        messages present
			0000000000000005          epoch 5
			00000001                  one MessageRecord:
			0102030405060708            offset
			0a0b                        flags
			00000002 6831               headers "h1"
			00000003 78797a             payload "xyz"
			01                        events present
			0000000000000006          epoch 6
			00000001                  one EventRecord:
			0000000000000011            offset
			00000001 65                 payload "e"`},
		{"REPLICATION_READ", OpReplicationRead, &ReplicationRead{ReadRequest{
			Key:         QueueKey{Topic: "t", Partition: 2, Group: Some("g")},
			MessageFrom: 0x10, EventFrom: 0x20, MaxMessages: 0x30, MaxEvents: 0x40, MaxBytes: 0x50,
			MaxWaitMs: 0x60, ReporterNodeID: Some("n1"),
		}}, `
			46525131                  magic FRQ1
			00000001 74               topic "t"
			00000002                  partition
			01 00000001 67            group "g"
			0000000000000010          message_from
			0000000000000020          event_from
			00000030                  max_messages
			00000040                  max_events
			0000000000000050          max_bytes
			00000060                  max_wait_ms
			01 00000002 6e31          reporter_node_id "n1"`},
		{"STREAM_REPLICATION_READ", OpStreamReplicationRead, &StreamReplicationRead{ReadRequest{
			Key:         QueueKey{Topic: "s", Partition: 1},
			MessageFrom: 0x10, EventFrom: 0x20, MaxMessages: 0x30, MaxEvents: 0x40, MaxBytes: 0x50,
		}}, `
			46535131                  magic FSQ1
			00000001 73               topic "s"
			00000001                  partition
			00                        group absent (always)
			0000000000000010          message_from
			0000000000000020          event_from
			00000030                  max_messages
			00000040                  max_events
			0000000000000050          max_bytes
			00000000                  max_wait_ms 0: answer at once
			00                        reporter_node_id absent`},
		{"REPLICATION_READ_OK", OpReplicationReadOK, &ReplicationReadOK{ReadOK{
			Messages: MessageRead{Batch: MessageBatch{Epoch: 1, RequestedOffset: 2, NextOffset: 4,
				Records: []MessageRecord{{Offset: 3, Flags: 1, Payload: []byte("p")}}}},
			Events: EventRead{Kind: ReadCheckpointRequired, Checkpoint: CheckpointRequired{
				Epoch: 5, RequestedOffset: 6, HeadOffset: 7, NextOffset: 8}},
		}}, `
			46525232                  magic FRR2
			00                        messages: kind batch
			0000000000000001            epoch
			0000000000000002            requested_offset
			0000000000000004            next_offset
			00000001                    one record:
			0000000000000003              offset
			0001                          flags
			00000000                      headers empty
			00000001 70                   payload "p"
			01                        events: kind checkpoint required
			0000000000000005            epoch
			0000000000000006            requested_offset
			0000000000000007            head_offset
			0000000000000008            next_offset`},
		{"REPLICATION_STREAM_START", OpReplicationStreamStart, &ReplicationStreamStart{
			Key:         QueueKey{Topic: "t", Partition: 3, Group: Some("g")},
			MessageFrom: 0x11, EventFrom: 0x22, CreditBytes: 0x33, ReporterNodeID: Some("nb"),
		}, `
			46535331                  magic FSS1
			00000001 74               topic "t"
			00000003                  partition
			01 00000001 67            group "g"
			0000000000000011          message_from
			0000000000000022          event_from
			0000000000000033          credit_bytes
			01 00000002 6e62          reporter_node_id "nb"`},
		{"REPLICATION_STREAM_PROGRESS", OpReplicationStreamProgress, &ReplicationStreamProgress{
			DurableMessageNext: 0x0101, DurableEventNext: 0x0202, CreditAddBytes: 0x0303,
		}, `
			46535031                  magic FSP1
			0000000000000101          durable_message_next
			0000000000000202          durable_event_next
			0000000000000303          credit_add_bytes`},
		{"REPLICATION_STREAM_RESET", OpReplicationStreamReset, &ReplicationStreamReset{MessageFrom: 1, EventFrom: 2}, `
			46535231                  magic FSR1
			0000000000000001          message_from
			0000000000000002          event_from`},
		{"REPLICATION_STREAM_END", OpReplicationStreamEnd, &ReplicationStreamEnd{
			Code: StreamEndCheckpointRequired, Message: "gone",
		}, `
			46534531                  magic FSE1
			0002                      code 2: checkpoint required
			00000004 676f6e65         message "gone"`},
		{"REPLICATION_APPLY_OK", OpReplicationApplyOK, &ReplicationApplyOK{EventsApplied: true}, `
			46414f31                  magic FAO1
			00                        messages_applied false
			01                        events_applied true`},
		{"REPLICATION_CHECKPOINT_INSTALL", OpReplicationCheckpointInstall, &ReplicationCheckpointInstall{
			Key: QueueKey{Topic: "t"}, Checkpoint: StateCheckpoint{1, 2, 3, 4, 5, 6, []byte{0xee}},
		}, `
			46434931                  magic FCI1
			00000001 74 00000000 00   queue key "t", 0, no group
			0000000000000001          message_epoch
			0000000000000002          event_epoch
			0000000000000003          message_checkpoint_offset
			0000000000000004          message_next_offset
			0000000000000005          event_next_offset
			0000000000000006          applied_event_offset
			00000001 ee               state_snapshot`},
		{"REPLICATION_CHECKPOINT_INSTALL_OK", OpReplicationCheckpointInstallOK, &ReplicationCheckpointInstallOK{7, 8, 9}, `
			46434b31                  magic FCK1
			0000000000000007          message_next_offset
			0000000000000008          event_next_offset
			0000000000000009          applied_event_offset`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Strip the field comments: keep only hex tokens.
			var toks []string
			for _, line := range strings.Split(c.hex, "\n") {
				for _, f := range strings.Fields(line) {
					if _, err := hex.DecodeString(f); err != nil {
						break
					}
					toks = append(toks, f)
				}
			}
			want := hexv(t, strings.Join(toks, " "))
			if got := c.body.AppendTo(nil); !bytes.Equal(got, want) {
				t.Fatalf("encoding:\n got %x\nwant %x", got, want)
			}
			got, err := DecodeBody(c.op, want)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.body) {
				t.Fatalf("decoded %#v\nwant %#v", got, c.body)
			}
		})
	}
}

// readOKBody builds the bytes of a ReadOK with the given message batch
// (raw, unvalidated) and an empty event batch, or the reverse when
// events is set.
func readOKBody(magic string, events bool, requested, next uint64, offsets ...uint64) []byte {
	batch := binary.BigEndian.AppendUint64(nil, 9) // epoch
	batch = binary.BigEndian.AppendUint64(batch, requested)
	batch = binary.BigEndian.AppendUint64(batch, next)
	batch = binary.BigEndian.AppendUint32(batch, uint32(len(offsets)))
	for _, o := range offsets {
		batch = binary.BigEndian.AppendUint64(batch, o)
		if !events {
			batch = append(batch, 0, 0) // flags
			batch = append(batch, 0, 0, 0, 0)
		}
		batch = append(batch, 0, 0, 0, 1, 'p')
	}
	empty := make([]byte, 1+8*3+4) // kind batch, zero cursors, no records
	b := []byte(magic)
	if events {
		return append(append(append(b, empty...), 0), batch...)
	}
	return append(append(append(b, 0), batch...), empty...)
}

// TestReplicationBatchRules breaks each batch rule once, in the message
// and in the event half, for the three read answers; each must fail with
// ErrBadBatch at the offending field. The same record lists inside a
// REPLICATION_APPLY decode fine.
func TestReplicationBatchRules(t *testing.T) {
	bad := []struct {
		name            string
		requested, next uint64
		offsets         []uint64
		field           string // without the messages./events. prefix
		at              uint64 // the u64 found at the error offset
	}{
		{"first below requested", 10, 12, []uint64{9, 10, 11}, "offset", 9},
		{"gap", 10, 13, []uint64{10, 12}, "offset", 12},
		{"duplicate", 10, 12, []uint64{10, 10}, "offset", 10},
		{"descending", 10, 12, []uint64{11, 10}, "offset", 10},
		{"next below last+1", 10, 11, []uint64{10, 11}, "next_offset", 11},
		{"next way below", 10, 0, []uint64{10}, "next_offset", 0},
		{"empty, next below requested", 10, 9, nil, "next_offset", 9},
		{"record at 2^64-1", maxU64, maxU64, []uint64{maxU64}, "offset", maxU64},
		{"successor at 2^64-1", maxU64 - 1, maxU64, []uint64{maxU64 - 1, maxU64}, "offset", maxU64},
	}
	good := []struct {
		name            string
		requested, next uint64
		offsets         []uint64
	}{
		{"first above requested", 10, 20, []uint64{15, 16}},
		{"next beyond last+1", 0, 100, []uint64{0, 1, 2}},
		{"next exactly last+1", 5, 8, []uint64{5, 6, 7}},
		{"empty, next == requested", 10, 10, nil},
		{"empty at 2^64-1", maxU64, maxU64, nil},
		{"last at 2^64-2", maxU64 - 2, maxU64, []uint64{maxU64 - 2, maxU64 - 1}},
	}
	readOKs := []struct {
		op    Op
		magic string
	}{{OpReplicationReadOK, "FRR2"}, {OpReplicationStreamBatch, "FSB1"}, {OpStreamReplicationReadOK, "FSR1"}}
	for _, half := range []string{"messages", "events"} {
		events := half == "events"
		for _, ro := range readOKs {
			for _, c := range bad {
				b := readOKBody(ro.magic, events, c.requested, c.next, c.offsets...)
				_, err := DecodeBody(ro.op, b)
				var de *DecodeError
				if !errors.As(err, &de) || !errors.Is(err, ErrBadBatch) {
					t.Errorf("%v %s %s: %v, want ErrBadBatch", ro.op, half, c.name, err)
					continue
				}
				if de.Op != ro.op || de.Field != half+"."+c.field || de.Offset+8 > len(b) ||
					binary.BigEndian.Uint64(b[de.Offset:]) != c.at {
					t.Errorf("%v %s %s: %v (offset %d)", ro.op, half, c.name, err, de.Offset)
				}
			}
			for _, c := range good {
				b := readOKBody(ro.magic, events, c.requested, c.next, c.offsets...)
				got, err := DecodeBody(ro.op, b)
				if err != nil {
					t.Errorf("%v %s %s: %v", ro.op, half, c.name, err)
					continue
				}
				if out := got.AppendTo(nil); !bytes.Equal(out, b) {
					t.Errorf("%v %s %s: round trip %x", ro.op, half, c.name, out)
				}
			}
		}
		// REPLICATION_APPLY takes the same lists unchecked.
		for _, c := range bad {
			msgs := make([]MessageRecord, len(c.offsets))
			evs := make([]EventRecord, len(c.offsets))
			for i, o := range c.offsets {
				msgs[i] = MessageRecord{Offset: o, Payload: []byte("p")}
				evs[i] = EventRecord{Offset: o, Payload: []byte("p")}
			}
			if len(c.offsets) == 0 {
				msgs, evs = nil, nil
			}
			a := &ReplicationApply{Key: QueueKey{Topic: "t"}}
			if events {
				a.Events = Some(EventApply{Epoch: c.next, Records: evs})
			} else {
				a.Messages = Some(MessageApply{Epoch: c.next, Records: msgs})
			}
			got, err := DecodeBody(OpReplicationApply, a.AppendTo(nil))
			if err != nil {
				t.Errorf("APPLY %s %s: %v", half, c.name, err)
			} else if !reflect.DeepEqual(got, a) {
				t.Errorf("APPLY %s %s: %#v", half, c.name, got)
			}
		}
	}
}

// TestReplicationStrictness: unknown read kinds, bad bools and option
// tags, a group on STREAM_REPLICATION_READ, wrong and colliding magics,
// and trailing bytes are all malformed.
func TestReplicationStrictness(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	readOK := readOKBody("FRR2", false, 0, 0)
	kind2 := bytes.Clone(readOK)
	kind2[4] = 2
	de := decodeErr(t, OpReplicationReadOK, kind2, ErrBadEnum)
	if de.Field != "messages.kind" || de.Offset != 4 {
		t.Errorf("kind: %v", de)
	}
	kind2 = bytes.Clone(readOK)
	kind2[4+29] = 0xff
	if de := decodeErr(t, OpReplicationStreamBatch, append([]byte("FSB1"), kind2[4:]...), ErrBadEnum); de.Field != "events.kind" || de.Offset != 33 {
		t.Errorf("events kind: %v", de)
	}

	applyOK := (&ReplicationApplyOK{}).AppendTo(nil)
	applyOK[5] = 2
	decodeErr(t, OpReplicationApplyOK, applyOK, ErrBadBool)
	apply := (&ReplicationApply{}).AppendTo(nil) // FRA1, "", 0, group, messages, events
	apply[len(apply)-2] = 2
	decodeErr(t, OpReplicationApply, apply, ErrBadOptionTag)

	// STREAM_REPLICATION_READ: a present group is rejected at its tag,
	// and the encoder never writes one.
	withGroup := &ReplicationRead{ReadRequest{Key: QueueKey{Topic: "s", Group: Some("g")}, ReporterNodeID: Some("n")}}
	fsq := append([]byte("FSQ1"), withGroup.AppendTo(nil)[4:]...)
	if de := decodeErr(t, OpStreamReplicationRead, fsq, ErrBadOptionTag); de.Field != "group" || de.Offset != 4+5+4 {
		t.Errorf("group: %v", de)
	}
	sr := &StreamReplicationRead{withGroup.ReadRequest}
	got, err := DecodeBody(OpStreamReplicationRead, sr.AppendTo(nil))
	if err != nil || got.(*StreamReplicationRead).Key.Group.Present {
		t.Errorf("FSQ1 with a group set: %v %#v", err, got)
	}

	// Magic collisions: the op picks the body. SUBSCRIBE's FSB1 is not a
	// stream batch and a stream batch is not a SUBSCRIBE; FSR1 of
	// STREAM_REPLICATION_READ_OK is not a REPLICATION_STREAM_RESET.
	batch := (&ReplicationStreamBatch{sampleReadOK()}).AppendTo(nil)
	if _, err := DecodeBody(OpSubscribe, batch); err == nil {
		t.Error("stream batch decoded as SUBSCRIBE")
	}
	sub := (&Subscribe{Topic: "t"}).AppendTo(nil)
	if _, err := DecodeBody(OpReplicationStreamBatch, sub); err == nil {
		t.Error("SUBSCRIBE decoded as a stream batch")
	}
	progress := (&ReplicationStreamProgress{}).AppendTo(nil)
	if _, err := DecodeBody(OpSubscribeStream, progress); err == nil {
		t.Error("stream progress decoded as SUBSCRIBE_STREAM")
	}
	readOK100 := (&StreamReplicationReadOK{sampleReadOK()}).AppendTo(nil)
	if _, err := DecodeBody(OpReplicationStreamReset, readOK100); !errors.Is(err, ErrTrailingBytes) {
		t.Errorf("read answer as a reset: %v", err)
	}
	reset := (&ReplicationStreamReset{}).AppendTo(nil)
	if _, err := DecodeBody(OpStreamReplicationReadOK, reset); err == nil {
		t.Error("reset decoded as a read answer")
	}

	for _, c := range replicationCases() {
		b := c.body.AppendTo(nil)
		decodeErr(t, c.op, append(bytes.Clone(b), 0), ErrTrailingBytes)
		if len(b) >= 4 {
			decodeErr(t, c.op, cat([]byte("XXXX"), b[4:]), ErrBadMagic)
		}
	}
}

// TestReplicationTruncation cuts every valid body at every byte: each
// prefix fails as truncated, with an offset inside the prefix.
func TestReplicationTruncation(t *testing.T) {
	for _, c := range replicationCases() {
		full := c.body.AppendTo(nil)
		for n := 0; n < len(full); n++ {
			_, err := DecodeBody(c.op, full[:n])
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrTruncated) || de.Offset > n || de.Op != c.op {
				t.Fatalf("%s cut at %d of %d: %v", c.name, n, len(full), err)
			}
		}
	}
}

// TestReplicationHugeCounts: a list count or length of 2^32-1 in a small
// body fails as truncated before anything that size is allocated.
func TestReplicationHugeCounts(t *testing.T) {
	ff := []byte{0xff, 0xff, 0xff, 0xff}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	key := []byte{0, 0, 0, 1, 't', 0, 0, 0, 0, 0} // "t", partition 0, no group
	cursors := make([]byte, 24)                   // epoch, requested, next
	emptyBatch := cat([]byte{0}, cursors, make([]byte, 4))
	cases := []struct {
		name string
		op   Op
		body []byte
	}{
		{"read_ok messages", OpReplicationReadOK, cat([]byte("FRR2"), []byte{0}, cursors, ff, make([]byte, 20))},
		{"read_ok events", OpReplicationReadOK, cat([]byte("FRR2"), emptyBatch, []byte{0}, cursors, ff, make([]byte, 12))},
		{"stream_batch headers", OpReplicationStreamBatch, cat([]byte("FSB1"), []byte{0}, cursors, []byte{0, 0, 0, 1}, make([]byte, 10), ff, make([]byte, 4))},
		{"stream_read_ok payload", OpStreamReplicationReadOK, cat([]byte("FSR1"), emptyBatch, []byte{0}, cursors, []byte{0, 0, 0, 1}, make([]byte, 8), ff)},
		{"apply messages", OpReplicationApply, cat([]byte("FRA1"), key, []byte{1}, make([]byte, 8), ff, make([]byte, 18))},
		{"apply events", OpReplicationApply, cat([]byte("FRA1"), key, []byte{0, 1}, make([]byte, 8), ff, make([]byte, 12))},
		{"apply topic", OpReplicationApply, cat([]byte("FRA1"), ff, make([]byte, 20))},
		{"snapshot", OpReplicationCheckpointExportOK, cat([]byte("FCO1"), make([]byte, 48), ff, make([]byte, 8))},
		{"read reporter", OpReplicationRead, cat([]byte("FRQ1"), key, make([]byte, 36), []byte{1}, ff)},
		{"stream_end message", OpReplicationStreamEnd, cat([]byte("FSE1"), []byte{0, 1}, ff, make([]byte, 8))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.body) > 96 {
				t.Fatalf("body is %d bytes; keep crafted bodies small", len(c.body))
			}
			b, _ := NewBody(c.op)
			if err := b.Decode(c.body); !errors.Is(err, ErrTruncated) {
				t.Fatalf("got %v, want truncated", err)
			}
			allocs, n := measure(50, func() {
				b, _ := NewBody(c.op)
				_ = b.Decode(c.body)
			})
			if n > 4096 {
				t.Errorf("%d bytes (%v allocs) allocated per decode", n, allocs)
			}
		})
	}
	// Overwriting every 4-byte window of every sample with large counts
	// keeps allocation proportional to the body.
	for _, c := range replicationCases() {
		in := c.body.AppendTo(nil)
		for i := 4; i+4 <= len(in); i++ {
			for _, v := range [][]byte{ff, {0x00, 0x00, 0x10, 0x00}, {0x7f, 0xff, 0xff, 0xf0}} {
				b := bytes.Clone(in)
				copy(b[i:], v)
				_, n := measure(2, func() { _, _ = DecodeBody(c.op, b) })
				if limit := uint64(2048 + 64*len(b)); n > limit {
					t.Errorf("%s with %x at %d: %d bytes allocated (limit %d)", c.name, v, i, n, limit)
				}
			}
		}
	}
}

// TestReplicationAllocations: encoding into a buffer with room allocates
// nothing; decoding a read answer into a reused value allocates nothing
// (it has no strings) and its record bytes alias the input.
func TestReplicationAllocations(t *testing.T) {
	body := &ReplicationStreamBatch{sampleReadOK()}
	buf := make([]byte, 0, 4096)
	if a := testing.AllocsPerRun(100, func() { buf = AppendFrame(buf[:0], OpReplicationStreamBatch, 1, body) }); a != 0 {
		t.Errorf("encode REPLICATION_STREAM_BATCH: %v allocs", a)
	}
	apply := &ReplicationApply{Key: QueueKey{Topic: "t"}, Messages: Some(MessageApply{Records: sampleMessages()}),
		Events: Some(EventApply{Records: sampleEvents()})}
	if a := testing.AllocsPerRun(100, func() { buf = apply.AppendTo(buf[:0]) }); a != 0 {
		t.Errorf("encode REPLICATION_APPLY: %v allocs", a)
	}
	in := body.AppendTo(nil)
	var got ReplicationStreamBatch
	if a := testing.AllocsPerRun(100, func() { _ = got.Decode(in) }); a != 0 {
		t.Errorf("decode REPLICATION_STREAM_BATCH into a reused value: %v allocs", a)
	}
	p := got.Messages.Batch.Records[0].Payload
	if i := bytes.Index(in, []byte("payload")); i < 0 || &p[0] != &in[i] || cap(p) != len(p) {
		t.Error("MessageRecord.Payload does not alias the input with a capped capacity")
	}
}
