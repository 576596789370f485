package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// ErrNotConfirmed is what every refusal of a replica-gated confirm wraps:
// the record may be stored (and may still be delivered), but the
// durability policy did not hold for it, so the producer gets an error —
// never a false confirm (S-141).
var ErrNotConfirmed = errors.New("not confirmed")

// ErrConfirmTimeout: the record did not reach enough replicas within the
// confirm timeout.
var ErrConfirmTimeout = fmt.Errorf("%w: not replicated in time", ErrNotConfirmed)

// ErrTooFewInSync: fewer replicas are in sync than the policy or the
// in-sync floor needs, so a confirm fails at once (S-142).
var ErrTooFewInSync = fmt.Errorf("%w: too few replicas in sync", ErrNotConfirmed)

// Gate holds an owner's confirms of one partition until enough replicas
// hold the records durably (docs/ARCHITECTURE.md#replication): the owner's
// own fsync counts as one copy, each member of the recorded in-sync set
// that reported durable progress past the record as another. The
// replicated watermark — every record below it has that many durable
// copies — is also where deliveries stop under a replica-gated policy.
//
// Offsets are waited for in increasing order (the commit path confirms in
// offset order), so waiters form a queue and one timer serves them all.
type Gate struct {
	mu      sync.Mutex
	fence   uint64            // > 0: no offset at or past fence-1 is confirmed or delivered (SetFence)
	need    int               // durable copies a confirm needs, the owner's included
	floor   int               // replication.min_in_sync_replicas: fewer in-sync replicas fail at once
	local   uint64            // the owner's durable next offset
	members map[string]uint64 // in-sync followers → durable next offset they reported
	waits   []gateWait
	timeout time.Duration
	timer   *time.Timer
	now     func() time.Time

	confirmed uint64       // the highest watermark reached: every record below it met the policy
	told      uint64       // the watermark advanced last heard (lowered with the watermark)
	advanced  func(uint64) // hears the watermark rise (OnAdvance)
}

type gateWait struct {
	off      uint64
	deadline time.Time
	done     func(error)
}

// NewGate returns a gate that needs need durable copies (the owner's
// included) from the owner and the in-sync followers members, failing a
// confirm after timeout.
func NewGate(need int, members []string, timeout time.Duration) *Gate {
	g := &Gate{timeout: timeout, now: time.Now}
	g.setMembersLocked(need, members)
	return g
}

// SetMinInSync sets the in-sync floor: while fewer replicas than n (the
// owner included) are in sync, confirms fail at once.
func (g *Gate) SetMinInSync(n int) {
	g.mu.Lock()
	g.floor = n
	g.mu.Unlock()
}

// ErrHandingOff answers the confirms a fence refuses: the partition is
// being handed to another broker, which may not hold the record. It is
// retryable (503); the message may be stored here and is then dropped.
var ErrHandingOff = fmt.Errorf("%w: the partition is being handed to another broker; retry: %w", ErrNotConfirmed, core.ErrUnavailable)

// SetFence stops confirms and first deliveries at offset at: waits for
// offsets at or past it fail at once with ErrHandingOff (now and later),
// and the watermark stops below it. The owner fences a partition it is
// about to hand over, so that the new owner, which holds the records
// below the fence, holds every record confirmed here. ClearFence lifts
// it.
func (g *Gate) SetFence(at uint64) {
	g.mu.Lock()
	g.fence = at + 1
	var refused []func(error)
	kept := g.waits[:0]
	for _, w := range g.waits {
		if w.off >= at {
			refused = append(refused, w.done)
		} else {
			kept = append(kept, w)
		}
	}
	g.waits = kept
	g.armLocked()
	g.mu.Unlock()
	for _, d := range refused {
		d(ErrHandingOff)
	}
}

// ClearFence lifts SetFence's fence.
func (g *Gate) ClearFence() {
	g.mu.Lock()
	g.fence = 0
	g.releaseLocked()
}

// SetTimeout sets how long a confirm waits for its copies from now on.
func (g *Gate) SetTimeout(d time.Duration) {
	g.mu.Lock()
	g.timeout = d
	g.mu.Unlock()
}

// OnAdvance has f hear every rise of the watermark, outside the gate's
// lock (also a rise back after the watermark fell). Two calls may arrive
// out of order; f keeps the larger.
func (g *Gate) OnAdvance(f func(watermark uint64)) {
	g.mu.Lock()
	g.advanced = f
	g.mu.Unlock()
}

// SetMembers changes the in-sync set and the copies needed (an in-sync
// set or policy change); a member that stays keeps its progress.
func (g *Gate) SetMembers(need int, members []string) {
	g.mu.Lock()
	g.setMembersLocked(need, members)
	g.releaseLocked()
}

func (g *Gate) setMembersLocked(need int, members []string) {
	m := make(map[string]uint64, len(members))
	for _, id := range members {
		m[id] = g.members[id]
	}
	g.need, g.members = need, m
}

// Local records the owner's own durable next offset.
func (g *Gate) Local(next uint64) {
	g.mu.Lock()
	g.local = max(g.local, next)
	g.releaseLocked()
}

