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
// An exclusive one (consumer_group) goes up unchanged too: the owner
// resolves its member id and plans its partitions, and its
// ASSIGNMENT_CHANGED comes back as is (push.go).
func (r *Relay) Subscribe(id uint64, body []byte, req wire.Subscribe, owner core.NodeID) {
	r.subscribe(id, body, wire.OpSubscribe, req, false, owner)
}

// SubscribeStream relays a SUBSCRIBE_STREAM to owner (reader goroutine),
// as Subscribe does a queue's SUBSCRIBE. A second one for a partition
// replaces the first (S-72): the owner replaces its subscription when it
// reads the second, so the relay forgets the first one's owner-side id at
// once and relays nothing more for it.
func (r *Relay) SubscribeStream(id uint64, body []byte, req wire.SubscribeStream, owner core.NodeID) {
	// The view a reconcile and the admin page show (stream subscriptions
	// are not reconciled, S-83); a stream has no group.
	view := wire.Subscribe{Topic: req.Topic, Partition: req.Partition, Prefetch: req.Prefetch, AutoAck: req.AutoAck}
	r.subscribe(id, body, wire.OpSubscribeStream, view, true, owner)
}

// subscribe reserves the partition's forwarded subscription — at most one
// per partition and connection, local or forwarded, but a stream's
// replaces a stream's — and sends op on the upstream session to owner
// once it is open.
func (r *Relay) subscribe(id uint64, body []byte, op wire.Op, req wire.Subscribe, stream bool, owner core.NodeID) {
	key := keyOf(req.Topic, req.Group, req.Partition)
	r.mu.Lock()
	old := r.subs[key]
	replace := old != nil && old.stream && stream
	if old != nil && !replace || old == nil && r.c.HasSubscription(req.Topic, req.Group, req.Partition) {
		r.mu.Unlock()
		r.replyError(id, wire.CodeConflict, fmt.Sprintf("already subscribed to %s partition %d on this connection", req.Topic, req.Partition))
		return
	}
	fs := &fwdSub{key: key, req: req, stream: stream, clientID: FirstSubID + r.nextSub}
	r.nextSub++
	if r.subs == nil {
		r.subs = make(map[subKey]*fwdSub)
	}
	r.subs[key] = fs // reserved while the request is in flight
	if replace && old.up != nil {
		delete(old.up.subs, old.ownerID)
	}
	r.mu.Unlock()
	unreserve := func() {
		r.mu.Lock()
		if r.subs[key] == fs {
			delete(r.subs, key)
		}
		r.mu.Unlock()
	}
	r.c.DeferReply()
	call := &subscribeCall{id: id, op: op, req: req, key: key, fs: fs, unreserve: unreserve}
	r.withUpstream(owner, body, func(u *upstream, body []byte, err error) {
		if err != nil {
			unreserve()
			r.answerError(id, core.Code(err), err.Error())
			return
		}
		r.relaySubscribe(call, body, u)
	})
}

// subscribeCall is one forwarded SUBSCRIBE or SUBSCRIBE_STREAM: the
// client's request, its reserved subscription and whether it was already
// re-sent after a move.
type subscribeCall struct {
	id        uint64
	op        wire.Op        // OpSubscribe or OpSubscribeStream
	req       wire.Subscribe // a stream's: the fields its view needs
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
	err := u.call(time.Now(), call.op, rawBody(body), func(f upclient.Frame, err error) {
		if err == nil && f.Op == wire.OpSubscribeOK {
			var ok wire.SubscribeOK
			if derr := ok.Decode(f.Body); derr != nil {
				unreserve()
				r.answerError(id, wire.CodeUnavailable, "the owner's SUBSCRIBE_OK is malformed: "+derr.Error())
				return
			}
			r.mu.Lock()
			if !r.closed && fs.stream && r.subs[call.key] != fs {
				// Replaced by a later SUBSCRIBE_STREAM meanwhile: the
				// client still gets this answer, and nothing for it comes.
				r.mu.Unlock()
				ok.SubID = fs.clientID
				r.c.Answer(wire.OpSubscribeOK, id, &ok)
				return
			}
			if r.closed || r.subs[call.key] != fs {
				r.mu.Unlock()
				return // the connection ended; the upstream's close releases it
			}
			fs.up, fs.ownerID, fs.on, fs.ownerMember = u, ok.SubID, nil, ok.MemberID
			u.subs[ok.SubID] = fs
			r.mu.Unlock()
			ok.SubID = fs.clientID
			// Queued here, on the upstream reader, before any DELIVER of
			// the subscription is read: SUBSCRIBE_OK goes out first.
			r.gw.m.Requests.WithLabelValues(call.op.String(), "ok").Inc()
			r.c.Answer(wire.OpSubscribeOK, id, &ok)
			return
		}
		if err == nil && f.Op == wire.OpRedirect && !call.resent {
			if rt := reroute(); rt.Owner != "" && rt.Owner != u.owner {
				r.gw.m.Requests.WithLabelValues(call.op.String(), "moved").Inc()
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
		r.answerForwarded(call.op, id, u.owner, reroute, f, err)
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
	if u.resuming.Load() {
		// The link is down and being resumed: the settle waits with the
		// other operations for the owner and goes to the resumed session,
		// where its delivery tags still hold (resume.go).
		r.withUpstream(u.owner, body, func(u *upstream, body []byte, err error) {
			if err != nil {
				r.c.Drop(op, "upstream_lost")
				return
			}
			r.sendSettle(u, op, body)
		})
		return true
	}
	r.sendSettle(u, op, body)
	return true
}

// sendSettle writes an ACK or NACK on u.
func (r *Relay) sendSettle(u *upstream, op wire.Op, body []byte) {
	u.lastUse.Store(time.Now().UnixNano())
	r.gw.m.BytesOut.Add(float64(wire.HeaderSize + len(body)))
	if err := u.link().Conn.Send(op, 0, rawBody(body)); err != nil {
		r.c.Drop(op, "upstream_lost")
	}
}
