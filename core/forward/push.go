package forward

import (
	"encoding/binary"
	"time"

	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// What owners send without being asked — DELIVER, SUBSCRIPTION_CLOSED,
// GOING_AWAY — relayed to the client, and the room that bounds it.

// onPush relays a frame the owner initiated (upstream reader goroutine).
func (u *upstream) onPush(f upclient.Frame) {
	switch f.Op {
	case wire.OpDeliver, wire.OpSubscriptionClosed:
		u.relaySub(f)
	case wire.OpAssignmentChanged:
		// Names the queue and cohort, no subscription: relayed as is.
		r := u.relay()
		if r.ending() {
			if r = r.awaitHandover(u); r == nil {
				return
			}
		}
		if !r.awaitOpen(u) {
			return
		}
		r.gw.m.BytesIn.Add(float64(wire.HeaderSize + len(f.Body)))
		r.queued.Add(int64(len(f.Body)))
		r.c.Push(f.Op, f.RequestID, rawBody(f.Body), len(f.Body))
	case wire.OpGoingAway:
		// Not relayed: the owner is draining; the SUBSCRIPTION_CLOSED
		// frames that follow are, and new operations re-route.
		u.relay().c.Logger().Info("upstream owner is going away", "owner", string(u.owner))
	}
}

// relaySub relays a DELIVER or SUBSCRIPTION_CLOSED with the sub id (the
// first field after the magic) rewritten to the client-facing one.
func (u *upstream) relaySub(f upclient.Frame) {
	if len(f.Body) < 12 {
		return
	}
	ownerID := binary.BigEndian.Uint64(f.Body[4:12])
	r := u.lockRelay()
	fs := u.subs[ownerID]
	if fs != nil && f.Op == wire.OpSubscriptionClosed {
		delete(u.subs, ownerID)
		if r.subs[fs.key] == fs {
			delete(r.subs, fs.key)
		}
	}
	r.mu.Unlock()
	if fs == nil {
		return // a subscription the client no longer has
	}
	if r.ending() {
		if r = r.awaitHandover(u); r == nil {
			return // no client
		}
	}
	if !r.awaitOpen(u) {
		return
	}
	body := f.Body // a push owns its body (client.ConnConfig.OnPush): rewrite it in place
	binary.BigEndian.PutUint64(body[4:12], fs.clientID)
	r.gw.m.BytesIn.Add(float64(wire.HeaderSize + len(body)))
	if r.queued.Load() > relayHighBytes {
		r.waitRelayRoom(u)
		if r.ending() {
			return
		}
	}
	r.queued.Add(int64(len(body)))
	r.c.Push(f.Op, f.RequestID, rawBody(body), len(body))
}

// ending reports that the client connection is ending: its writer writes
// nothing more, so a relayed frame would only be queued for nobody, at the
// owner's rate (an auto-ack subscription is not held back by prefetch)
// until the upstream session closes. Such frames are dropped instead
// (core/forward/README.md#failures): a DELIVER never relayed is never
// settled by this gateway, so the owner requeues it when the upstream
// session ends (an auto-ack one was settled by the owner when it was sent).
func (r *Relay) ending() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// waitRelayRoom parks the upstream reader until the client's writer has
// written enough relayed frames (or either side ends). The upstream's
// heartbeat monitor does not count the wait, and its PINGs keep the owner
// from declaring the upstream dead.
func (r *Relay) waitRelayRoom(u *upstream) {
	unpark := u.link().Conn.ParkReader()
	defer unpark()
	for r.queued.Load() > relayHighBytes {
		select {
		case <-r.done:
			return
		case <-u.link().Conn.Done():
			return
		case <-r.room:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Written is called by the client's writer after it wrote n relayed
// bytes (a frame pushed with ClientConn.Push and relayed = n).
func (r *Relay) Written(n int) {
	if r.queued.Add(-int64(n)) <= relayHighBytes/2 {
		select {
		case r.room <- struct{}{}:
		default:
		}
	}
}

// awaitOpen waits until r's client connection may carry pushes — a
// resumed session's connection is still in its handshake's quiet window
// (docs/protocol.md#quiet-window) — holding the upstream's reader, and
// reports false when the connection or the upstream ended first.
func (r *Relay) awaitOpen(u *upstream) bool {
	select {
	case <-r.c.Opened():
		return true
	default:
	}
	unpark := u.link().Conn.ParkReader()
	defer unpark()
	select {
	case <-r.c.Opened():
		return true
	case <-r.done:
	case <-u.link().Conn.Done():
	}
	return false
}
