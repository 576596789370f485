package wire

import (
	"testing"
)

func TestOps(t *testing.T) {
	known, nodeOnly := 0, 0
	for i := 0; i < 1<<16; i++ {
		op := Op(i)
		if op.Known() {
			known++
		}
		if op.NodeOnly() {
			nodeOnly++
			if !op.Known() {
				t.Errorf("%v is node-only but unknown", op)
			}
		}
	}
	// 50 upstream ops + 4 extension ops; 16 replication + 2 forwarding + 2 node admin.
	if known != 54 || nodeOnly != 20 {
		t.Errorf("known %d (want 54), node-only %d (want 20)", known, nodeOnly)
	}
	for _, c := range []struct {
		op   Op
		name string
		node bool
	}{
		{OpPublish, "PUBLISH", false}, {OpError, "ERROR", false}, {OpTopology, "TOPOLOGY", false},
		{OpRedirect, "REDIRECT", false}, {OpReplicationRead, "REPLICATION_READ", true},
		{OpStreamReplicationReadOK, "STREAM_REPLICATION_READ_OK", true},
		{OpForwardedSession, "FORWARDED_SESSION", true}, {OpForwardedSessionOK, "FORWARDED_SESSION_OK", true},
		{OpNodeAdmin, "NODE_ADMIN", true}, {OpNodeAdminOK, "NODE_ADMIN_OK", true},
		{Op(123), "op(123)", false}, {Op(300), "op(300)", false},
	} {
		if c.op.String() != c.name || c.op.NodeOnly() != c.node {
			t.Errorf("%d: %q node=%v, want %q node=%v", uint16(c.op), c.op.String(), c.op.NodeOnly(), c.name, c.node)
		}
	}
	for _, op := range []Op{OpAuthOK, OpPing, OpPong, OpReplicationStreamStop} {
		if !op.EmptyBody() {
			t.Errorf("%v should have an empty body", op)
		}
	}
	// Every known op (client-facing, replication, docs/protocol.md#extensions)
	// has a body type; no other op does.
	for i := 0; i < 1<<16; i++ {
		op := Op(i)
		_, ok := NewBody(op)
		if want := op.Known(); ok != want {
			t.Errorf("NewBody(%v) ok=%v, want %v", op, ok, want)
		}
	}
}

func TestCompliance(t *testing.T) {
	if len(Compliance) != 55 {
		t.Fatalf("Compliance is %d bytes, want 55", len(Compliance))
	}
}

func TestUUID(t *testing.T) {
	const s = "0190c0de-0000-7000-8000-000000000001"
	id, err := ParseUUID(s)
	if err != nil || id.String() != s || id.IsZero() {
		t.Fatalf("%v %v", id, err)
	}
	if up, err := ParseUUID("0190C0DE-0000-7000-8000-000000000001"); err != nil || up != id {
		t.Fatalf("upper case: %v %v", up, err)
	}
	if (UUID{}).String() != "00000000-0000-0000-0000-000000000000" || !(UUID{}).IsZero() {
		t.Fatal("zero UUID")
	}
	for _, bad := range []string{"", s[:35], s + "0", "0190c0de00000-7000-8000-000000000001",
		"0190c0de-0000-7000-8000-00000000000g", "{0190c0de-0000-7000-8000-0000000000}"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) succeeded", bad)
		}
	}
}

