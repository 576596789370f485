package queue

import (
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// S-18: absent count → default; 0 → 1; every partition created;
// redeclaring with the same count (or none) is idempotent.
func TestDeclareQueueCountsAndIdempotence_S18(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.AutoCreate = false
		o.Settings = func() Settings { s := DefaultSettings(); s.DefaultPartitionCount = 3; return s }
	})
	info, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "orders"}})
	if err != nil || info.PartitionCount != 3 || info.MaxRetries != 5 {
		t.Fatalf("declare absent count: %+v, %v; want 3 partitions, max_retries 5", info, err)
	}
	info, err = e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "zero"}, PartitionCount: wire.Some[uint32](0)})
	if err != nil || info.PartitionCount != 1 {
		t.Fatalf("declare 0: %+v, %v; want 1 partition", info, err)
	}
	for _, spec := range []QueueSpec{
		{Key: Key{Topic: "orders"}},
		{Key: Key{Topic: "orders"}, PartitionCount: wire.Some[uint32](3)},
	} {
		info, err := e.m.DeclareQueue(spec)
		if err != nil || info.PartitionCount != 3 {
			t.Fatalf("redeclare %+v: %+v, %v", spec, info, err)
		}
	}
	for n := range uint32(3) {
		if _, err := e.m.Partition(Key{Topic: "orders"}, n); err != nil {
			t.Fatalf("partition %d: %v", n, err)
		}
	}
	_, err = e.m.Partition(Key{Topic: "orders"}, 7)
	wantCode(t, err, core.ErrNotFound)
	if !strings.Contains(err.Error(), "has 3 partitions; partition 7 does not exist") {
		t.Fatalf("message %q", err)
	}
	if qs := e.m.Queues(); len(qs) != 2 || qs[0].Topic != "orders" || qs[1].Topic != "zero" {
		t.Fatalf("Queues() = %+v", qs)
	}
}

// S-19/S-20: standalone counts are fixed at creation; a different explicit
// count is a 409 naming both counts.
func TestDeclareQueueConflict_S20(t *testing.T) {
	e := newEnv(t)
	if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "orders"}, PartitionCount: wire.Some[uint32](4)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "orders"}, PartitionCount: wire.Some[uint32](2)})
	wantCode(t, err, core.ErrConflict)
	if !strings.Contains(err.Error(), "4") || !strings.Contains(err.Error(), "2") {
		t.Fatalf("conflict message %q must name both counts", err)
	}
	// An auto-created queue has one partition; declaring more conflicts too.
	e.part("auto", 0)
	_, err = e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "auto"}, PartitionCount: wire.Some[uint32](2)})
	wantCode(t, err, core.ErrConflict)
}

// S-63 / S-18: a redeclare may change the DLQ policy, max_retries and the
// default TTL; absent fields keep their value; the change survives restart.
func TestDeclareQueueUpdatesPolicy_S63(t *testing.T) {
	e := newEnv(t)
	dlq := wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead", Group: wire.Some("g")}
	_, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DLQ: wire.Some(dlq), MaxRetries: wire.Some[uint32](2)})
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DefaultTTLMillis: wire.Some[uint64](500)})
	if err != nil {
		t.Fatal(err)
	}
	if info.DLQ != wire.Some(dlq) || info.MaxRetries != 2 || info.DefaultTTLMillis != wire.Some[uint64](500) {
		t.Fatalf("after partial redeclare: %+v", info)
	}
	info, _ = e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, MaxRetries: wire.Some[uint32](9), DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQDiscard})})
	if info.MaxRetries != 9 || info.DLQ.Value.Kind != wire.DLQDiscard {
		t.Fatalf("after update: %+v", info)
	}
	e.restart()
	qs := e.m.Queues()
	if len(qs) != 1 || qs[0].MaxRetries != 9 || qs[0].DLQ.Value.Kind != wire.DLQDiscard || qs[0].DefaultTTLMillis != wire.Some[uint64](500) {
		t.Fatalf("after restart: %+v", qs)
	}
}

// S-16: names are 1–128 bytes of [a-z0-9._-], no leading/trailing '.', no "..".
func TestNames_S16(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("a", 128)
	for _, ok := range []string{"a", "orders", "a.b", "a_b-c.9", long, "-", "_"} {
		if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: ok, Group: wire.Some(ok)}}); err != nil {
			t.Errorf("valid name %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", long + "a", "Orders", ".a", "a.", "a..b", "a/b", "a b", "ü"} {
		_, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: bad}})
		if !strings.Contains(errString(err), "name") {
			t.Errorf("topic %q: %v", bad, err)
		}
		wantCode(t, err, core.ErrBadRequest)
		_, err = e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "ok", Group: wire.Some(bad)}})
		wantCode(t, err, core.ErrBadRequest)
		_, err = e.m.Partition(Key{Topic: bad}, 0)
		wantCode(t, err, core.ErrBadRequest)
		_, err = e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "ok"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: bad})})
		wantCode(t, err, core.ErrBadRequest)
		_, err = e.m.DeclareStream(StreamSpec{Topic: bad})
		wantCode(t, err, core.ErrBadRequest)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// S-22 / S-77: a topic is a queue or a stream for life; the engine never
