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

// A message a producer ahead of this broker routed by a newer layout is
// not delivered, nor anything after it, while this broker's queue still
// has the older version (a lag hold): the partition may be a shrink's
// survivor, and such a message could overtake an older one of its key in
// a merge source. The broker puts the transition's own hold in place
// before the raise (here SetHold(0), as for a survivor whose cutover is
// not read yet); the cutover then holds exactly from the note. On a
// partition that holds nothing for the transition, Cutover delivers what
// the lag hold kept back; and a version no raise reaches holds nothing
// after lagHoldLimit.
func TestNewerRoutedMessageWaitsForTheRaise(t *testing.T) {
	v := func(version uint64) func(*Message) {
		return func(m *Message) { m.PartitioningVersion = version }
	}
	e := newEnv(t)
	e.declare(jobs, 2)
	survivor, other := e.partOf(jobs, 0), e.partOf(jobs, 1)
	_, rec := e.sub(survivor, 10, true)
	_, otherRec := e.sub(other, 10, true)
	e.pub(survivor, "old", v(0))
	wantPayloads(t, rec.take(), "old")
	e.pub(survivor, "early", v(1)) // a producer ahead of this broker
	e.pub(survivor, "late old", v(0))
	e.pub(other, "other early", v(1))
	wantPayloads(t, rec.take())
	wantPayloads(t, otherRec.take())
	if state, _, _ := survivor.stateOf(1); state != StateHeld {
		t.Errorf("the early message's state: %s, want %s", state, StateHeld)
	}

	survivor.SetHold(0) // the broker, before the raise
	info, err := e.m.ShrinkQueue(jobs, 2, 1)
	wantInfo(t, info, err, 2, 1)
	wantPayloads(t, rec.take())
	if cut := survivor.Cutover(true); cut != 1 {
		t.Fatalf("cutover %d, want 1", cut)
	}
	survivor.SetHold(1) // the broker, once it has read the cutover
	wantPayloads(t, rec.take())
	survivor.ReleaseHold() // the merge sources drained
	wantPayloads(t, rec.take(), "early", "late old")

	if cut := other.Cutover(false); cut != 0 {
		t.Fatalf("the other partition's cutover %d, want 0", cut)
	}
	wantPayloads(t, otherRec.take(), "other early")

	e.pub(other, "from nowhere", v(7)) // a version no raise reaches
	e.pub(other, "after it", v(1))
	wantPayloads(t, otherRec.take())
	e.clock.Advance(lagHoldLimit)
	wantPayloads(t, otherRec.take(), "from nowhere", "after it")
}
