package forward

import (
	"context"
	"errors"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Upstream resume (core/forward/README.md#resume): when an upstream
// session's link drops — not because this broker ended it — the gateway
// dials the owner again with the session's resume identity, every 100 ms
// at first and then up to every second, for as long as the owner keeps a
// dropped session (Limits.ResumeWithin, the cluster's reconnect grace).
// Meanwhile the operations for that owner, settles included, wait in
// order, as they do for a session being opened, and run on the resumed
// session. Requests written before the drop were already answered by the
// connection's end: 504 for a confirmed publish (its outcome is unknown),
// 503 for a subscribe.
//
// Resumed: the owner kept the session, its subscriptions and its delivery
// tags; an upstream RECONCILE_CLIENT lists the forwarded subscriptions,
// the owner closes the ones the client does not hold (a SUBSCRIBE written
// before the drop and answered 503), and any the owner no longer has are
// closed towards the client (partly lost). Anything else — not found,
// rejected, or no answer within the grace — loses the session: its
// subscriptions close towards the client with OwnerMoved (the client's
// supervisor subscribes again), and the waiting operations go to a new
// session.

// resume runs on u's watchdog once its connection ended. It reports
// whether u goes on (on a resumed or new connection); false means u is
// over and the watchdog cleans up.
func (u *upstream) resume() bool {
	r := u.relay()
	within := r.gw.limits().ResumeWithin
	if u.reason.Load() != nil || within <= 0 {
		return false // this broker ended it, or resume is off
	}
	r.mu.Lock()
	if r.closed || r.ups[u.owner] != u || r.opening[u.owner] != nil {
		r.mu.Unlock()
		return false
	}
	delete(r.ups, u.owner) // new operations for the owner wait in o
	o := &opening{done: make(chan struct{})}
	if r.opening == nil {
		r.opening = make(map[core.NodeID]*opening)
	}
	r.opening[u.owner] = o
	u.resuming.Store(true)
	r.mu.Unlock()
	lostErr := u.link().Conn.Err()
	r.c.Logger().Info("upstream session link dropped; resuming it", "owner", string(u.owner), "err", lostErr, "within", within)

	next := u.redial(within)
	outcome, ok := "lost", false
	var closed []*fwdSub
	switch {
	case next == nil:
	case next.Conn.Handshake().Hello.ResumeOutcome == wire.ResumeResumed:
		u.up.Store(next)
		closed = u.reconcileResumed()
		outcome, ok = "resumed", true
		if len(closed) > 0 {
			outcome = "partly_lost"
		}
	default:
		// A new session: the owner ended the old one (or restarted), and
		// with it every subscription.
		u.up.Store(next)
		closed = u.dropSubs()
		ok = true
	}
	r.gw.m.Resumes.WithLabelValues(outcome).Inc()
	r.c.Logger().Info("upstream session resume ended", "owner", string(u.owner), "outcome", outcome,
		"subscriptions_closed", len(closed))
	for _, fs := range closed {
		r.c.Push(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: fs.clientID, Code: wire.ReasonOwnerMoved,
			Message: "the upstream session to the partition's owner was lost; subscribe again"}, 0)
	}

	r.mu.Lock()
	if ok && !r.closed {
		r.ups[u.owner] = u
	} else if ok {
		ok = false // the client connection ended meanwhile: close what was resumed
		u.closing("client_closed")
		go closeUpstream(*next)
	}
	u.resuming.Store(false)
	r.mu.Unlock()
	// The waiting operations run, in order: on u when it goes on, else
	// each through a new session.
	for {
		r.mu.Lock()
		q := o.ops
		if len(q) == 0 {
			delete(r.opening, u.owner)
			close(o.done)
			r.mu.Unlock()
			break
		}
		o.ops, o.bytes = nil, 0
		r.mu.Unlock()
		for _, op := range q {
			if ok {
				u.pinned.Add(1)
				op.run(u, op.body, nil)
				u.pinned.Add(-1)
			} else {
				u2, err := r.upstreamFor(u.owner)
				op.run(u2, op.body, err)
				if u2 != nil {
					u2.pinned.Add(-1)
				}
			}
		}
	}
	return ok
}

// redial dials the owner with the session's resume identity until it
// answers or within has passed since now (nil then).
func (u *upstream) redial(within time.Duration) *Upstream {
	r := u.relay()
	hs := u.link().Conn.Handshake()
	ident := hs.Hello.Identity()
	deadline := time.Now().Add(within)
	var lastErr string
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		select {
		case <-r.done:
			return nil
		case <-time.After(min(wait, time.Until(deadline))):
		}
		if !time.Now().Before(deadline) {
			return nil
		}
		timeout := r.gw.limits().UpstreamConnectTimeout
		if timeout <= 0 {
			timeout = core.DefaultConnectTimeout
		}
		// A path that swallows the handshake (the network still broken)
		// must not take the whole grace: attempts are short.
		ctx, cancel := context.WithTimeout(context.Background(), min(timeout, resumeAttempt, time.Until(deadline)))
		up, err := r.gw.dial(ctx, u.owner, u.fs, &ident, u.onPush)
		cancel()
		if err == nil {
			return &up
		}
		if errors.Is(err, core.ErrPeerNotListening) || errors.Is(err, ErrOwnerNotLive) {
			// The owner's process is gone (its sessions with it), or the
			// cluster declared it dead: nothing to resume.
			r.c.Logger().Info("the upstream session cannot be resumed", "owner", string(u.owner), "err", err)
			return nil
		}
		if msg := err.Error(); msg != lastErr { // once per change
			r.c.Logger().Info("resuming the upstream session: owner not reached yet", "owner", string(u.owner), "err", err)
			lastErr = msg
		}
	}
}

