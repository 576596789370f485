package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// One fuzz target per decoder family. Each is seeded from the matching
// vectors (when the vector file is present), the zero value's encoding, and
// a few hand-made bodies. The shared property, checked by fuzzBody:
//
//   - Decode never panics; failures are *DecodeError with a sane offset;
//   - decoding into a value that already holds another body gives the same
//     result as decoding into a fresh one (no stale fields);
//   - if Decode succeeds, AppendTo reproduces the input exactly, except when
//     the input omitted a tolerant tail: then the re-encoding is the
//     input plus the default tail, and decoding it gives the same value.

type bodyPtr[T any] interface {
	*T
	Body
}

func fuzzBody[T any, P bodyPtr[T]](f *testing.F, seeds ...Encoder) {
	f.Helper()
	want := reflect.TypeOf(P(nil))
	var first []byte
	add := func(b []byte) {
		if first == nil {
			first = b
		}
		f.Add(b)
	}
	if vecs, _, err := readVectors(); err == nil {
		for _, name := range sortedNames(vecs) {
			if exp, ok := expectedVectors[name]; ok && reflect.TypeOf(exp.want) == want {
				add(vecs[name])
				add(vecs[name][:len(vecs[name])-1])
			}
		}
	}
	for _, s := range seeds {
		add(s.AppendTo(nil))
	}
	add(P(new(T)).AppendTo(nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkBody[T, P](t, in, first)
	})
}

func checkBody[T any, P bodyPtr[T]](t *testing.T, in, prior []byte) {
	x := P(new(T))
	err := x.Decode(in)

	reused := P(new(T))
	_ = reused.Decode(prior)
	errReused := reused.Decode(in)
	if (err == nil) != (errReused == nil) {
		t.Fatalf("fresh decode: %v; reused decode: %v", err, errReused)
	}
	if err != nil {
		var de *DecodeError
		if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(in) || de.Err == nil {
			t.Fatalf("bad error %#v", err)
		}
		_ = de.Error()
		return
	}
	if !sameValue(reflect.ValueOf(x), reflect.ValueOf(reused)) {
		t.Fatalf("decode into a used value differs from a fresh decode:\n%#v\n%#v", reused, x)
	}
	out := x.AppendTo(nil)
	y := P(new(T))
	if err := y.Decode(out); err != nil {
		t.Fatalf("re-decoding own encoding %x: %v", out, err)
	}
	if !bytes.Equal(out, in) {
		if !tailOmitted(any(x), in, out) {
			t.Fatalf("round trip changed the body:\n in %x\nout %x", in, out)
		}
		if rr, ok := any(x).(*ReconcileResult); ok {
			rr.CodesPresent = true
		}
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("decode(encode(x)) != x:\n%#v\n%#v", x, y)
	}
}

// sameValue is reflect.DeepEqual except that a nil slice equals an empty
// one: decoding into a used value keeps slice capacity (non-nil, empty)
// where a fresh decode leaves nil.
func sameValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	}
	panic("sameValue: unhandled kind " + a.Kind().String())
}

// tailOmitted reports whether out is in plus the default encoding of a
// missing tolerant tail.
func tailOmitted(b any, in, out []byte) bool {
	if !bytes.HasPrefix(out, in) {
		return false
	}
	tail := out[len(in):]
	switch v := b.(type) {
	case *Publish, *DeclareQueue:
		return bytes.Equal(tail, []byte{0})
	case *ReconcileResult:
		return !v.CodesPresent && len(tail) == 2*len(v.Entries) && !bytes.ContainsFunc(tail, func(r rune) bool { return r != 0 })
	}
	return false
}

func FuzzHello(f *testing.F) {
	fuzzBody[Hello](f, &Hello{ClientName: "go-client", ClientVersion: "1.2.3", ProtocolVersion: 2,
		Resume: Some(ResumeIdentity{OwnerID: u(0xaa), ClientID: u(0xbb), ResumeToken: u(0xcc)})})
}

