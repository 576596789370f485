package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const vectorsEnv = "FIBRIL_WIRE_VECTORS"

// vectorsPath finds wire_vectors.json: $FIBRIL_WIRE_VECTORS if set, else
// <root>/../shared/protocol/wire_vectors.json where <root> is the nearest
// ancestor of the working directory holding go.mod.
func vectorsPath() string {
	if p := os.Getenv(vectorsEnv); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		return "wire_vectors.json"
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "protocol", "wire_vectors.json")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join("shared", "protocol", "wire_vectors.json")
		}
		dir = parent
	}
}

// readVectors loads and hex-decodes the vector file. It returns an error
// satisfying os.IsNotExist when the file is absent.
func readVectors() (map[string][]byte, string, error) {
	path := vectorsPath()
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, path, err
	}
	var hexes map[string]string
	if err := json.Unmarshal(raw, &hexes); err != nil {
		return nil, path, err
	}
	out := make(map[string][]byte, len(hexes))
	for name, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, path, errors.New(name + ": " + err.Error())
		}
		out[name] = b
	}
	return out, path, nil
}

// loadVectors is readVectors for tests: it skips when the file is absent
// and fails on any other problem.
func loadVectors(t testing.TB) map[string][]byte {
	t.Helper()
	v, path, err := readVectors()
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("wire vectors not found at %s; set %s to the path of wire_vectors.json", path, vectorsEnv)
	}
	if err != nil {
		t.Fatalf("loading wire vectors from %s: %v", path, err)
	}
	return v
}

