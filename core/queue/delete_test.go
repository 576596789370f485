package queue

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// A deleted queue is gone, files and all, also after a restart; one with
// messages in flight needs force; the name can be declared again and
// starts empty.
func TestDeleteQueue(t *testing.T) {
	e := newEnv(t)
	if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, PartitionCount: wire.Some(uint32(2))}); err != nil {
		t.Fatal(err)
	}
	p := e.part("jobs", 0)
	e.pubN(p, 5, "m")
	_, r := e.sub(p, 1, false)
	waitN(t, r, 1)
	_, err := e.m.DeleteQueue(Key{Topic: "jobs"}, false)
	wantCode(t, err, core.ErrConflict)
	rep, err := e.m.DeleteQueue(Key{Topic: "jobs"}, true)
	if err != nil || rep.Partitions != 2 || rep.Messages != 5 {
		t.Fatalf("DeleteQueue = %+v, %v", rep, err)
	}
	if err := p.Publish(&Message{Payload: []byte("x"), Received: e.nowMs()}, nil); err == nil {
		t.Fatal("a publish to a deleted partition succeeded")
	}
	if e.m.HasQueue(Key{Topic: "jobs"}) {
		t.Fatal("the queue is still known")
	}
	if _, err := os.Stat(filepath.Join(e.opts.Dir, "q", "jobs", "@default")); !os.IsNotExist(err) {
		t.Fatalf("the queue's files remain: %v", err)
	}
	_, err = e.m.DeleteQueue(Key{Topic: "jobs"}, false)
	wantCode(t, err, core.ErrNotFound)

	e.restart()
	if e.m.HasQueue(Key{Topic: "jobs"}) {
		t.Fatal("the queue came back after a restart")
	}
	if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}}); err != nil {
		t.Fatal(err)
	}
	if d := e.part("jobs", 0).Depth(); d != (Depth{}) {
		t.Fatalf("the declared-again queue starts with %+v", d)
	}
}

// A delete interrupted after the catalog forgot the queue leaves its
// directory behind: declaring the name again does not inherit it.
func TestDeleteLeftoversNotInherited(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 3, "m")
	dir := filepath.Join(e.opts.Dir, "q", "jobs", "@default")
	saved := t.TempDir()
	if err := os.CopyFS(saved, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.DeleteQueue(Key{Topic: "jobs"}, false); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if err := os.CopyFS(dir, os.DirFS(saved)); err != nil { // as if the crash came before the rename
		t.Fatal(err)
	}
	if d := e.part("jobs", 0).Depth(); d != (Depth{}) {
		t.Fatalf("the queue created again inherited %+v", d)
	}
}

// A deleted stream takes its records and durable cursors with it.
func TestDeleteStream(t *testing.T) {
	e := newEnv(t)
	sp := e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	e.spub(sp, "r0")
	e.spub(sp, "r1")
	s, r := e.ssub(sp, StreamSubscribeOptions{DurableName: "audit"})
	waitN(t, r, 2)
	s.Ack(1)
	rep, err := e.m.DeleteStream("events")
	if err != nil || rep.Records != 2 || rep.Partitions != 1 {
		t.Fatalf("DeleteStream = %+v, %v", rep, err)
	}
	e.restart()
	if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "events"}}); err == nil {
		t.Fatal("a deleted stream's name was declared as a queue (S-22)")
	}
	sp = e.stream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable})
	if first, next := sp.Bounds(); first != 0 || next != 0 {
		t.Fatalf("the stream declared again holds [%d,%d)", first, next)
	}
	if _, ok := sp.Cursor("audit"); ok {
		t.Fatal("the durable cursor survived the delete")
	}
}