// creates a queue on a stream topic.
func TestKindForLife_S22(t *testing.T) {
	e := newEnv(t)
	if _, err := e.m.DeclareStream(StreamSpec{Topic: "events", PartitionCount: wire.Some[uint32](2)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "events"}})
	wantCode(t, err, core.ErrBadRequest)
	_, err = e.m.Partition(Key{Topic: "events"}, 0)
	wantCode(t, err, core.ErrBadRequest)
	if !strings.Contains(err.Error(), "use a stream subscribe") {
		t.Fatalf("message %q", err)
	}
	_, err = e.m.Partition(Key{Topic: "events", Group: wire.Some("g")}, 0)
	wantCode(t, err, core.ErrBadRequest)
	if len(e.m.Queues()) != 0 {
		t.Fatalf("a queue was created on a stream topic: %+v", e.m.Queues())
	}
	e.part("orders", 0)
	_, err = e.m.DeclareStream(StreamSpec{Topic: "orders"})
	wantCode(t, err, core.ErrBadRequest)
	if k, ok := e.m.Kind("events"); !ok || k != KindStream {
		t.Fatalf("Kind(events) = %v %v", k, ok)
	}
	if k, ok := e.m.Kind("orders"); !ok || k != KindQueue {
		t.Fatalf("Kind(orders) = %v %v", k, ok)
	}
	// A named DLQ target must not be a stream either.
	_, err = e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "events"})})
	wantCode(t, err, core.ErrBadRequest)
	e.restart()
	if k, _ := e.m.Kind("events"); k != KindStream {
		t.Fatalf("kind lost on restart")
	}
	_, err = e.m.Partition(Key{Topic: "events"}, 0)
	wantCode(t, err, core.ErrBadRequest)
}

// DeclareStream (S-70, docs/protocol.md#declare) is recorded, idempotent, count fixed.
func TestDeclareStream(t *testing.T) {
	e := newEnv(t)
	spec := StreamSpec{Topic: "events", PartitionCount: wire.Some[uint32](0), Durability: wire.DurabilityDurable,
		Retention: wire.StreamRetention{MaxAgeMillis: wire.Some[uint64](60000)}}
	si, err := e.m.DeclareStream(spec)
	if err != nil || si.PartitionCount != 1 {
		t.Fatalf("%+v %v", si, err)
	}
	if _, err := e.m.DeclareStream(StreamSpec{Topic: "events"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.DeclareStream(StreamSpec{Topic: "events", PartitionCount: wire.Some[uint32](3)})
	wantCode(t, err, core.ErrConflict)
	e.restart()
	ss := e.m.Streams()
	if len(ss) != 1 || ss[0].PartitionCount != 1 || ss[0].Retention.MaxAgeMillis != wire.Some[uint64](60000) || ss[0].Durability != wire.DurabilityDurable {
		t.Fatalf("after restart: %+v", ss)
	}
}

// S-21: standalone auto-creates on first use (one partition, no DLQ,
// max_retries 5); without AutoCreate an undeclared queue is a 404.
func TestAutoCreate_S21(t *testing.T) {
	e := newEnv(t)
	p, err := e.m.Partition(Key{Topic: "auto", Group: wire.Some("g")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.pub(p, "x")
	qs := e.m.Queues()
	if len(qs) != 1 || qs[0].PartitionCount != 1 || qs[0].DLQ.Present || qs[0].MaxRetries != 5 || qs[0].Group != wire.Some("g") {
		t.Fatalf("auto-created: %+v", qs)
	}
	_, err = e.m.Partition(Key{Topic: "auto", Group: wire.Some("g")}, 1)
	wantCode(t, err, core.ErrNotFound)

	e.opts.AutoCreate = false
	e.restart()
	_, err = e.m.Partition(Key{Topic: "other"}, 0)
	wantCode(t, err, core.ErrNotFound)
	if _, err := e.m.Partition(Key{Topic: "auto", Group: wire.Some("g")}, 0); err != nil {
		t.Fatalf("auto-created queue lost on restart: %v", err)
	}
}

// S-15: the group is part of the identity; (t) and (t, g) are two queues.
func TestGroupsAreSeparateQueues_S15(t *testing.T) {
	e := newEnv(t)
	a := e.part("t", 0)
	b, err := e.m.Partition(Key{Topic: "t", Group: wire.Some("g")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.pub(a, "in-default")
	_, ra := e.sub(a, 10, false)
	_, rb := e.sub(b, 10, false)
	wantPayloads(t, ra.take(), "in-default")
	if ds := rb.take(); len(ds) != 0 {
		t.Fatalf("group queue got %q", payloads(ds))
	}
}