func u(b byte) UUID {
	var x UUID
	for i := range x {
		x[i] = b
	}
	return x
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

type vector struct {
	op   Op
	want Body
}

// expectedVectors spells out the decoded values of , field by field.
var expectedVectors = map[string]vector{
	"hello": {OpHello, &Hello{
		ClientName: "py-client", ClientVersion: "0.1.0", ProtocolVersion: 1,
		Resume: Some(ResumeIdentity{OwnerID: u(1), ClientID: u(2), ResumeToken: u(3)}),
	}},
	"hello_no_resume": {OpHello, &Hello{ClientName: "c", ClientVersion: "v", ProtocolVersion: 1}},
	"hello_ok": {OpHelloOK, &HelloOK{
		ProtocolVersion: 1, OwnerID: u(9), ClientID: u(8), ResumeToken: u(7),
		ResumeOutcome: ResumeResumed, ServerName: "srv", Compliance: "v=1;x",
	}},
	"hello_ok_resumed_after_restart": {OpHelloOK, &HelloOK{
		ProtocolVersion: 1, OwnerID: u(9), ClientID: u(8), ResumeToken: u(7),
		ResumeOutcome: ResumeResumedAfterRestart, ServerName: "srv", Compliance: "v=1;x",
	}},
	"auth":  {OpAuth, &Auth{Username: "u", Password: "p"}},
	"error": {OpError, &ErrorBody{Code: CodeConflict, Message: "not owner"}},
	"publish": {OpPublish, &Publish{
		Topic: "orders", Group: Some("g"), Partition: 3, RequireConfirm: true,
		ContentType: ContentType{Tag: ContentJSON},
		Headers:     Headers{{Key: "x-a", Value: "1"}},
		Published:   1234567890, PartitionKey: Some([]byte{0x09, 0x09}),
		PartitioningVersion: 5, Payload: []byte{1, 2, 3, 4}, TTLMillis: Some[uint64](60000),
	}},
	"publish_no_ttl": {OpPublish, &Publish{Topic: "t"}},
	"publish_custom_ct": {OpPublish, &Publish{
		Topic: "t", ContentType: ContentType{Tag: ContentCustom, Custom: "application/x-thing"},
		Published: 1, Payload: []byte{7},
	}},
	"publish_delayed": {OpPublishDelayed, &PublishDelayed{
		Topic: "t", Partition: 1, RequireConfirm: true, NotBefore: 999,
		ContentType: ContentType{Tag: ContentText}, Headers: Headers{{Key: "k", Value: "v"}},
		Published: 42, PartitioningVersion: 2, Payload: []byte{5, 6},
	}},
	"publish_ok": {OpPublishOK, &PublishOK{Offset: 777}},
	"subscribe": {OpSubscribe, &Subscribe{
		Topic: "t", Partition: 1, Group: Some("g"), Prefetch: 32, AutoAck: false,
		ConsumerGroup: Some("cg"), ConsumerTarget: Some[uint32](2), MemberID: Some(u(4)),
	}},
	"subscribe_min": {OpSubscribe, &Subscribe{Topic: "t", AutoAck: true}},
	"subscribe_ok": {OpSubscribeOK, &SubscribeOK{
		SubID: 5, Topic: "t", Partition: 1, Group: Some("g"), Prefetch: 16,
		ConsumerGroup: Some("cg"), MemberID: Some(u(4)),
	}},
	"deliver": {OpDeliver, &Deliver{
		SubID: 11, Topic: "t", Group: Some("g"), Partition: 2, Offset: 100, DeliveryTag: 5,
		Published: 7, PublishReceived: 8, ContentType: ContentType{Tag: ContentMsgPack},
		Headers: Headers{{Key: "h", Value: "1"}}, Payload: []byte{3, 2, 1},
	}},
	"ack":        {OpAck, &Ack{Topic: "t", Tags: []uint64{1, 2}}},
	"nack":       {OpNack, &Nack{Topic: "t", Group: Some("g"), Partition: 1, Tags: []uint64{9}, Requeue: true, NotBefore: Some[uint64](5000)}},
	"nack_no_nb": {OpNack, &Nack{Topic: "t"}},
	"assignment": {OpAssignmentChanged, &AssignmentChanged{
		Topic: "t", ConsumerGroup: "cg", Generation: 6,
		Assigned: []uint32{0, 1, 2}, Added: []uint32{2},
	}},
	"declare": {OpDeclareQueue, &DeclareQueue{
		Topic: "t", Group: Some("g"), DLQPolicy: Some(DLQPolicy{Kind: DLQNamed, Topic: "dlq"}),
		DLQMaxRetries: Some[uint32](3), PartitionCount: Some[uint32](4),
		DefaultMessageTTLMillis: Some[uint64](30000),
	}},
	"declare_min": {OpDeclareQueue, &DeclareQueue{Topic: "t"}},
	"declare_ok":  {OpDeclareQueueOK, &DeclareQueueOK{Status: "created", PartitionCount: 4}},
	"declare_plexus": {OpDeclarePlexus, &DeclarePlexus{
		Topic: "t", PartitionCount: Some[uint32](4), Durability: DurabilitySpeculative,
		Retention:         StreamRetention{MaxAgeMillis: Some[uint64](60000), MaxRecords: Some[uint64](1000000)},
		ReplicationFactor: Some[uint32](2),
	}},
	"declare_plexus_min": {OpDeclarePlexus, &DeclarePlexus{Topic: "t", Durability: DurabilityDurable}},
	"declare_plexus_ok":  {OpDeclarePlexusOK, &DeclarePlexusOK{Status: "created", PartitionCount: 4}},
	"subscribe_stream": {OpSubscribeStream, &SubscribeStream{
		Topic: "t", Partition: 1, DurableName: Some("c1"),
		Start:    StreamStart{Kind: StartByTime, Value: 1234},
		Filter:   []FilterClause{{Key: "region", Pattern: "eu-*"}, {Key: "kind", Pattern: "order"}},
		Prefetch: 16, AutoAck: false,
	}},
	"subscribe_stream_min": {OpSubscribeStream, &SubscribeStream{Topic: "t", Start: StreamStart{Kind: StartLatest}, AutoAck: true}},
	"reconcile_client": {OpReconcileClient, &ReconcileClient{
		Policy:        ReconcileRestore,
		Subscriptions: []ReconcileSub{{SubID: 1, Topic: "t", Prefetch: 8}},
	}},
	"reconcile_result": {OpReconcileResult, &ReconcileResult{
		Entries: []ReconcileEntry{
			{
				Client: Some(ReconcileSub{SubID: 1, Topic: "t", Prefetch: 8}),
				Action: ActionCloseClientSide, Reason: "server_missing", Code: ReasonServerMissing,
			},
			{
				Server: Some(ReconcileSub{SubID: 2, Topic: "t", Partition: 1, Group: Some("g"), AutoAck: true, Prefetch: 4}),
				Action: ActionCloseServerSide, Reason: "client_missing", Code: ReasonClientMissing,
			},
		},
		CodesPresent: true,
	}},
	"topology_req": {OpTopology, &TopologyRequest{Topic: Some("t")}},
	"topology_ok": {OpTopologyOK, &TopologyOK{Topology{
		Generation: 12,
		Queues: []QueueEntry{
			{Topic: "t", Partition: 0, Owners: []AdvertisedAddress{{Host: "127.0.0.1", Port: 7000}}, PartitioningVersion: 1, PartitionCount: 2},
			{Topic: "t", Partition: 1, PartitioningVersion: 1, PartitionCount: 2},
		},
		Streams: []StreamEntry{
			{Topic: "s", Partition: 2, Owners: []AdvertisedAddress{{Host: "10.0.0.9", Port: 7100}}, PartitioningVersion: 4, PartitionCount: 3},
		},
	}}},
	"topology_update": {OpTopologyUpdate, &TopologyUpdate{Topology{
		Generation: 12,
		Queues: []QueueEntry{
			{Topic: "t", Partition: 0, Owners: []AdvertisedAddress{{Host: "127.0.0.1", Port: 7000}}, PartitioningVersion: 1, PartitionCount: 2},
		},
		Streams: []StreamEntry{
			{Topic: "s", Partition: 2, Owners: []AdvertisedAddress{{Host: "10.0.0.9", Port: 7100}}, PartitioningVersion: 4, PartitionCount: 3},
		},
	}}},
	"topology_update_ack": {OpTopologyUpdateAck, &TopologyUpdateAck{Generation: 12}},
	"going_away":          {OpGoingAway, &GoingAway{GraceMillis: 30000, Message: "broker restarting for upgrade"}},
	"redirect": {OpRedirect, &Redirect{
		Topic: "t", Partition: 1, Group: Some("g"),
		Owners: []AdvertisedAddress{{Host: "h", Port: 1}}, PartitioningVersion: 3,
	}},
	"subscription_closed": {OpSubscriptionClosed, &SubscriptionClosed{SubID: 7, Code: ReasonOwnerMoved, Message: "partition moved"}},
}

func sortedNames(m map[string][]byte) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestVectors(t *testing.T) {
	vecs := loadVectors(t)
	if len(vecs) != 36 {
		t.Errorf("vector file holds %d vectors, want 36", len(vecs))
	}
	for name := range expectedVectors {
		if _, ok := vecs[name]; !ok {
			t.Errorf("expectation %q has no vector in the file", name)
		}
	}
	for _, name := range sortedNames(vecs) {
		in := vecs[name]
		t.Run(name, func(t *testing.T) {
			exp, ok := expectedVectors[name]
			if !ok {
				t.Fatalf("vector %q has no expectation in this test", name)
			}
			got, err := DecodeBody(exp.op, in)
			if err != nil {
				t.Fatalf("decode as %v: %v", exp.op, err)
			}
			if !reflect.DeepEqual(got, exp.want) {
				t.Errorf("decoded\n got %#v\nwant %#v", got, exp.want)
			}
			if out := got.AppendTo(nil); !bytes.Equal(out, in) {
				t.Errorf("re-encode\n got %x\nwant %x", out, in)
			}
			if out := exp.want.AppendTo(nil); !bytes.Equal(out, in) {
				t.Errorf("encode of expected value\n got %x\nwant %x", out, in)
			}
			// Decoding again into the already-populated value must give
			// the same result (slices reused, no stale fields).
			if err := got.Decode(in); err != nil || !reflect.DeepEqual(got, exp.want) {
				t.Errorf("re-decode into used value: err=%v got %#v", err, got)
			}
		})
	}
}

// TestWorkedFrames checks the docs/protocol.md#frames frames, header and body together.
func TestWorkedFrames(t *testing.T) {
	cases := []struct {
		name  string
		op    Op
		id    uint64
		body  Body
		frame string
	}{
		{"hello", OpHello, 1, &Hello{ClientName: "c", ClientVersion: "v", ProtocolVersion: 1},
			"00000011 0001 0001 00000000 0000000000000001 46484c3100000001630000000176000100"},
		{"ping", OpPing, 0, nil, "00000000 0001 0032 00000000 0000000000000000"},
		{"auth_ok", OpAuthOK, 2, nil, "00000000 0001 000b 00000000 0000000000000002"},
		{"error", OpError, 7, &ErrorBody{Code: 409, Message: "not owner"},
			"00000013 0001 00ff 00000000 0000000000000007 46455231 0199 00000009 6e6f74206f776e6572"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := mustHex(t, c.frame)
			var enc Encoder
			if c.body != nil {
				enc = c.body
			}
			got := AppendFrame([]byte("prefix"), c.op, c.id, enc)
			if !bytes.Equal(got[6:], want) || string(got[:6]) != "prefix" {
				t.Fatalf("AppendFrame\n got %x\nwant %x", got[6:], want)
			}
			h, body, err := ReadFrame(bytes.NewReader(want), nil, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			wantH := FrameHeader{BodyLen: uint32(len(want) - HeaderSize), Version: 1, Op: c.op, RequestID: c.id}
			if h != wantH {
				t.Fatalf("header %+v, want %+v", h, wantH)
			}
			if c.body == nil {
				if len(body) != 0 {
					t.Fatalf("body %x, want empty", body)
				}
				if b, ok := NewBody(c.op); !ok || b.Decode(body) != nil {
					t.Fatalf("empty body for %v does not decode", c.op)
				}
				return
			}
			got2, err := DecodeBody(c.op, body)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got2, c.body) {
				t.Fatalf("decoded %#v, want %#v", got2, c.body)
			}
		})
	}
}

