package raft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// Leases live in the FSM (id → TTL and bound keys) but their deadlines do
// not: a deadline is leader-local memory. Renewing is an RPC to the
// leader, which extends the deadline after confirming it still leads; only
// grant, revoke and expiry are log writes. An idle cluster whose nodes
// heartbeat every second therefore writes nothing to disk for it
// (coordination/raft/DESIGN.md#leases-expiry-by-the-leader-renewal-is-not-a-write).

// leaseKeeper holds the leader's deadlines for one term.
type leaseKeeper struct {
	mu       sync.Mutex
	term     uint64 // 0 when this member does not lead
	deadline map[string]time.Time
	expiring map[string]bool // expire submitted: renewals are refused
}

func newLeaseKeeper() *leaseKeeper {
	return &leaseKeeper{deadline: map[string]time.Time{}, expiring: map[string]bool{}}
}

// start begins a term with every lease due a full TTL from now.
func (k *leaseKeeper) start(term uint64, ttls map[string]time.Duration, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.term = term
	clear(k.deadline)
	clear(k.expiring)
	for id, ttl := range ttls {
		k.deadline[id] = now.Add(ttl)
	}
}

func (k *leaseKeeper) stop(term uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term == term {
		k.term = 0
		clear(k.deadline)
		clear(k.expiring)
	}
}

// renew moves a lease's deadline to until (never backwards). It fails
// when the term is over or expiry of the lease has begun.
func (k *leaseKeeper) renew(term uint64, id string, until time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term != term || k.expiring[id] {
		return false
	}
	if until.After(k.deadline[id]) {
		k.deadline[id] = until
	}
	return true
}

// sync aligns the deadlines with the FSM's leases: a new lease is due a
// full TTL from now (its grant was just applied), a gone one is dropped.
func (k *leaseKeeper) sync(term uint64, ttls map[string]time.Duration, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term != term {
		return
	}
	for id, ttl := range ttls {
		if _, ok := k.deadline[id]; !ok {
			k.deadline[id] = now.Add(ttl)
		}
	}
	for id := range k.deadline {
		if _, ok := ttls[id]; !ok {
			delete(k.deadline, id)
			delete(k.expiring, id)
		}
	}
}

// due marks and returns the leases whose deadline has passed, and the
// next deadline among the others (zero when none).
func (k *leaseKeeper) due(term uint64, now time.Time) (ids []string, next time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term != term {
		return nil, time.Time{}
	}
	for id, d := range k.deadline {
		switch {
		case k.expiring[id]:
		case !d.After(now):
			k.expiring[id] = true
			ids = append(ids, id)
		case next.IsZero() || d.Before(next):
			next = d
		}
	}
	return ids, next
}

// unmark lets a lease whose expiry could not be committed be renewed
// again (only within the same term; a new term starts afresh anyway).
func (k *leaseKeeper) unmark(term uint64, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term == term {
		delete(k.expiring, id)
	}
}

// expireLoop commits an expiry for each lease whose deadline passes,
// sleeping until the next deadline or a change in the set of leases.
func (c *Coordinator) expireLoop(ctx context.Context, term uint64) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.keeper.sync(term, c.fsm.leaseTTLs(), time.Now())
		ids, next := c.keeper.due(term, time.Now())
		for _, id := range ids {
			resp := c.leaderApply(ctx, &command{Op: opExpire, Lease: id})
			switch {
			case resp.Code == codeOK && resp.Result != nil && resp.Result.Code == codeOK:
				c.metrics.expirations.Inc()
				c.log.Info("raft: lease expired unrenewed; its keys are deleted", "lease", id)
			case resp.Code == codeOK: // already revoked
			default:
				c.keeper.unmark(term, id)
				if ctx.Err() != nil || resp.Code == codeNotLeader {
					return
				}
				c.log.Warn("raft: could not commit a lease expiry; retrying", "lease", id, "err", resp.Msg)
				next = time.Now().Add(c.opts.RaftTimeout / 4)
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-c.fsm.leasesChanged:
		case <-ctx.Done():
			return
		}
	}
}

