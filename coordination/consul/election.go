package consul

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/fibrilgo/fibril/core"
)

// Campaign implements core.Coordinator. The leader of an election is the
// holder of <prefix>/elections/<name>, a key created only when absent and
// bound to a session this member keeps renewed. The term is the key's
// ModifyIndex at creation — a Consul raft index, so a later term is
// always greater (the key's LockIndex would restart at 1 each time the
// key is deleted with its session).
func (c *Coordinator) Campaign(ctx context.Context, election string) (core.Leadership, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := core.CheckKey(election); err != nil {
		return nil, err
	}
	key := c.elRoot + election
	for {
		if err := c.awaitFree(ctx, key); err != nil {
			return nil, err
		}
		ttl := c.MinTTL()
		start := time.Now()
		id, err := c.createSession(ctx, "fibril-election "+election+" "+c.o.NodeID, ttl)
		if err != nil {
			return nil, err
		}
		l := c.newLease(id, ttl, start.Add(ttl))
		term, err := l.put(ctx, key, []byte(c.o.NodeID), 0)
		if err == nil {
			c.o.Logger.Info("consul: won an election", "election", election, "term", term)
			return c.lead(key, term, l), nil
		}
		// Lost the race (or the write failed): drop the session now
		// rather than let it expire.
		rctx, cancel := context.WithTimeout(c.ctx, ttl)
		_ = l.Revoke(rctx)
		cancel()
		if !errors.Is(err, core.ErrVersionConflict) && !isLeaseLost(err) {
			return nil, err
		}
	}
}

// awaitFree blocks (blocking queries, no polling) until the election key
// is absent.
func (c *Coordinator) awaitFree(ctx context.Context, key string) error {
	var index uint64
	for {
		p, next, err := c.watchElectionKey(ctx, key, index, index == 0)
		if err != nil {
			return err
		}
		if p == nil {
			return nil
		}
		index = next
	}
}

// watchElectionKey is one blocking read of an election key: its state
// once Consul's index passes index (at once for 0), and the index to pass
// next — 0 when Consul's index went back, so the next read starts over.
func (c *Coordinator) watchElectionKey(ctx context.Context, key string, index uint64, consistent bool) (*api.KVPair, uint64, error) {
	type answer struct {
		p     *api.KVPair
		index uint64
	}
	a, err := callBlocking(c, ctx, "election watch", func(ctx context.Context, cl *api.Client) (answer, error) {
		q := queryOpts(ctx, consistent)
		q.WaitIndex, q.WaitTime = index, watchWait
		p, meta, err := cl.KV().Get(key, q)
		if err != nil {
			return answer{}, err
		}
		return answer{p, meta.LastIndex}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	if a.index < index {
		a.index = 0
	}
	return a.p, a.index, nil
}

// leadership is one won term. It ends when the session cannot be renewed
// before its ValidUntil, when the key is gone or taken by another
// session, on Resign, or when the Coordinator closes.
type leadership struct {
	c    *Coordinator
	key  string
	term uint64
	l    *lease

	once sync.Once
	lost chan struct{}
	stop context.CancelFunc
}

func (c *Coordinator) lead(key string, term uint64, l *lease) *leadership {
	ctx, stop := context.WithCancel(c.ctx)
	ld := &leadership{c: c, key: key, term: term, l: l, lost: make(chan struct{}), stop: stop}
	c.wg.Add(2)
	go ld.keepAlive(ctx)
	go ld.watchKey(ctx)
	return ld
}

func (ld *leadership) Term() uint64          { return ld.term }
func (ld *leadership) Lost() <-chan struct{} { return ld.lost }

func (ld *leadership) end(why string) {
	ld.once.Do(func() {
		ld.stop()
		close(ld.lost)
		ld.c.o.Logger.Info("consul: leadership ended", "key", ld.key, "term", ld.term, "why", why)
	})
}

// keepAlive renews the session four times per TTL, so that one or two
// failed renewals in a row (an agent restarting) do not end the term.
func (ld *leadership) keepAlive(ctx context.Context) {
	defer ld.c.wg.Done()
	t := time.NewTicker(ld.l.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ld.end("closed")
			return
		case <-ld.l.Done():
			ld.end("session lost")
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, ld.l.ttl/4)
			err := ld.l.Renew(rctx)
			cancel()
			if isLeaseLost(err) {
				ld.end("session lost")
				return
			}
		}
	}
}

// watchKey ends the term when the lock key is deleted or changes holder
// (an operator deleting it, Consul invalidating the session).
func (ld *leadership) watchKey(ctx context.Context) {
	defer ld.c.wg.Done()
	var index uint64
	for ctx.Err() == nil {
		p, next, err := ld.c.watchElectionKey(ctx, ld.key, index, false)
		if err != nil {
			if ctx.Err() == nil {
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		if p == nil || p.Session != ld.l.id || p.ModifyIndex != ld.term {
			ld.end("lock key gone or taken")
			return
		}
		index = next
	}
}

// Resign implements core.Leadership: destroying the session deletes the
// key, so the next candidate wins at once.
func (ld *leadership) Resign(ctx context.Context) error {
	defer ld.end("resigned")
	select {
	case <-ld.lost:
		return nil
	default:
	}
	return ld.l.Revoke(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
