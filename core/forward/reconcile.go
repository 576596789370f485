package forward

import (
	"time"

	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// view is the forwarded subscription as RECONCILE_RESULT shows it.
func (fs *fwdSub) view() wire.ReconcileSub {
	return wire.ReconcileSub{SubID: fs.clientID, Topic: fs.req.Topic, Partition: fs.req.Partition, Group: fs.req.Group,
		AutoAck: fs.req.AutoAck, Prefetch: fs.req.Prefetch}
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
// exists: a listed subscription this connection forwards is kept; a listed
// one whose partition this broker forwards but that has no upstream
// subscription here (a new connection after a reconnect) is
// recreate_client_side when manual-ack and close_client_side when
// auto-ack, under either policy; a forwarded subscription the client no
// longer lists is closed on the owner (an upstream RECONCILE_CLIENT that
// lists only the ones kept). add records each verdict; the other listed
// entries are returned for the local reconcile.
func (r *Relay) Reconcile(listed []wire.ReconcileSub, add func(client, server wire.Option[wire.ReconcileSub], v Verdict)) (rest []wire.ReconcileSub) {
	keep := map[subKey]bool{}
	for _, cs := range listed {
		key := keyOf(cs.Topic, cs.Group, cs.Partition)
		r.mu.Lock()
		fs := r.subs[key]
		r.mu.Unlock()
		switch {
		case fs != nil && fs.up != nil:
			keep[key] = true
			v := Matched
			if fs.clientID != cs.SubID {
				v = IDChanged
			}
			add(wire.Some(cs), wire.Some(fs.view()), v)
		case fs == nil && r.gw.dial != nil && r.c.Route(cs.Topic, cs.Group, cs.Partition, false, 0).Owner != "":
			if cs.AutoAck {
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, Missing)
			} else {
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, Recreate)
			}
		default:
			rest = append(rest, cs)
		}
	}
	// Forwarded subscriptions the client dropped: closed on their owners.
	r.mu.Lock()
	dropped := map[*upstream]bool{}
	for key, fs := range r.subs {
		if fs.up == nil || keep[key] {
			continue
		}
		dropped[fs.up] = true
		delete(r.subs, key)
		delete(fs.up.subs, fs.ownerID)
		add(wire.Option[wire.ReconcileSub]{}, wire.Some(fs.view()), ClientMissing)
	}
	upstreamLists := map[*upstream][]wire.ReconcileSub{}
	for u := range dropped {
		var kept []wire.ReconcileSub
		for _, fs := range u.subs {
			v := fs.view()
			v.SubID = fs.ownerID
			kept = append(kept, v)
		}
		upstreamLists[u] = kept
	}
	r.mu.Unlock()
	for u, kept := range upstreamLists {
		_ = u.call(time.Now(), wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: kept},
			func(upclient.Frame, error) {})
	}
	return rest
}
