package forward

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// One upstream session's life: counting its requests, watching it for the
// forward timeout and idleness, closing it in order, and cleaning up after
// it.

// upstream is one upstream session of a client connection.
type upstream struct {
	// rel is the relay that holds the session: its client connection's,
	// or, after that client resumed its own session on another
	// connection, that connection's (Relay.Adopt). Its mu guards subs.
	rel   atomic.Pointer[Relay]
	owner core.NodeID
	fs    wire.ForwardedSession // as first sent, for a resume
	up    atomic.Pointer[Upstream]
	subs  map[uint64]*fwdSub // by the owner's sub id; guarded by Relay.mu
	// resuming is set while the session's link is down and being resumed
	// (resume.go): settles wait for it with the other operations.
	resuming atomic.Bool

	outstanding atomic.Int64 // requests sent, not yet answered
	// pinned counts the operations that picked this upstream and have not
	// sent their request yet (a confirmed publish waiting for
	// routing.max_inflight_forward_bytes room): taken under Relay.mu where
	// the upstream is looked up, so the idle watchdog, which decides under
	// the same lock, never closes the session under one of them.
	pinned atomic.Int64
	// order is held while a forwarded SUBSCRIBE is recorded as in flight
	// here and written, and while the reconcile builds the list of
	// subscriptions an upstream RECONCILE_CLIENT keeps and writes it: every
	// SUBSCRIBE written before that RECONCILE_CLIENT is in its list, so the
	// owner never closes one the client still has (reconcile.go).
	order sync.Mutex

	lastProgress atomic.Int64 // unix nanos: last answer, or first request after idle
	lastUse      atomic.Int64 // unix nanos
	gone         chan struct{}
	reason       atomic.Pointer[string] // why this broker ended it (the first reason wins); nil: it was lost
}

// link is the session's current connection (a resume replaces it).
func (u *upstream) link() *Upstream { return u.up.Load() }

// linkLost reports whether the session's connection has ended and no
// resume of it has started yet.
func (u *upstream) linkLost() bool {
	select {
	case <-u.link().Conn.Done():
		return !u.resuming.Load()
	default:
		return false
	}
}

// relay is the relay that holds u now.
func (u *upstream) relay() *Relay { return u.rel.Load() }

// lockRelay locks the mu of the relay that holds u (the one that guards
// u.subs) and returns that relay: u may move to another relay meanwhile.
func (u *upstream) lockRelay() *Relay {
	for {
		r := u.relay()
		r.mu.Lock()
		if u.relay() == r {
			return r
		}
		r.mu.Unlock()
	}
}

// closing records why this broker ends the upstream session, for the log
// line cleanup writes.
func (u *upstream) closing(reason string) { u.reason.CompareAndSwap(nil, &reason) }

// watchEvery is how often an upstream's watchdog looks at its forward
// timeout and idle time (their granularity).
const watchEvery = 250 * time.Millisecond

// begin counts a request sent upstream at t; end its answer.
func (u *upstream) begin(t time.Time) {
	now := t.UnixNano()
	if u.outstanding.Add(1) == 1 {
		u.lastProgress.Store(now)
	}
	u.lastUse.Store(now)
}

func (u *upstream) end() {
	now := time.Now().UnixNano()
	u.lastProgress.Store(now)
	u.lastUse.Store(now)
	u.outstanding.Add(-1)
}

// call sends a request on the upstream at time now and counts it
// outstanding (for the forward timeout) until done has its answer. An
// error means nothing was queued and done will not run.
func (u *upstream) call(now time.Time, op wire.Op, body wire.Encoder, done func(upclient.Frame, error)) error {
	u.begin(now)
	err := u.link().Conn.Go(op, body, func(f upclient.Frame, err error) {
		u.end()
		done(f, err)
	})
	if err != nil {
		u.end()
	}
	return err
}

// notSent is the 503 message of a request that never reached the owner.
func notSent(err error) string {
	return "the request did not reach the partition's owner: " + err.Error() + "; retry"
}

// watch closes the upstream when it dies, when a request waited past
// routing.forward_timeout_ms without any answer (the whole session is
// aborted: core/forward/README.md#failures), or after routing.upstream_idle_close_ms with no
// subscription, no request in flight and no operation about to send one.
func (u *upstream) watch() {
	defer u.cleanup()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-u.link().Conn.Done():
			if u.resume() {
				continue // the same session, on a new connection
			}
			return
		case <-tick.C:
		}
		r := u.relay()
		set := r.gw.limits()
		now := time.Now()
		if u.outstanding.Load() > 0 && set.ForwardTimeout > 0 &&
			now.Sub(time.Unix(0, u.lastProgress.Load())) > set.ForwardTimeout {
			r.c.Logger().Warn("upstream session aborted: no answer within routing.forward_timeout_ms", "owner", string(u.owner),
				"timeout", set.ForwardTimeout, "outstanding", u.outstanding.Load())
			u.closing("forward_timeout")
			u.link().Abort()
			return
		}
		r = u.lockRelay()
		idle := len(u.subs) == 0 && u.outstanding.Load() == 0 && u.pinned.Load() == 0 && set.UpstreamIdleClose > 0 &&
			now.Sub(time.Unix(0, u.lastUse.Load())) > set.UpstreamIdleClose
		if idle {
			delete(r.ups, u.owner) // no new request can pick it up now
		}
		r.mu.Unlock()
		if idle {
			u.closing("idle")
			closeUpstream(*u.link())
			return
		}
	}
}

// cleanup runs once the upstream is over: the forwarded subscriptions it
// carried are closed towards the client with reason OwnerMoved (the
// client's supervisor resubscribes through this broker), and the limit is
// released. Requests in flight were answered by the connection's death
// (503 when never written, 504 for a written confirmed publish).
func (u *upstream) cleanup() {
	r := u.lockRelay()
	if r.ups[u.owner] == u {
		delete(r.ups, u.owner)
	}
	closing := r.closed
	r.mu.Unlock()
	subs := u.dropSubs()
	r.gw.counts.release(u.owner)
	close(u.gone)
	reason, err := "lost", u.link().Conn.Err()
	if why := u.reason.Load(); why != nil {
		reason = *why
	} else if err == nil || errors.Is(err, upclient.ErrClosed) {
		reason = "closed"
	}
	args := []any{"owner", string(u.owner), "reason", reason, "subscriptions_closed", len(subs)}
	if reason == "lost" {
		args = append(args, "err", err)
	}
	r.c.Logger().Info("upstream session closed", args...)
	if closing {
		return
	}
	for _, fs := range subs {
		r.c.Push(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: fs.clientID,
			Code: wire.ReasonOwnerMoved, Message: "the upstream session to the partition's owner ended; subscribe again"}, 0)
	}
}

// closeUpstream ends an upstream session in order (core/forward/README.md#upstream-sessions): an empty
// RECONCILE_CLIENT makes the owner close every forwarded subscription and
// requeue what it held, then the stream ends cleanly, which with
// release_on_close ends the owner's session at once.
func closeUpstream(up Upstream) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := up.Conn.Do(ctx, wire.OpReconcileClient, &wire.ReconcileClient{}); err != nil {
		up.Abort() // the owner keeps its grace, then cleans up
		return
	}
	_ = up.Conn.Close()
}