// Progress records a follower's durable next offset; a node outside the
// in-sync set does not count (it may count once it is added).
func (g *Gate) Progress(node string, next uint64) {
	g.mu.Lock()
	cur, ok := g.members[node]
	if !ok {
		g.mu.Unlock()
		return
	}
	g.members[node] = max(cur, next)
	g.releaseLocked()
}

// Watermark is the replicated watermark: every offset below it has the
// durable copies a confirm needs.
func (g *Gate) Watermark() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watermarkLocked()
}

func (g *Gate) watermarkLocked() uint64 {
	if g.need > 1+len(g.members) {
		return 0 // cannot be met; Wait says why
	}
	copies := make([]uint64, 0, 1+len(g.members))
	copies = append(copies, g.local)
	for _, n := range g.members {
		copies = append(copies, n)
	}
	slices.Sort(copies)
	mark := copies[len(copies)-max(g.need, 1)]
	if g.fence > 0 {
		mark = min(mark, g.fence-1)
	}
	return mark
}

// Wait calls done once offset has the durable copies it needs, or with
// an error: at once (ErrTooFewInSync) when fewer replicas are in sync than
// the floor, with ErrConfirmTimeout after the timeout. An in-sync set too
// small for the policy is waited out like slow followers: a follower may
// join it in time (a new partition's followers join within moments). done runs on the goroutine
// that released it and must not block.
func (g *Gate) Wait(offset uint64, done func(error)) {
	g.mu.Lock()
	if have := 1 + len(g.members); have < g.floor {
		floor := g.floor
		g.mu.Unlock()
		done(fmt.Errorf("%w: %d replicas are in sync (the owner and the followers that kept up within replication.isr_timeout_ms) and replication.min_in_sync_replicas is %d", ErrTooFewInSync, have, floor))
		return
	}
	if g.fence > 0 && offset >= g.fence-1 {
		g.mu.Unlock()
		done(ErrHandingOff)
		return
	}
	if offset < g.watermarkLocked() {
		g.mu.Unlock()
		done(nil)
		return
	}
	g.waits = append(g.waits, gateWait{off: offset, deadline: g.now().Add(g.timeout), done: done})
	if len(g.waits) == 1 {
		g.armLocked()
	}
	g.mu.Unlock()
}

// releaseLocked takes the waiters below the watermark off the queue,
// unlocks mu, and then releases them and reports the new watermark
// (outside the lock: a callback may come back to the gate).
func (g *Gate) releaseLocked() {
	mark := g.watermarkLocked()
	g.confirmed = max(g.confirmed, mark)
	var advanced func(uint64)
	switch {
	case mark > g.told:
		g.told, advanced = mark, g.advanced
	case mark < g.told:
		g.told = mark // a stricter policy or a smaller set: tell the next rise
	}
	n := 0
	for n < len(g.waits) && g.waits[n].off < mark {
		n++
	}
	var done []func(error)
	if n > 0 {
		done = make([]func(error), n)
		for i := range n {
			done[i] = g.waits[i].done
		}
		g.waits = append(g.waits[:0], g.waits[n:]...)
		g.armLocked()
	}
	g.mu.Unlock()
	for _, d := range done {
		d(nil)
	}
	if advanced != nil {
		advanced(mark)
	}
}

// Confirmed is the highest replicated watermark the gate has reached:
// every record below it met the policy in force when it was reached.
// Unlike Watermark it never falls (a larger policy or a smaller in-sync
// set lowers the watermark, not what was confirmed).
func (g *Gate) Confirmed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.confirmed
}

// State returns the owner's durable next offset and each in-sync
// member's last reported one.
func (g *Gate) State() (local uint64, members map[string]uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.local, maps.Clone(g.members)
}

// armLocked sets the timer for the oldest waiter (one timer for the
// gate's life: a stale firing finds no deadline passed and re-arms).
func (g *Gate) armLocked() {
	if len(g.waits) == 0 {
		if g.timer != nil {
			g.timer.Stop()
		}
		return
	}
	d := max(g.waits[0].deadline.Sub(g.now()), 0)
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.expire)
		return
	}
	g.timer.Reset(d)
}

// expire fails the waiters whose deadline passed.
func (g *Gate) expire() {
	g.mu.Lock()
	now := g.now()
	n := 0
	for n < len(g.waits) && !g.waits[n].deadline.After(now) {
		n++
	}
	late := make([]func(error), n)
	for i := range n {
		late[i] = g.waits[i].done
	}
	g.waits = append(g.waits[:0], g.waits[n:]...)
	g.armLocked()
	timeout, need, have := g.timeout, g.need, 1+len(g.members)
	g.mu.Unlock()
	for _, d := range late {
		d(fmt.Errorf("%w: no confirm within replication.confirm_timeout_ms (%d): replication.durability needs %d durable copies, %d replicas are in sync; the message may still be stored",
			ErrConfirmTimeout, timeout.Milliseconds(), need, have))
	}
}
