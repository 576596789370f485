package queue

import (
	"errors"
	"testing"

	"github.com/fibrilgo/fibril/core"
)

// The engine's fence: once the queue's version is raised, an append
// routed by an older one is refused under the partition's lock; a dead
// letter (no route) is not fenced; while a cutover is awaited a newer
// version is refused with 503; Cutover reads the end and, with hold,
// holds deliveries from it in the same step.
func TestFenceAndCutover(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 2)
	p := e.partOf(jobs, 0)
	e.pub(p, "old", func(m *Message) { m.PartitioningVersion = 0 })

	p.ExpectCutover()
	err := p.Publish(&Message{Payload: []byte("too new"), PartitioningVersion: 1}, nil)
	wantCode(t, err, core.ErrUnavailable)

	info, err := e.m.GrowQueue(jobs, 2, 1) // the same count: only the version moves
	wantInfo(t, info, err, 2, 1)
	if err := p.Publish(&Message{Payload: []byte("stale")}, nil); !errors.Is(err, ErrStalePartitioning) {
		t.Fatalf("a publish routed by version 0 after the raise: %v", err)
	}
	if cut := p.Cutover(true); cut != 1 {
		t.Fatalf("cutover %d, want 1", cut)
	}
	if from, held := p.Hold(); !held || from != 1 {
		t.Fatalf("hold after Cutover(true): %d %v", from, held)
	}
	e.pub(p, "new", func(m *Message) { m.PartitioningVersion = 1 })
	_, rec := e.sub(p, 10, true)
	wantPayloads(t, rec.take(), "old")
	p.ReleaseHold()
	wantPayloads(t, rec.take(), "new")
	if err := p.append(&record{Payload: []byte("dead letter")}, nil, false); err != nil {
		t.Fatalf("an unrouted append: %v", err)
	}
}