// resumeAttempt bounds one dial of a resume.
const resumeAttempt = time.Second

// reconcileResumed sends the owner the forwarded subscriptions this
// gateway holds on u (conservative: the owner closes the ones not
// listed) and forgets those the owner no longer has, returning them.
func (u *upstream) reconcileResumed() []*fwdSub {
	var listed []wire.ReconcileSub
	r := u.lockRelay()
	for _, fs := range u.subs {
		if fs.stream {
			continue // not reconciled (S-83): the owner kept it or not, as it does for its own clients
		}
		v := fs.view()
		v.SubID = fs.ownerID
		listed = append(listed, v)
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := u.link().Conn.Do(ctx, wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: listed})
	var res wire.ReconcileResult
	if err == nil && f.Op == wire.OpReconcileResult {
		err = res.Decode(f.Body)
	} else if err == nil {
		err = errUnexpectedAnswer(f)
	}
	if err != nil {
		// No verdicts: keep what is listed. A subscription the owner lost
		// then delivers nothing until the client's own checks notice.
		r.c.Logger().Warn("reconciling the resumed upstream session failed", "owner", string(u.owner), "err", err)
		return nil
	}
	gone := map[uint64]bool{}
	for _, e := range res.Entries {
		if cv, ok := e.Client.Get(); ok && e.Action != wire.ActionKeep {
			gone[cv.SubID] = true
		}
	}
	var out []*fwdSub
	r = u.lockRelay()
	for id, fs := range u.subs {
		if gone[id] {
			delete(u.subs, id)
			if r.subs[fs.key] == fs {
				delete(r.subs, fs.key)
			}
			out = append(out, fs)
		}
	}
	r.mu.Unlock()
	return out
}

// dropSubs forgets every forwarded subscription of u (its session is
// gone) and returns them.
func (u *upstream) dropSubs() []*fwdSub {
	r := u.lockRelay()
	defer r.mu.Unlock()
	out := make([]*fwdSub, 0, len(u.subs))
	for id, fs := range u.subs {
		out = append(out, fs)
		delete(u.subs, id)
		if r.subs[fs.key] == fs {
			delete(r.subs, fs.key)
		}
	}
	return out
}

func errUnexpectedAnswer(f upclient.Frame) error {
	return core.Errorf(core.ErrInternal, "RECONCILE_CLIENT answered with %s", f.Op)
}