func FuzzHelloOK(f *testing.F) {
	fuzzBody[HelloOK](f, &HelloOK{ProtocolVersion: 1, OwnerID: u(1), ResumeOutcome: ResumeRejected,
		ServerName: "fibril-go", Compliance: Compliance})
}

func FuzzAuth(f *testing.F) {
	fuzzBody[Auth](f, &Auth{Username: "@node", Password: "sécret"})
}

func FuzzErrorBody(f *testing.F) {
	fuzzBody[ErrorBody](f, &ErrorBody{Code: CodeOutcomeUnknown, Message: "owner did not answer"},
		&ErrorBody{Code: CodeUnsupportedVersion})
}

func FuzzEmpty(f *testing.F) {
	f.Add([]byte{0})
	fuzzBody[Empty](f)
}

func FuzzPublish(f *testing.F) {
	fuzzBody[Publish](f, samplePublish(), &Publish{Topic: "t", Group: Some(""), PartitionKey: Some([]byte{})})
}

func FuzzPublishDelayed(f *testing.F) {
	fuzzBody[PublishDelayed](f, &PublishDelayed{Topic: "t", Group: Some("g"), NotBefore: 1 << 40,
		ContentType: ContentType{Tag: ContentCustom, Custom: "a/b"}, Headers: Headers{{"k", "v"}, {"k", "w"}},
		PartitionKey: Some([]byte("key")), Payload: []byte("payload")})
}

func FuzzPublishOK(f *testing.F) {
	fuzzBody[PublishOK](f, &PublishOK{Offset: 1<<64 - 1})
}

func FuzzSubscribe(f *testing.F) {
	fuzzBody[Subscribe](f, &Subscribe{Topic: "t", ConsumerGroup: Some("default"), MemberID: Some(u(0))})
}

func FuzzSubscribeOK(f *testing.F) {
	fuzzBody[SubscribeOK](f, &SubscribeOK{SubID: 1, Topic: "s", ConsumerTarget: Some[uint32](3)})
}

func FuzzDeliver(f *testing.F) {
	fuzzBody[Deliver](f, sampleDeliver())
}

func FuzzAck(f *testing.F) {
	fuzzBody[Ack](f, &Ack{Topic: "t", Group: Some("g"), Tags: []uint64{1, 1 << 63}})
}

func FuzzNack(f *testing.F) {
	fuzzBody[Nack](f, &Nack{Topic: "t", Tags: []uint64{3}, NotBefore: Some[uint64](0)})
}

func FuzzAssignmentChanged(f *testing.F) {
	fuzzBody[AssignmentChanged](f, &AssignmentChanged{Topic: "t", Group: Some("g"), ConsumerGroup: "",
		Assigned: []uint32{5}, Revoked: []uint32{1, 2}})
}

func FuzzDeclareQueue(f *testing.F) {
	fuzzBody[DeclareQueue](f,
		&DeclareQueue{Topic: "t", DLQPolicy: Some(DLQPolicy{Kind: DLQDiscard})},
		&DeclareQueue{Topic: "t", DLQPolicy: Some(DLQPolicy{Kind: DLQNamed, Topic: "d", Group: Some("g")})},
		&DeclareQueue{Topic: "t", DLQPolicy: Some(DLQPolicy{Kind: DLQBrokerDLQ}), DefaultMessageTTLMillis: Some[uint64](1)})
}

func FuzzDeclareQueueOK(f *testing.F) {
	fuzzBody[DeclareQueueOK](f, &DeclareQueueOK{Status: "stored", PartitionCount: 1})
}

func FuzzDeclarePlexus(f *testing.F) {
	fuzzBody[DeclarePlexus](f, &DeclarePlexus{Topic: "s", Durability: DurabilityEphemeral,
		Retention: StreamRetention{MaxBytes: Some[uint64](1 << 30)}})
}

func FuzzDeclarePlexusOK(f *testing.F) {
	fuzzBody[DeclarePlexusOK](f, &DeclarePlexusOK{Status: "stored", PartitionCount: 8})
}