// TestForwardedSessionExample checks the docs/protocol.md#forwarded-session FFS2 and FFO1 bytes.
func TestForwardedSessionExample(t *testing.T) {
	ffs2 := mustHex(t, "46465332 00000004 67772d31 01 00000005 616c696365 "+
		"00000024 30313930633064652d303030302d373030302d383030302d303030303030303030303031 "+
		"000000000000002a 0000000e 3132372e302e302e313a35313233 01")
	want := &ForwardedSession{
		V2: true, OriginNodeID: "gw-1", HopCount: 1, ActingUsername: "alice",
		ClientID: "0190c0de-0000-7000-8000-000000000001", ConnectionID: 42,
		ClientRemoteAddr: "127.0.0.1:5123", Flags: FlagReleaseOnClose,
	}
	got, err := DecodeBody(OpForwardedSession, ffs2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	fs := got.(*ForwardedSession)
	if !fs.ReleaseOnClose() || fs.Validate() != nil {
		t.Fatalf("ReleaseOnClose=%v Validate=%v", fs.ReleaseOnClose(), fs.Validate())
	}
	if id, err := ParseUUID(fs.ClientID); err != nil || id.String() != fs.ClientID {
		t.Fatalf("client id %q does not round-trip as a UUID: %v", fs.ClientID, err)
	}
	if out := want.AppendTo(nil); !bytes.Equal(out, ffs2) {
		t.Fatalf("encode\n got %x\nwant %x", out, ffs2)
	}

	// The same session as FFS1: magic differs, flags byte dropped.
	v1 := *want
	v1.V2, v1.Flags = false, 0
	ffs1 := append([]byte("FFS1"), ffs2[4:len(ffs2)-1]...)
	if out := v1.AppendTo(nil); !bytes.Equal(out, ffs1) {
		t.Fatalf("FFS1 encode\n got %x\nwant %x", out, ffs1)
	}
	var d ForwardedSession
	if err := d.Decode(ffs1); err != nil || d != v1 || d.ReleaseOnClose() {
		t.Fatalf("FFS1 decode: %v %#v", err, d)
	}
	// An FFS1 body with the FFS2 flags byte has trailing bytes.
	if err := d.Decode(append(ffs1, 1)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("FFS1 + flags: %v, want trailing bytes", err)
	}
	// Hop count is a semantic check, not a decode error.
	bad := bytes.Clone(ffs2)
	bad[12] = 2
	if err := d.Decode(bad); err != nil {
		t.Fatalf("hop count 2 must decode: %v", err)
	}
	if !errors.Is(d.Validate(), ErrBadHopCount) {
		t.Fatalf("Validate with hop 2: %v", d.Validate())
	}

	ffo1 := mustHex(t, "46464f31 0002")
	ok, err := DecodeBody(OpForwardedSessionOK, ffo1)
	if err != nil || !reflect.DeepEqual(ok, &ForwardedSessionOK{ForwardingVersion: 2}) {
		t.Fatalf("FFO1: %v %#v", err, ok)
	}
	if out := ok.AppendTo(nil); !bytes.Equal(out, ffo1) {
		t.Fatalf("FFO1 encode %x", out)
	}
}

// TestDecodeReuse decodes every vector into a value that already holds
// every other vector of the same type (and the fuzz seeds' richer values):
// the result must equal a fresh decode, so no field may survive from the
// previous body.
func TestDecodeReuse(t *testing.T) {
	vecs := loadVectors(t)
	bodies := map[reflect.Type][][]byte{}
	for _, name := range sortedNames(vecs) {
		typ := reflect.TypeOf(expectedVectors[name].want)
		bodies[typ] = append(bodies[typ], vecs[name])
	}
	extra := []Body{
		samplePublish(), sampleDeliver(), &TopologyOK{sampleTopology()}, &TopologyUpdate{sampleTopology()},
		&DeclareQueue{Topic: "x", DLQPolicy: Some(DLQPolicy{Kind: DLQDiscard})},
		&SubscribeStream{Topic: "s", Start: StreamStart{Kind: StartEarliest}},
		&ReconcileResult{Entries: []ReconcileEntry{{Action: ActionKeep, Reason: "r"}}},
		&Redirect{Topic: "t"},
	}
	for _, b := range extra {
		typ := reflect.TypeOf(b)
		bodies[typ] = append(bodies[typ], b.AppendTo(nil))
	}
	for typ, list := range bodies {
		for _, prior := range list {
			for _, in := range list {
				fresh := reflect.New(typ.Elem()).Interface().(Body)
				used := reflect.New(typ.Elem()).Interface().(Body)
				if err := used.Decode(prior); err != nil {
					t.Fatal(err)
				}
				if err := fresh.Decode(in); err != nil {
					t.Fatal(err)
				}
				if err := used.Decode(in); err != nil {
					t.Fatal(err)
				}
				if !sameValue(reflect.ValueOf(fresh), reflect.ValueOf(used)) {
					t.Errorf("%v: decoding %x over %x gave %#v, want %#v", typ, in, prior, used, fresh)
				}
			}
		}
	}
}
