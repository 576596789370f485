package raft

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// electionPrefix holds the election locks (reserved: users cannot write
// there).
const electionPrefix = "_elections/"

// Campaign implements core.Coordinator with a lease-backed lock: the
// leader of an election is whoever holds _elections/<name>, bound to a
// lease this member keeps renewed. The term is the lock key's version at
// acquisition, a raft index, so a later term is always greater.
func (c *Coordinator) Campaign(ctx context.Context, election string) (core.Leadership, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := core.CheckKey(election); err != nil {
		return nil, err
	}
	key := electionPrefix + election
	ttl := max(c.opts.LivenessTTL, c.MinTTL())
	for {
		kvs, idx, err := c.List(ctx, key)
		if err != nil {
			return nil, err
		}
		// Wait, on the local replica, for the lock to be free.
		for holder(kvs, key) != nil {
			if kvs, idx, err = c.Watch(ctx, key, idx); err != nil {
				return nil, err
			}
		}
		l, err := c.GrantLease(ctx, ttl)
		if err != nil {
			return nil, err
		}
		ls := l.(*lease)
		term, err := ls.put(ctx, key, []byte(c.opts.NodeID), 0)
		if err == nil {
			c.log.Info("raft: won an election", "election", election, "term", term)
			return c.newLeadership(key, term, ls), nil
		}
		// Someone else won the race (or the write failed): drop the
		// unused lease in the background; it would expire anyway.
		go func() {
			rctx, cancel := context.WithTimeout(c.ctx, ttl)
			defer cancel()
			_ = ls.Revoke(rctx)
		}()
		if !errors.Is(err, core.ErrVersionConflict) && !isLeaseLost(err) {
			return nil, err
		}
	}
}

func holder(kvs []core.KV, key string) *core.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			return &kvs[i]
		}
	}
	return nil
}

// leadership is one won term. It ends when the lease cannot be renewed
// before its ValidUntil, when the lock key changes under it, on Resign,
// or when the Coordinator closes.
type leadership struct {
	c     *Coordinator
	key   string
	term  uint64
	lease *lease

	ctx    context.Context
	cancel context.CancelFunc
	lost   chan struct{}
	once   sync.Once
}

func (c *Coordinator) newLeadership(key string, term uint64, l *lease) *leadership {
	ld := &leadership{c: c, key: key, term: term, lease: l, lost: make(chan struct{})}
	ld.ctx, ld.cancel = context.WithCancel(c.ctx)
	go ld.keepRenewed()
	go ld.watchLock()
	return ld
}

func (ld *leadership) Term() uint64          { return ld.term }
func (ld *leadership) Lost() <-chan struct{} { return ld.lost }

func (ld *leadership) end() {
	ld.once.Do(func() {
		close(ld.lost)
		ld.cancel()
	})
}

// Resign implements core.Leadership: the term ends at once, then the
// lease is revoked, which deletes the lock so another member can win.
func (ld *leadership) Resign(ctx context.Context) error {
	ld.end()
	return ld.lease.Revoke(ctx)
}

// keepRenewed renews the lease every heartbeat interval (at most a third
// of the TTL, so two renewals can fail before it runs out).
func (ld *leadership) keepRenewed() {
	defer ld.end()
	interval := min(ld.c.opts.HeartbeatInterval, ld.lease.ttl/3)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			// A renewal is useless after ValidUntil: bound it there.
			rctx, cancel := context.WithDeadline(ld.ctx, ld.lease.ValidUntil())
			err := ld.lease.Renew(rctx)
			cancel()
			if isLeaseLost(err) || errors.Is(err, core.ErrClosed) {
				return
			}
		case <-ld.lease.Done():
			return
		case <-ld.ctx.Done():
			return
		}
	}
}

// watchLock ends the term if the lock key is deleted or rewritten (an
// operator removing it, or the lease expiring as seen by the replica).
func (ld *leadership) watchLock() {
	defer ld.end()
	after := ld.term - 1
	for {
		kvs, idx, err := ld.c.Watch(ld.ctx, ld.key, after)
		if err != nil {
			return
		}
		if h := holder(kvs, ld.key); h == nil || h.Version != ld.term {
			// The replica may lag the write that made us leader.
			if idx >= ld.term {
				return
			}
		}
		after = idx
	}
}