// TestPartitionForKey checks the SDKs' key rule (S-32) against their table of keys.
func TestPartitionForKey(t *testing.T) {
	for _, c := range []struct {
		key        string
		hash       uint64
		m3, m4, m8 uint32
	}{
		{"", 14695981039346656037, 2, 1, 5},
		{"a", 12638187200555641996, 1, 0, 4},
		{"order-42", 9015620992513762004, 2, 0, 4},
		{"partition-key", 11792757095719117019, 2, 3, 3},
		{"hello world", 8618312879776256743, 1, 3, 7},
	} {
		k := []byte(c.key)
		if h := FNV1a64(k); h != c.hash {
			t.Errorf("FNV1a64(%q) = %d, want %d", c.key, h, c.hash)
		}
		if got := [3]uint32{PartitionForKey(k, 3), PartitionForKey(k, 4), PartitionForKey(k, 8)}; got != [3]uint32{c.m3, c.m4, c.m8} {
			t.Errorf("%q: got %v, want %v", c.key, got, [3]uint32{c.m3, c.m4, c.m8})
		}
		if PartitionForKey(k, 0) != 0 || PartitionForKey(k, 1) != 0 {
			t.Errorf("%q: n ≤ 1 must give partition 0", c.key)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{ResumeResumedAfterRestart.String(), "resumed_after_restart"},
		{ResumeNotFound.String(), "resume_not_found"},
		{ResumeOutcome(9).String(), "ResumeOutcome(9)"},
		{ReconcileRestore.String(), "restore"},
		{ActionRecreateClientSide.String(), "recreate_client_side"},
		{DurabilitySpeculative.String(), "speculative"},
		{StartNBack.String(), "n_back"},
		{DLQNamed.String(), "named"},
		{ContentCustom.String(), "custom"},
		{ReasonServerError.String(), "server_error"},
		{ReasonOwnerMoved.String(), "owner_moved"},
		{Reason(999).String(), "reason(999)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if !ReasonLagged.Known() || Reason(9).Known() {
		t.Error("Reason.Known")
	}
	if !ResumeResumedAfterRestart.Valid() || ResumeOutcome(5).Valid() || StreamStartKind(5).Valid() {
		t.Error("Valid")
	}
}

func TestSmallTypes(t *testing.T) {
	h := Headers{{"k", "1"}, {"x", "y"}, {"k", "2"}}
	if v, ok := h.Get("k"); !ok || v != "2" {
		t.Errorf("last duplicate must win: %q %v", v, ok)
	}
	if _, ok := h.Get("K"); ok {
		t.Error("keys are case-sensitive")
	}
	if v, ok := Some("").Get(); !ok || v != "" {
		t.Error("Some")
	}
	if _, ok := None[string]().Get(); ok {
		t.Error("None")
	}
	if a := (AdvertisedAddress{Host: "[::1]", Port: 9876}); a.String() != "[::1]:9876" {
		t.Error(a.String())
	}
	if (ContentType{Tag: ContentText}).MIME() != "text/plain; charset=utf-8" ||
		(ContentType{Tag: ContentCustom, Custom: "a/b"}).MIME() != "a/b" {
		t.Error("MIME")
	}
	ok := &HelloOK{OwnerID: u(1), ClientID: u(2), ResumeToken: u(3)}
	if ok.Identity() != (ResumeIdentity{u(1), u(2), u(3)}) {
		t.Error("Identity")
	}
}

// NODE_ADMIN and NODE_ADMIN_OK round-trip, and a truncated body is an
// error, not a panic.
func TestNodeAdminBodies(t *testing.T) {
	req := NodeAdmin{Action: "queues.stats", Args: []byte(`{"topic":"orders"}`)}
	b := req.AppendTo(nil)
	var got NodeAdmin
	if err := got.Decode(b); err != nil || got.Action != req.Action || string(got.Args) != string(req.Args) {
		t.Fatalf("NodeAdmin round trip: %+v %v", got, err)
	}
	for i := range len(b) {
		if err := new(NodeAdmin).Decode(b[:i]); err == nil {
			t.Fatalf("NodeAdmin truncated at %d decoded", i)
		}
	}
	ok := NodeAdminOK{Result: []byte(`[]`)}
	var gotOK NodeAdminOK
	if err := gotOK.Decode(ok.AppendTo(nil)); err != nil || string(gotOK.Result) != "[]" {
		t.Fatalf("NodeAdminOK round trip: %+v %v", gotOK, err)
	}
	if _, err := DecodeBody(OpNodeAdmin, b); err != nil {
		t.Fatalf("DecodeBody: %v", err)
	}
}
