package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func decodeErr(t *testing.T, op Op, b []byte, want error) *DecodeError {
	t.Helper()
	_, err := DecodeBody(op, b)
	if !errors.Is(err, want) {
		t.Fatalf("DecodeBody(%v, %x) = %v, want %v", op, b, err, want)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %T is not a *DecodeError", err)
	}
	if de.Op != op {
		t.Fatalf("DecodeError.Op = %v, want %v", de.Op, op)
	}
	return de
}

func TestDecodeErrorMessage(t *testing.T) {
	e := &DecodeError{Op: OpPublish, Field: "headers", Offset: 37, Err: ErrTruncated}
	if got, want := e.Error(), `malformed PUBLISH: field "headers": truncated at byte 37`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	e = &DecodeError{Op: OpAck, Offset: 9, Err: ErrTrailingBytes}
	if got, want := e.Error(), `malformed ACK: trailing bytes at byte 9`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestBadMagic(t *testing.T) {
	vecs := loadVectors(t)
	for name, exp := range expectedVectors {
		b := bytes.Clone(vecs[name])
		b[3] ^= 0x40
		de := decodeErr(t, exp.op, b, ErrBadMagic)
		if de.Field != "magic" || de.Offset != 0 {
			t.Errorf("%s: %v", name, de)
		}
	}
	// FER1 is shared: the error names the op it was decoded for.
	de := decodeErr(t, OpSubscribeErr, []byte("FER2\x01\x99\x00\x00\x00\x00"), ErrBadMagic)
	if !strings.Contains(de.Error(), "SUBSCRIBE_ERR") {
		t.Errorf("message %q does not name SUBSCRIBE_ERR", de.Error())
	}
	// Magic collisions: FSB1 is SUBSCRIBE's magic, not a PUBLISH one.
	decodeErr(t, OpPublish, vecs["subscribe"], ErrBadMagic)
	// A body shorter than a magic is truncated.
	decodeErr(t, OpPublish, []byte("FP"), ErrTruncated)
}

func TestUnknownAndUnsupportedOps(t *testing.T) {
	for _, op := range []Op{0, 4, 88, 105, 199, 204, 256, 0xffff} {
		if _, err := DecodeBody(op, []byte("FPB1")); !errors.Is(err, ErrUnknownOp) {
			t.Errorf("op %d: %v", op, err)
		}
		if _, ok := NewBody(op); ok {
			t.Errorf("NewBody(%d) succeeded", op)
		}
	}
	// The replication ops have codecs now: an empty body is truncated
	// (REPLICATION_STREAM_STOP's empty body is the whole body), never
	// ErrUnsupportedOp.
	for op := OpReplicationRead; op <= OpStreamReplicationReadOK; op++ {
		if !op.Known() || !op.NodeOnly() {
			continue // 88, 89 are unassigned; 90-92 are client-facing
		}
		_, err := DecodeBody(op, nil)
		switch {
		case op == OpReplicationStreamStop:
			if err != nil {
				t.Errorf("%v: %v", op, err)
			}
		case !errors.Is(err, ErrTruncated):
			t.Errorf("%v: %v, want truncated", op, err)
		}
	}
	if _, err := DecodeBody(Op(123), nil); err == nil || err.Error() != "unknown opcode 123" {
		t.Errorf("message: %v", err)
	}
}

func TestTrailingBytes(t *testing.T) {
	vecs := loadVectors(t)
	for name, exp := range expectedVectors {
		b := append(bytes.Clone(vecs[name]), 0xAA)
		de := decodeErr(t, exp.op, b, ErrTrailingBytes)
		if de.Offset != len(b)-1 {
			t.Errorf("%s: trailing offset %d, want %d", name, de.Offset, len(b)-1)
		}
	}
	for _, op := range []Op{OpPing, OpPong, OpAuthOK, OpReplicationStreamStop} {
		decodeErr(t, op, []byte{0}, ErrTrailingBytes)
	}
}

// TestFieldViolations flips one byte of a vector and checks the exact
// sentinel, field and offset reported.
func TestFieldViolations(t *testing.T) {
	vecs := loadVectors(t)
	cases := []struct {
		vector string
		op     Op
		at     int
		val    byte
		want   error
		field  string
	}{
		// publish: magic 0-3, topic len 4-7 "orders" 8-13, group tag 14.
		{"publish", OpPublish, 14, 2, ErrBadOptionTag, "group"},
		// ... group len 15-18 "g" 19, partition 20-23, require_confirm 24.
		{"publish", OpPublish, 24, 2, ErrBadBool, "require_confirm"},
		{"publish", OpPublish, 25, 5, ErrBadEnum, "content_type"},
		{"publish", OpPublish, 8, 0xff, ErrInvalidUTF8, "topic"},
		// subscribe_min: topic 4-8, partition 9-12, group tag 13, prefetch 14-17.
		{"subscribe_min", OpSubscribe, 18, 2, ErrBadBool, "auto_ack"},
		{"subscribe_min", OpSubscribe, 19, 7, ErrBadOptionTag, "consumer_group"},
		{"hello_ok", OpHelloOK, 54, 5, ErrBadEnum, "resume_outcome"},
		{"hello_no_resume", OpHello, 16, 2, ErrBadOptionTag, "resume"},
		{"declare_plexus_min", OpDeclarePlexus, 10, 3, ErrBadEnum, "durability"},
		{"reconcile_client", OpReconcileClient, 4, 2, ErrBadEnum, "policy"},
		{"subscribe_stream_min", OpSubscribeStream, 14, 5, ErrBadEnum, "start"},
		// declare: ... "g" at 14, dlq tag 15, dlq kind 16.
		{"declare", OpDeclareQueue, 16, 3, ErrBadEnum, "dlq_policy"},
		{"nack_no_nb", OpNack, 18, 2, ErrBadBool, "requeue"},
		// reconcile_result: action of entry 1 at 4+4+1+26+1 = 36.
		{"reconcile_result", OpReconcileResult, 36, 4, ErrBadEnum, "action"},
		{"reconcile_result", OpReconcileResult, 8, 2, ErrBadOptionTag, "client"},
		{"topology_req", OpTopology, 4, 2, ErrBadOptionTag, "topic"},
		{"going_away", OpGoingAway, 16, 0xc0, ErrInvalidUTF8, "message"},
	}
	for _, c := range cases {
		b := bytes.Clone(vecs[c.vector])
		b[c.at] = c.val
		de := decodeErr(t, c.op, b, c.want)
		if de.Field != c.field {
			t.Errorf("%s[%d]=%d: field %q, want %q (%v)", c.vector, c.at, c.val, de.Field, c.field, de)
		}
	}
	// ContentType custom needs its string; enum failure offset is the tag.
	b := bytes.Clone(vecs["publish"])
	b[25] = 9
	if de := decodeErr(t, OpPublish, b, ErrBadEnum); de.Offset != 25 {
		t.Errorf("offset %d, want 25", de.Offset)
	}
	// Present-empty and absent strings stay distinct through a round trip.
	for _, g := range []Option[string]{{}, Some("")} {
		in := &Ack{Topic: "t", Group: g}
		var out Ack
		if err := out.Decode(in.AppendTo(nil)); err != nil || out.Group != g {
			t.Errorf("group %+v decoded as %+v (%v)", g, out.Group, err)
		}
	}
}

// TestEveryPrefix decodes every proper prefix of every vector: each must
// fail cleanly (never panic), as truncated — or, for a cut exactly before a
// tolerant tail, succeed.
func TestEveryPrefix(t *testing.T) {
	vecs := loadVectors(t)
	for name, exp := range expectedVectors {
		full := vecs[name]
		for n := 0; n < len(full); n++ {
			got, err := DecodeBody(exp.op, full[:n])
			if err == nil {
				if !bytes.HasPrefix(got.AppendTo(nil), full[:n]) || !hasTolerantTail(exp.op) {
					t.Errorf("%s: prefix of %d bytes decoded", name, n)
				}
				continue
			}
			if !errors.Is(err, ErrTruncated) {
				t.Errorf("%s: prefix of %d bytes: %v, want truncated", name, n, err)
			}
		}
	}
}

func hasTolerantTail(op Op) bool {
	return op == OpPublish || op == OpDeclareQueue || op == OpReconcileResult
}

func TestCodeRetryable(t *testing.T) {
	retry := map[uint16]bool{
		CodeUnsupportedVersion: false, CodeBadRequest: false, CodeUnauthorized: false,
		CodeForbidden: false, CodeNotFound: false, CodeConflict: true, CodePayloadTooLarge: false,
		CodeTLSRequired: false, CodeInternal: true, CodeUnavailable: true, CodeOutcomeUnknown: true,
		0: false, 499: false, 501: true, 0xffff: true,
	}
	for code, want := range retry {
		if CodeRetryable(code) != want {
			t.Errorf("CodeRetryable(%d) = %v, want %v", code, !want, want)
		}
	}
}
