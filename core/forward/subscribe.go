package forward

import (
	"bytes"
	"fmt"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Subscribe relays a queue SUBSCRIBE to owner (reader goroutine): the
// client's prefetch goes up as asked, and the SUBSCRIBE_OK comes back with
// a client-facing sub id from FirstSubID up.
func (r *Relay) Subscribe(id uint64, body []byte, req wire.Subscribe, owner core.NodeID) {
	if req.ConsumerGroup.Present {
		r.replyError(id, wire.CodeBadRequest, "exclusive consumer groups are not supported by this broker yet")
		return
	}
	key := keyOf(req.Topic, req.Group, req.Partition)
	r.mu.Lock()
	_, dup := r.subs[key]
	if !dup && r.c.HasSubscription(req.Topic, req.Group, req.Partition) {
		dup = true
	}
	if dup {
		r.mu.Unlock()
		r.replyError(id, wire.CodeConflict, fmt.Sprintf("already subscribed to %s partition %d on this connection", req.Topic, req.Partition))
		return
	}
	fs := &fwdSub{key: key, req: req, clientID: FirstSubID + r.nextSub}
	r.nextSub++
	if r.subs == nil {
		r.subs = make(map[subKey]*fwdSub)
	}
	r.subs[key] = fs // reserved while SUBSCRIBE is in flight
	r.mu.Unlock()
	unreserve := func() {
		r.mu.Lock()
		if r.subs[key] == fs {
			delete(r.subs, key)
		}
		r.mu.Unlock()
	}
	r.c.DeferReply()
	call := &subscribeCall{id: id, req: req, key: key, fs: fs, unreserve: unreserve}
	r.withUpstream(owner, body, func(u *upstream, body []byte, err error) {
		if err != nil {
			unreserve()
			r.answerError(id, core.Code(err), err.Error())
			return
		}
		r.relaySubscribe(call, body, u)
	})
}

// subscribeCall is one forwarded SUBSCRIBE: the client's request, its
// reserved subscription and whether it was already re-sent after a move.
type subscribeCall struct {
	id        uint64
	req       wire.Subscribe
	key       subKey
	fs        *fwdSub
	unreserve func()
	resent    bool
}

// relaySubscribe is Subscribe once the upstream session is open.
// An owner that answers REDIRECT while this broker's view names another
// private owner gets the SUBSCRIBE once more, there (core/forward/README.md#upstream-sessions, as a
// publish does); that answer is final.
func (r *Relay) relaySubscribe(call *subscribeCall, body []byte, u *upstream) {
	id, fs, unreserve := call.id, call.fs, call.unreserve
	reroute := func() Target { return r.c.Route(call.req.Topic, call.req.Group, call.req.Partition, false, 0) }
	var kept []byte
	if !call.resent {
		kept = bytes.Clone(body) // for the one re-send after a move
	}
	r.gw.m.BytesOut.Add(float64(wire.HeaderSize + len(body)))
	// In flight on u from here: an upstream RECONCILE_CLIENT written after
	// this SUBSCRIBE lists it (upstream.order).
	u.order.Lock()
	defer u.order.Unlock()
	r.mu.Lock()
	if r.subs[call.key] == fs {
		fs.on = u
	}
	r.mu.Unlock()
	err := u.call(time.Now(), wire.OpSubscribe, rawBody(body), func(f upclient.Frame, err error) {
		if err == nil && f.Op == wire.OpSubscribeOK {
			var ok wire.SubscribeOK
			if derr := ok.Decode(f.Body); derr != nil {
				unreserve()
				r.answerError(id, wire.CodeUnavailable, "the owner's SUBSCRIBE_OK is malformed: "+derr.Error())
				return
			}
			r.mu.Lock()
			if r.closed || r.subs[call.key] != fs {
				r.mu.Unlock()
				return // the connection ended; the upstream's close releases it
			}
			fs.up, fs.ownerID, fs.on = u, ok.SubID, nil
			u.subs[ok.SubID] = fs
			r.mu.Unlock()
			ok.SubID = fs.clientID
			// Queued here, on the upstream reader, before any DELIVER of
			// the subscription is read: SUBSCRIBE_OK goes out first.
			r.gw.m.Requests.WithLabelValues(wire.OpSubscribe.String(), "ok").Inc()
			r.c.Answer(wire.OpSubscribeOK, id, &ok)
			return
		}
		if err == nil && f.Op == wire.OpRedirect && !call.resent {
			if rt := reroute(); rt.Owner != "" && rt.Owner != u.owner {
				r.gw.m.Requests.WithLabelValues(wire.OpSubscribe.String(), "moved").Inc()
				call.resent = true
				go func() {
					u2, err := r.upstreamFor(rt.Owner)
					if err != nil {
						unreserve()
						r.answerError(id, core.Code(err), err.Error())
						return
					}
					r.relaySubscribe(call, kept, u2)
					u2.pinned.Add(-1)
				}()
				return
			}
		}
		unreserve()
		if err == nil && f.Op == wire.OpSubscribeErr {
			f.Op = wire.OpError // docs/protocol.md#answers: subscribe failures use ERROR
		}
		r.answerForwarded(wire.OpSubscribe, id, u.owner, reroute, f, err)
	})
	if err != nil {
		unreserve()
		r.answerError(id, wire.CodeUnavailable, notSent(err))
	}
}

// Settle relays an ACK or NACK for a forwarded subscription to the
// upstream that holds it; it reports false when the partition has no
// forwarded subscription on this connection (reader goroutine).
func (r *Relay) Settle(op wire.Op, topic string, group wire.Option[string], partition uint32, body []byte) bool {
	r.mu.Lock()
	fs := r.subs[keyOf(topic, group, partition)]
	var u *upstream
	if fs != nil {
		u = fs.up
	}
	r.mu.Unlock()
	if fs == nil {
		return false
	}
	if u == nil {
		return true // SUBSCRIBE still in flight: nothing was delivered to settle
	}
	u.lastUse.Store(time.Now().UnixNano())
	r.gw.m.BytesOut.Add(float64(wire.HeaderSize + len(body)))
	if err := u.up.Conn.Send(op, 0, rawBody(body)); err != nil {
		r.c.Drop(op, "upstream_lost")
	}
	return true
}
