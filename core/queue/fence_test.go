package queue

import (
	"errors"
	"testing"
)

// The engine's fence: once the queue's version is raised, an append
// routed by an older one is refused under the partition's lock; a dead
// letter (no route) is not fenced; Cutover reads the end, or the first
// offset a newer version took before the raise, and with hold holds
// deliveries from there in the same step.
func TestFenceAndCutover(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 2)
	p := e.partOf(jobs, 0)
	e.pub(p, "old", func(m *Message) { m.PartitioningVersion = 0 })
	e.pub(p, "early", func(m *Message) { m.PartitioningVersion = 1 }) // a producer ahead of this broker
	e.pub(p, "late old", func(m *Message) { m.PartitioningVersion = 0 })

	info, err := e.m.GrowQueue(jobs, 2, 1) // the same count: only the version moves
	wantInfo(t, info, err, 2, 1)
	if err := p.Publish(&Message{Payload: []byte("stale")}, nil); !errors.Is(err, ErrStalePartitioning) {
		t.Fatalf("a publish routed by version 0 after the raise: %v", err)
	}
	if cut := p.Cutover(true); cut != 1 {
		t.Fatalf("cutover %d, want 1 (where the first message of the new layout went)", cut)
	}
	if from, held := p.Hold(); !held || from != 1 {
		t.Fatalf("hold after Cutover(true): %d %v", from, held)
	}
	e.pub(p, "new", func(m *Message) { m.PartitioningVersion = 1 })
	_, rec := e.sub(p, 10, true)
	wantPayloads(t, rec.take(), "old")
	p.ReleaseHold()
	wantPayloads(t, rec.take(), "early", "late old", "new")
	if cut := p.Cutover(false); cut != 4 {
		t.Fatalf("a second cutover %d, want the end, 4", cut)
	}
	if err := p.append(&record{Payload: []byte("dead letter")}, nil, false); err != nil {
		t.Fatalf("an unrouted append: %v", err)
	}
}
