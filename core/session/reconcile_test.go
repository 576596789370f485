package session

import (
	"testing"

	"github.com/fibrilgo/fibril/core/wire"
)

// S-108…S-110, docs/protocol.md#reconcile: every verdict, the codes tail, the sort order
// and the removal of server-only subscriptions.
func TestReconcileVerdicts(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	kept := c.subscribe("a", 4, false)
	rekeyed := c.subscribe("b", 4, false)
	mismatch := c.subscribe("c", 4, false)
	c.subscribe("d", 4, false) // the client will not list it
	g := wire.Some("g1")

	id := c.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: []wire.ReconcileSub{
		{SubID: kept.SubID, Topic: "a", Prefetch: 4},
		{SubID: rekeyed.SubID + 100, Topic: "b", Prefetch: 4},
		{SubID: mismatch.SubID, Topic: "c", Prefetch: 5},
		{SubID: 900, Topic: "e", Prefetch: 1},                         // manual-ack, owned → recreate
		{SubID: 901, Topic: "f", Prefetch: 1, AutoAck: true},          // auto-ack → server_missing
		{SubID: 902, Topic: "a", Group: g, Partition: 0, Prefetch: 1}, // grouped: sorts after ungrouped
	}})
	res := c.Expect(wire.OpReconcileResult, id).(*wire.ReconcileResult)
	type want struct {
		topic  string
		group  bool
		action wire.ReconcileAction
		code   wire.Reason
	}
	wants := []want{
		{"a", false, wire.ActionKeep, wire.ReasonMatched},
		{"b", false, wire.ActionKeep, wire.ReasonServerIDChanged},
		{"c", false, wire.ActionCloseClientSide, wire.ReasonServerMismatch},
		{"d", false, wire.ActionCloseServerSide, wire.ReasonClientMissing},
		{"e", false, wire.ActionRecreateClientSide, wire.ReasonRecreate},
		{"f", false, wire.ActionCloseClientSide, wire.ReasonServerMissing},
	}
	if len(res.Entries) != len(wants)+1 || !res.CodesPresent {
		t.Fatalf("got %d entries (codes %v): %+v", len(res.Entries), res.CodesPresent, res.Entries)
	}
	for i, w := range wants {
		en := res.Entries[i]
		v := entryView(en)
		if v.Topic != w.topic || v.Group.Present != w.group || en.Action != w.action || en.Code != w.code || en.Reason != w.code.String() {
			t.Errorf("entry %d = %+v, want %+v", i, en, w)
		}
	}
	// The grouped entry sorts last; a manual-ack subscription on a partition
	// this standalone broker can serve is answered recreate.
	last := res.Entries[6]
	if v := entryView(last); !v.Group.Present || last.Code != wire.ReasonRecreate {
		t.Errorf("grouped entry = %+v", last)
	}
	if k := res.Entries[1]; k.Server.Value.SubID != rekeyed.SubID {
		t.Errorf("server_id_changed must carry the broker's id: %+v", k)
	}
	// The mismatched and the server-only subscriptions are gone: subscribing
	// again succeeds.
	c.subscribe("c", 5, false)
	c.subscribe("d", 1, false)
}

// S-109 restore: a missing subscription is recreated with a new id and
// deliveries follow the answer; a restore that fails → close_client_side
// server_restore_failed.
func TestReconcileRestore(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.Expect(wire.OpPublishOK, c.publish("jobs", "x", true))
	c.Expect(wire.OpDeclarePlexusOK, c.Send(wire.OpDeclarePlexus, &wire.DeclarePlexus{Topic: "s", Durability: wire.DurabilityDurable}))
	id := c.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{
		{SubID: 7, Topic: "jobs", Prefetch: 2},
		{SubID: 8, Topic: "s", Prefetch: 2}, // a stream topic: cannot be a queue subscription
	}})
	res := c.Expect(wire.OpReconcileResult, id).(*wire.ReconcileResult)
	if len(res.Entries) != 2 {
		t.Fatalf("%+v", res)
	}
	restored, failed := res.Entries[0], res.Entries[1]
	if restored.Code != wire.ReasonServerRestored || restored.Action != wire.ActionKeep || !restored.Server.Present || restored.Server.Value.SubID == 7 {
		t.Fatalf("restored entry %+v", restored)
	}
	if failed.Code != wire.ReasonServerRestoreFailed || failed.Server.Present {
		t.Fatalf("failed entry %+v", failed)
	}
	_, d := c.nextDeliver()
	if d.SubID != restored.Server.Value.SubID {
		t.Fatalf("delivery for sub %d, want %d", d.SubID, restored.Server.Value.SubID)
	}
}