func FuzzSubscribeStream(f *testing.F) {
	fuzzBody[SubscribeStream](f,
		&SubscribeStream{Topic: "s", Start: StreamStart{Kind: StartOffset, Value: 10}},
		&SubscribeStream{Topic: "s", Start: StreamStart{Kind: StartEarliest}, Filter: []FilterClause{{"k", "*"}}})
}

func FuzzReconcileClient(f *testing.F) {
	fuzzBody[ReconcileClient](f, &ReconcileClient{Policy: ReconcileConservative, Subscriptions: []ReconcileSub{
		{SubID: 9, Topic: "t", Group: Some("g"), AutoAck: true, ConsumerGroup: Some("cg"),
			ConsumerTarget: Some[uint32](1), MemberID: Some(u(5))},
		{SubID: 10, Topic: "u"},
	}})
}

func FuzzReconcileServer(f *testing.F) {
	fuzzBody[ReconcileServer](f, &ReconcileServer{Subscriptions: []ReconcileSub{{SubID: 1, Topic: "t", Prefetch: 2}}})
}

func FuzzReconcileResult(f *testing.F) {
	fuzzBody[ReconcileResult](f, &ReconcileResult{Entries: []ReconcileEntry{
		{Client: Some(ReconcileSub{Topic: "a"}), Server: Some(ReconcileSub{Topic: "a", SubID: 3}),
			Action: ActionKeep, Reason: "server_id_changed", Code: ReasonServerIDChanged},
		{Action: ActionRecreateClientSide, Reason: "recreate", Code: Reason(999)},
	}})
}

func FuzzTopologyRequest(f *testing.F) {
	fuzzBody[TopologyRequest](f, &TopologyRequest{}, &TopologyRequest{Topic: Some("t"), Group: Some("")})
}

func sampleTopology() Topology {
	return Topology{Generation: 3,
		Queues: []QueueEntry{{Topic: "q", Group: Some("g"), Owners: []AdvertisedAddress{
			{Host: "[::1]", Port: 9876, Tags: []string{"az=1", ""}}, {Host: "b", Port: 1}}}},
		Streams: []StreamEntry{{Topic: "s", PartitionCount: 2}},
	}
}

func FuzzTopologyOK(f *testing.F) {
	fuzzBody[TopologyOK](f, &TopologyOK{sampleTopology()})
}

func FuzzTopologyUpdate(f *testing.F) {
	fuzzBody[TopologyUpdate](f, &TopologyUpdate{sampleTopology()})
}

func FuzzRedirect(f *testing.F) {
	fuzzBody[Redirect](f, &Redirect{Topic: "t", Owners: []AdvertisedAddress{{Host: "h", Port: 2, Tags: []string{"x"}}}})
}

func FuzzTopologyUpdateAck(f *testing.F) {
	fuzzBody[TopologyUpdateAck](f, &TopologyUpdateAck{Generation: 99})
}

func FuzzGoingAway(f *testing.F) {
	fuzzBody[GoingAway](f, &GoingAway{GraceMillis: 5000, Message: "drain"})
}

func FuzzSubscriptionClosed(f *testing.F) {
	fuzzBody[SubscriptionClosed](f, &SubscriptionClosed{SubID: 1, Code: ReasonServerError, Message: "x"})
}

func sampleForwarded(v2 bool, flags uint8) *ForwardedSession {
	return &ForwardedSession{V2: v2, OriginNodeID: "gw-1", HopCount: 1, ActingUsername: "alice",
		ClientID: "0190c0de-0000-7000-8000-000000000001", ConnectionID: 42,
		ClientRemoteAddr: "[::1]:5123", Flags: flags}
}

func FuzzForwardedSession(f *testing.F) {
	fuzzBody[ForwardedSession](f, sampleForwarded(true, FlagReleaseOnClose), sampleForwarded(false, 0),
		sampleForwarded(true, 0xfe))
}

