package replica

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrConfirmTimeout: the records did not reach enough replicas within
// the confirm timeout. They may still be stored; the producer gets an
// error, never a false confirm.
var ErrConfirmTimeout = errors.New("replica: not replicated in time")

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
	need    int               // durable copies a confirm needs, the owner's included
	local   uint64            // the owner's durable next offset
	members map[string]uint64 // in-sync followers → durable next offset they reported
	waits   []gateWait
	timeout time.Duration
	timer   *time.Timer
	now     func() time.Time
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

// SetMembers changes the in-sync set and the copies needed (an in-sync
// set or policy change); a member that stays keeps its progress.
func (g *Gate) SetMembers(need int, members []string) {
	g.mu.Lock()
	g.setMembersLocked(need, members)
	run(g.releaseLocked())
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
	run(g.releaseLocked())
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
	run(g.releaseLocked())
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
	return copies[len(copies)-max(g.need, 1)]
}

// Wait calls done once offset has the durable copies it needs, or with
// an error: at once when the in-sync set is too small for the policy,
// with ErrConfirmTimeout after the timeout. done runs on the goroutine
// that released it and must not block.
func (g *Gate) Wait(offset uint64, done func(error)) {
	g.mu.Lock()
	if g.need > 1+len(g.members) {
		need, have := g.need, 1+len(g.members)
		g.mu.Unlock()
		done(fmt.Errorf("replica: the durability policy needs %d durable copies and %d replicas are in sync", need, have))
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

// releaseLocked takes the waiters below the watermark off the queue and
// unlocks mu; the caller runs what it returns (outside the lock: a
// callback may come back to the gate).
func (g *Gate) releaseLocked() []func(error) {
	defer g.mu.Unlock()
	mark := g.watermarkLocked()
	n := 0
	for n < len(g.waits) && g.waits[n].off < mark {
		n++
	}
	if n == 0 {
		return nil
	}
	done := make([]func(error), n)
	for i := range n {
		done[i] = g.waits[i].done
	}
	g.waits = append(g.waits[:0], g.waits[n:]...)
	g.armLocked()
	return done
}

func run(done []func(error)) {
	for _, d := range done {
		d(nil)
	}
}

// armLocked sets the timer for the oldest waiter.
func (g *Gate) armLocked() {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	if len(g.waits) == 0 {
		return
	}
	g.timer = time.AfterFunc(max(g.waits[0].deadline.Sub(g.now()), 0), g.expire)
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
	timeout := g.timeout
	g.mu.Unlock()
	for _, d := range late {
		d(fmt.Errorf("%w: no confirm within replication.confirm_timeout_ms (%d)", ErrConfirmTimeout, timeout.Milliseconds()))
	}
}
