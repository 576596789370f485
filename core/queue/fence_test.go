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

// A grow's new partitions are no sources of the grow, so nobody asks
// them for a cutover then. A message a producer ahead of this broker
// routed to one by the grow's layout, before this broker raised the
// version, is no newer message once the version is raised: it must not
// bound the partition's cutover in the next transition, where the
// partition is a source and everything it took by the grow's layout is
// old backlog. Nor may it hide a message routed by the next transition's
// layout ahead of this broker, which does bound that cutover.
func TestCutoverForgetsAnEarlierTransitionsNewer(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 1)
	info, err := e.m.GrowQueue(jobs, 3, 0) // a grow 1 → 3's marker: both layouts' partitions, the old version
	wantInfo(t, info, err, 3, 0)
	p1, p2 := e.partOf(jobs, 1), e.partOf(jobs, 2)
	for _, p := range []*Partition{p1, p2} {
		e.pub(p, "early", func(m *Message) { m.PartitioningVersion = 1 }) // a producer ahead of this broker
	}
	info, err = e.m.GrowQueue(jobs, 3, 1) // the grow's cutover, in this broker's view
	wantInfo(t, info, err, 3, 1)
	for _, p := range []*Partition{p1, p2} {
		e.pub(p, "by the grow's layout", func(m *Message) { m.PartitioningVersion = 1 })
	}
	e.pub(p2, "ahead of the shrink", func(m *Message) { m.PartitioningVersion = 2 })
	info, err = e.m.ShrinkQueue(jobs, 3, 2) // a shrink 3 → 1 cuts over: partitions 1 and 2 are its sources
	wantInfo(t, info, err, 3, 2)
	if cut := p1.Cutover(false); cut != 2 {
		t.Errorf("the shrink's cutover of partition 1: %d, want its end, 2 (both messages were routed by the layout the shrink replaces)", cut)
	}
	if cut := p2.Cutover(false); cut != 2 {
		t.Errorf("the shrink's cutover of partition 2: %d, want 2, where the first message routed by the shrink's layout went", cut)
	}
}