func FuzzForwardedSessionOK(f *testing.F) {
	fuzzBody[ForwardedSessionOK](f, &ForwardedSessionOK{ForwardingVersion: 1})
}

// FuzzDecodeBody drives the op dispatcher with arbitrary op codes.
func FuzzDecodeBody(f *testing.F) {
	if vecs, _, err := readVectors(); err == nil {
		for name, exp := range expectedVectors {
			f.Add(uint16(exp.op), vecs[name])
		}
	}
	f.Add(uint16(OpPing), []byte{})
	f.Add(uint16(OpReplicationRead), []byte("FRQ1"))
	for _, c := range replicationCases() {
		f.Add(uint16(c.op), c.body.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, op uint16, in []byte) {
		b, err := DecodeBody(Op(op), in)
		if err != nil {
			var de *DecodeError
			if errors.As(err, &de) && de.Op != Op(op) {
				t.Fatalf("error names %v, decoded as %v", de.Op, Op(op))
			}
			return
		}
		out := b.AppendTo(nil)
		if !bytes.Equal(out, in) && !tailOmitted(b, in, out) {
			t.Fatalf("%v round trip:\n in %x\nout %x", Op(op), in, out)
		}
	})
}

// FuzzFrameHeader checks that header parsing is total and lossless.
func FuzzFrameHeader(f *testing.F) {
	f.Add(AppendFrame(nil, OpPing, 0, nil))
	f.Add(AppendFrameHeader(nil, FrameHeader{BodyLen: 1<<32 - 1, Version: 0xffff, Op: 0xffff, Flags: 1, RequestID: 1<<64 - 1}))
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ParseFrameHeader(in)
		if len(in) < HeaderSize {
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("short header: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if out := AppendFrameHeader(nil, h); !bytes.Equal(out, in[:HeaderSize]) {
			t.Fatalf("header round trip %x != %x", out, in[:HeaderSize])
		}
	})
}

// FuzzReadFrame reads a byte stream frame by frame with a small cap and
// checks that every frame returned re-encodes to the bytes consumed, and
// that reading stops with a well-defined error.
func FuzzReadFrame(f *testing.F) {
	var stream []byte
	stream = AppendFrame(stream, OpHello, 1, &Hello{ClientName: "c", ClientVersion: "v", ProtocolVersion: 1})
	stream = AppendFrame(stream, OpPing, 2, nil)
	f.Add(stream, uint32(64), uint16(0))
	f.Add(stream[:25], uint32(64), uint16(3))
	f.Add(AppendFrameHeader(nil, FrameHeader{BodyLen: 1 << 31}), uint32(1<<20), uint16(7))
	f.Fuzz(func(t *testing.T, in []byte, maxBody uint32, bufCap uint16) {
		maxBody %= 1 << 16 // keep allocations small; large caps add nothing
		buf := make([]byte, 0, int(bufCap)%512)
		r := bytes.NewReader(in)
		consumed := 0
		for {
			h, body, err := ReadFrame(r, buf, maxBody)
			if err != nil {
				switch {
				case err == io.EOF:
					if consumed != len(in) {
						t.Fatalf("io.EOF with %d of %d bytes consumed", consumed, len(in))
					}
				case err == io.ErrUnexpectedEOF:
				case errors.Is(err, ErrFrameTooLarge):
					if h.BodyLen <= maxBody {
						t.Fatalf("rejected %d ≤ %d", h.BodyLen, maxBody)
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			n := HeaderSize + len(body)
			if uint32(len(body)) != h.BodyLen || h.BodyLen > maxBody {
				t.Fatalf("body %d bytes, header %d, cap %d", len(body), h.BodyLen, maxBody)
			}
			frame := append(AppendFrameHeader(nil, h), body...)
			if !bytes.Equal(frame, in[consumed:consumed+n]) {
				t.Fatal("frame does not re-encode to the bytes read")
			}
			consumed += n
		}
	})
}