// GrantLease implements core.Coordinator. The TTL is raised to MinTTL.
func (c *Coordinator) GrantLease(ctx context.Context, ttl time.Duration) (core.Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ttl = max(ttl, c.MinTTL())
	start := time.Now()
	res, err := c.apply(ctx, &command{Op: opGrant, TTL: ttl})
	if err != nil {
		return nil, err
	}
	return newLease(c, res.Lease, ttl, start.Add(ttl)), nil
}

// AttachLease implements core.LeaseAttacher. A lease lives in the
// replicated state, not in the handle that granted it, so any handle may
// renew it: attaching is a renewal whose answer also carries the TTL.
func (c *Coordinator) AttachLease(ctx context.Context, id string) (core.Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := c.toLeader(ctx, &rpcRequest{Op: rpcRenew, Lease: id})
	if err != nil {
		return nil, err
	}
	switch {
	case resp.Code == codeLeaseLost:
		return nil, fmt.Errorf("raft: lease %s: %w", id, core.ErrLeaseLost)
	case resp.Code != codeOK || resp.TTL <= 0:
		return nil, core.Errorf(core.ErrBadRequest, "raft: attach lease %s: %s", id, resp.Msg)
	}
	return newLease(c, id, resp.TTL, start.Add(resp.TTL)), nil
}

// lease is the holder's handle on a lease.
type lease struct {
	*core.LeaseDeadline
	c   *Coordinator
	id  string
	ttl time.Duration
}

func newLease(c *Coordinator, id string, ttl time.Duration, until time.Time) *lease {
	return &lease{LeaseDeadline: core.NewLeaseDeadline(until), c: c, id: id, ttl: ttl}
}

func (l *lease) ID() string         { return l.id }
func (l *lease) TTL() time.Duration { return l.ttl }

// Renew implements core.Lease: on success ValidUntil = call time + TTL.
func (l *lease) Renew(ctx context.Context) error {
	if err := l.c.check(); err != nil {
		return err
	}
	if l.Lost() {
		return fmt.Errorf("raft: lease %s: %w", l.id, core.ErrLeaseLost)
	}
	start := time.Now()
	resp, err := l.c.toLeader(ctx, &rpcRequest{Op: rpcRenew, Lease: l.id})
	if err != nil {
		return err
	}
	if resp.Code == codeLeaseLost {
		l.Lose()
		return fmt.Errorf("raft: lease %s: %w", l.id, core.ErrLeaseLost)
	}
	if resp.Code != codeOK {
		return core.Errorf(core.ErrBadRequest, "raft: renew: %s", resp.Msg)
	}
	if !l.Extend(start.Add(l.ttl)) {
		// ValidUntil passed while the renewal was in flight: Done is
		// closed and stays closed, so the lease counts as lost here.
		return fmt.Errorf("raft: lease %s: renewed too late: %w", l.id, core.ErrLeaseLost)
	}
	return nil
}

// Put implements core.Lease.
func (l *lease) Put(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if err := l.c.check(); err != nil {
		return 0, err
	}
	if err := core.CheckWritableKey(key); err != nil {
		return 0, err
	}
	return l.put(ctx, key, value, version)
}

// put writes key bound to the lease; Campaign uses it for reserved keys.
func (l *lease) put(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if l.Lost() {
		return 0, fmt.Errorf("raft: lease %s: %w", l.id, core.ErrLeaseLost)
	}
	res, err := l.c.apply(ctx, &command{Op: opPut, Key: key, Value: value, Version: version, Lease: l.id})
	if err != nil {
		if isLeaseLost(err) {
			l.Lose()
		}
		return 0, err
	}
	return res.Version, nil
}

// Revoke implements core.Lease. Revoking a lease that already ended
// succeeds: its keys are gone either way.
func (l *lease) Revoke(ctx context.Context) error {
	if err := l.c.check(); err != nil {
		return err
	}
	_, err := l.c.apply(ctx, &command{Op: opRevoke, Lease: l.id})
	if err != nil && !isLeaseLost(err) {
		return err
	}
	l.Lose()
	return nil
}

func isLeaseLost(err error) bool { return errors.Is(err, core.ErrLeaseLost) }
