package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// copyReplica does by hand what a replication stream does: the owner's
// records, then its checkpoint, into the follower's replica.
func copyReplica(t *testing.T, from interface {
	ReplicationLog() (*storage.Partition, error)
	ReplicationCheckpoint() (uint64, []byte, []byte)
}, to *storage.Partition) {
	t.Helper()
	lg, err := from.ReplicationLog()
	if err != nil {
		t.Fatal(err)
	}
	var recs []storage.Record
	if err := lg.Scan(0, func(r storage.Record) bool {
		recs = append(recs, storage.Record{Offset: r.Offset, Timestamp: r.Timestamp, Data: append([]byte(nil), r.Data...)})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	if err := to.AppendReplica(0, recs, func(_ uint64, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, settled, engine := from.ReplicationCheckpoint()
	if err := to.InstallState(settled, engine); err != nil {
		t.Fatal(err)
	}
}

// A follower's replica, once closed, is served by the engine as after a
// restart: what the owner settled stays settled, a NACKed message keeps
// its retry count and delay; while the replica is open the engine refuses
// the partition, and the owner's served partition cannot become a replica.
func TestReplicaIsServedLikeARecoveredPartition(t *testing.T) {
	owner := newEnv(t)
	p := owner.part("orders", 0)
	owner.pubN(p, 10, "m")
	s, r := owner.sub(p, 10, false)
	ds := r.take()
	if len(ds) != 10 {
		t.Fatalf("%d deliveries, want 10", len(ds))
	}
	s.Ack(ds[0].Tag, ds[1].Tag, ds[2].Tag)
	s.Nack([]uint64{ds[5].Tag}, true, wire.Some(uint64(owner.nowMs()+60_000)))
	s.Close()

	follower := newEnv(t, func(o *Options) { o.LazyPartitions = true; o.AutoCreate = false })
	if _, err := follower.m.DeclareQueue(QueueSpec{Key: Key{Topic: "orders"}, PartitionCount: wire.Some(uint32(1))}); err != nil {
		t.Fatal(err)
	}
	rep, err := follower.m.OpenReplica(Key{Topic: "orders"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.m.OpenReplica(Key{Topic: "orders"}, 0); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("a second replica: %v, want a conflict", err)
	}
	if _, err := follower.m.Partition(Key{Topic: "orders"}, 0); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("serving a partition open as a replica: %v, want unavailable", err)
	}
	if _, err := owner.m.OpenReplica(Key{Topic: "orders"}, 0); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("a served partition as a replica: %v, want a conflict", err)
	}
	copyReplica(t, p, rep)
	if err := follower.m.CloseReplica(Key{Topic: "orders"}, 0); err != nil {
		t.Fatal(err)
	}

	fp := follower.part("orders", 0)
	d := fp.Depth()
	if d.Ready != 6 || d.Delayed != 1 {
		t.Fatalf("depth on the promoted replica %+v, want 6 ready and 1 delayed", d)
	}
	_, fr := follower.sub(fp, 20, true)
	got := fr.take()
	if len(got) != 6 {
		t.Fatalf("%d deliveries from the promoted replica, want 6", len(got))
	}
	for _, d := range got {
		if d.Offset < 3 || d.Offset == 5 {
			t.Fatalf("offset %d delivered: settled or delayed on the owner", d.Offset)
		}
	}
	follower.clock.Advance(61 * time.Second)
	testRetried := fr.take()
	if len(testRetried) != 1 || testRetried[0].Offset != 5 {
		t.Fatalf("after the delay: %v, want offset 5 redelivered", offsets(testRetried))
	}
	if v, ok := header(testRetried[0], "fibril.retries"); !ok || v != "1" {
		t.Fatalf("redelivery of the NACKed message: retries header %q %t, want 1", v, ok)
	}
}

// A replica cut back holds what came before the cut, and nothing after.
func TestTruncateReplica(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.LazyPartitions = true })
	p := e.part("orders", 0)
	e.pubN(p, 10, "m")
	e.restart() // the engine no longer holds the partition open
	key := Key{Topic: "orders"}
	if _, err := e.m.TruncateReplica(key, 0, 4); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("truncating a partition not open as a replica: %v", err)
	}
	if _, err := e.m.OpenReplica(key, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := e.m.TruncateReplica(key, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, next := rep.Bounds(); next != 4 {
		t.Fatalf("replica next %d after the cut at 4", next)
	}
	if err := e.m.CloseReplica(key, 0); err != nil {
		t.Fatal(err)
	}
	if d := e.part("orders", 0).Depth(); d.Ready != 4 {
		t.Fatalf("served after the cut: %+v, want 4 ready", d)
	}
}

// The owner records each assignment epoch in the log's history once; an
// older epoch is refused.
func TestBeginEpoch(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	for _, ep := range []uint64{3, 3, 5} {
		if err := p.BeginEpoch(ep); err != nil {
			t.Fatal(err)
		}
		e.pubN(p, 2, "m")
	}
	lg, _ := p.ReplicationLog()
	if got := lg.Epochs(); len(got) != 2 || got[0] != (storage.EpochStart{Epoch: 3, Start: 0}) || got[1] != (storage.EpochStart{Epoch: 5, Start: 4}) {
		t.Fatalf("history %v", got)
	}
	if err := p.BeginEpoch(4); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("an older epoch: %v, want unavailable", err)
	}
}

// After a restart, the epoch the history ends with is not written under
// again: BeginEpoch asks for a newer one.
func TestBeginEpochAfterARestartNeedsANewEpoch(t *testing.T) {
	e := newEnv(t)
	if err := e.part("orders", 0).BeginEpoch(5); err != nil {
		t.Fatal(err)
	}
	e.restart()
	p := e.part("orders", 0)
	var used *EpochUsedError
	if err := p.BeginEpoch(5); !errors.As(err, &used) || used.Last != 5 {
		t.Fatalf("the same epoch after a restart: %v, want EpochUsedError{5}", err)
	}
	if err := p.BeginEpoch(6); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginEpoch(6); err != nil {
		t.Fatalf("the new epoch again in this process: %v", err)
	}
}

// Release closes a served partition so that it can be opened as a replica
// (a deposed owner rejoining as a follower), and the old *Partition
// answers ErrUnavailable from then on.
func TestReleaseThenReplica(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.LazyPartitions = true })
	p := e.part("orders", 0)
	e.pub(p, "a")
	key := Key{Topic: "orders"}
	if _, err := e.m.OpenReplica(key, 0); err == nil {
		t.Fatal("opened a replica of a partition the engine serves")
	}
	if err := e.m.Release(key, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.Publish(&Message{Payload: []byte("b"), Received: e.nowMs()}, nil), core.ErrUnavailable)
	rep, err := e.m.OpenReplica(key, 0)
	if err != nil {
		t.Fatalf("OpenReplica after Release: %v", err)
	}
	if _, next := rep.Bounds(); next != 1 {
		t.Fatalf("the replica holds %d records, want the 1 published", next)
	}
	if err := e.m.CloseReplica(key, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Release(key, 0); err != nil { // not open: nothing to do
		t.Fatal(err)
	}
	if q := e.part("orders", 0); q == p {
		t.Fatal("the engine served the released partition again")
	}
}
