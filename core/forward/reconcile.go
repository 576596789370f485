package forward

import (
	"time"

	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// view is the forwarded subscription as RECONCILE_RESULT shows it.
func (fs *fwdSub) view() wire.ReconcileSub {
	return wire.ReconcileSub{SubID: fs.clientID, Topic: fs.req.Topic, Partition: fs.req.Partition, Group: fs.req.Group,
		AutoAck: fs.req.AutoAck, Prefetch: fs.req.Prefetch, ConsumerGroup: fs.req.ConsumerGroup,
		ConsumerTarget: fs.req.ConsumerTarget, MemberID: fs.ownerMember}
}

// Verdict is what the relay's part of a reconcile decided for one
// subscription; the session layer turns it into a RECONCILE_RESULT entry
// and counts it with its own verdicts.
type Verdict int

const (
	// Matched: a forwarded subscription the client listed is kept, with
	// its id.
	Matched Verdict = iota
	// IDChanged: kept, under the relay's client-facing id.
	IDChanged
	// Missing: an auto-ack subscription to a forwarded partition without
	// an upstream subscription here; the client closes its side.
	Missing
	// Recreate: the same, manual-ack; the client subscribes again.
	Recreate
	// ClientMissing: a forwarded subscription the client no longer lists;
	// it is closed on its owner.
	ClientMissing
)

// Reconcile answers the part of a RECONCILE_CLIENT that concerns
// forwarded subscriptions (core/forward/README.md#upstream-sessions; docs/protocol.md#reconcile), until upstream resume
// exists: a listed subscription this connection forwards is kept — also
// while its SUBSCRIBE is in flight, under the id its SUBSCRIBE_OK will
// carry; a listed one whose partition this broker forwards but that has
// no upstream subscription here (a new connection after a reconnect) is
// recreate_client_side when manual-ack and close_client_side when
// auto-ack, under either policy; a forwarded subscription the client no
// longer lists is closed on the owner (an upstream RECONCILE_CLIENT that
// lists only the ones kept). add records each verdict; the other listed
// entries are returned for the local reconcile.
//
// Everything is decided in one look at the forwarded subscriptions, under
// the lock a SUBSCRIBE_OK installs its subscription under: a SUBSCRIBE_OK
// that arrives meanwhile is wholly before or wholly after it, so a
// subscription is never seen in flight by one step and installed by the
// next (and closed as unlisted although the client listed it).
func (r *Relay) Reconcile(listed []wire.ReconcileSub, add func(client, server wire.Option[wire.ReconcileSub], v Verdict)) (rest []wire.ReconcileSub) {
	type found struct {
		ok   bool
		view wire.ReconcileSub
		v    Verdict
	}
	seen := make([]found, len(listed))
	keep := make(map[subKey]bool, len(listed))
	var dropped []wire.ReconcileSub
	closeOn := map[*upstream]bool{}
	r.mu.Lock()
	for i, cs := range listed {
		key := keyOf(cs.Topic, cs.Group, cs.Partition)
		fs := r.subs[key]
		if fs == nil || fs.stream {
			continue
		}
		keep[key] = true
		v := Matched
		if fs.clientID != cs.SubID {
			v = IDChanged
		}
		seen[i] = found{ok: true, view: fs.view(), v: v}
	}
	// Forwarded subscriptions the client dropped: closed on their owners.
	// One whose SUBSCRIBE is still in flight stays: the client sent that
	// SUBSCRIBE and gets its answer.
	for key, fs := range r.subs {
		if fs.up == nil || keep[key] || fs.stream { // stream subscriptions are not reconciled (S-83)
			continue
		}
		closeOn[fs.up] = true
		delete(r.subs, key)
		delete(fs.up.subs, fs.ownerID)
		dropped = append(dropped, fs.view())
	}
	r.mu.Unlock()
	for i, cs := range listed {
		switch {
		case seen[i].ok:
			add(wire.Some(cs), wire.Some(seen[i].view), seen[i].v)
		case r.gw.dial != nil && r.c.Route(cs.Topic, cs.Group, cs.Partition, false, 0).Owner != "":
			if cs.AutoAck {
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, Missing)
			} else {
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, Recreate)
			}
		default:
			rest = append(rest, cs)
		}
	}
	for _, v := range dropped {
		add(wire.Option[wire.ReconcileSub]{}, wire.Some(v), ClientMissing)
	}
	for u := range closeOn {
		r.reconcileUpstream(u)
	}
	return rest
}

// reconcileUpstream sends the owner behind u a RECONCILE_CLIENT that lists
// the forwarded subscriptions it keeps: the installed ones, and the ones
// whose SUBSCRIBE was written on u and is not answered yet (the owner has
// it by the time it reads this frame, and would otherwise close it). The
// owner closes the rest and requeues what they held. Under u.order, so no
// SUBSCRIBE is written on u between the list and the frame.
func (r *Relay) reconcileUpstream(u *upstream) {
	u.order.Lock()
	defer u.order.Unlock()
	var kept []wire.ReconcileSub
	r.mu.Lock()
	for _, fs := range u.subs {
		if fs.stream {
			continue // the owner does not reconcile them (S-83)
		}
		v := fs.view()
		v.SubID = fs.ownerID
		kept = append(kept, v)
	}
	for _, fs := range r.subs {
		if fs.up == nil && fs.on == u && !fs.stream {
			v := fs.view()
			v.SubID = 0 // not known yet; the owner keeps it by partition
			kept = append(kept, v)
		}
	}
	r.mu.Unlock()
	_ = u.call(time.Now(), wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: kept},
		func(upclient.Frame, error) {})
}
