package forward

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// The operations a gateway relays over upstream sessions (relay.go):
// publishes, subscriptions and their deliveries and settles, the answers it
// gives for them, and the reconcile of forwarded subscriptions.

// onPush relays a frame the owner initiated (upstream reader goroutine).
func (u *upstream) onPush(f upclient.Frame) {
	switch f.Op {
	case wire.OpDeliver, wire.OpSubscriptionClosed:
		u.relaySub(f)
	case wire.OpGoingAway:
		// Not relayed: the owner is draining; the SUBSCRIPTION_CLOSED
		// frames that follow are, and new operations re-route.
		u.r.c.Logger().Info("upstream owner is going away", "owner", string(u.owner))
	}
}

// relaySub relays a DELIVER or SUBSCRIPTION_CLOSED with the sub id (the
// first field after the magic) rewritten to the client-facing one.
func (u *upstream) relaySub(f upclient.Frame) {
	r := u.r
	if len(f.Body) < 12 {
		return
	}
	ownerID := binary.BigEndian.Uint64(f.Body[4:12])
	r.mu.Lock()
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
	body := f.Body // a push owns its body (client.ConnConfig.OnPush): rewrite it in place
	binary.BigEndian.PutUint64(body[4:12], fs.clientID)
	r.gw.m.BytesIn.Add(float64(wire.HeaderSize + len(body)))
	if r.queued.Load() > relayHighBytes {
		r.waitRelayRoom(u)
	}
	r.queued.Add(int64(len(body)))
	r.c.Push(f.Op, f.RequestID, rawBody(body), len(body))
}

// waitRelayRoom parks the upstream reader until the client's writer has
// written enough relayed frames (or either side ends). The upstream's
// heartbeat monitor does not count the wait, and its PINGs keep the owner
// from declaring the upstream dead.
func (r *Relay) waitRelayRoom(u *upstream) {
	unpark := u.up.Conn.ParkReader()
	defer unpark()
	for r.queued.Load() > relayHighBytes {
		select {
		case <-r.done:
			return
		case <-u.up.Conn.Done():
			return
		case <-r.room:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Written is called by the client's writer after it wrote n relayed
// bytes (a frame pushed with Conn.Push and relayed = n).
func (r *Relay) Written(n int) {
	if r.queued.Add(-int64(n)) <= relayHighBytes/2 {
		select {
		case r.room <- struct{}{}:
		default:
		}
	}
}

// answerForwarded turns the owner's answer to a forwarded request into the
// client's (any goroutine). reply is the frame to relay; err says why
// there is none (NotWritten: 503; otherwise the outcome is unknown).
func (r *Relay) answerForwarded(op wire.Op, reqID uint64, owner core.NodeID, ref func() Target, f upclient.Frame, err error) {
	m := r.gw.m
	outcome, code := "ok", uint16(0)
	defer func() {
		m.Requests.WithLabelValues(op.String(), outcome).Inc()
		if code != 0 {
			r.logForwardFailure(op, reqID, owner, outcome, code, err)
		}
	}()
	if err == nil {
		m.BytesIn.Add(float64(wire.HeaderSize + len(f.Body)))
	}
	switch {
	case err != nil && upclient.NotWritten(err):
		outcome, code = "not_sent", wire.CodeUnavailable
		r.answerError(reqID, code, notSent(err))
	case err != nil:
		var msg string
		code, msg = wire.CodeOutcomeUnknown, "the upstream session to the partition's owner was lost after the request was sent; its outcome is unknown: "+err.Error()
		outcome = "outcome_unknown"
		if op != wire.OpPublish && op != wire.OpPublishDelayed {
			// A SUBSCRIBE dies with the upstream session on the owner.
			code, msg = wire.CodeUnavailable, "the upstream session to the partition's owner was lost: "+err.Error()+"; retry"
			outcome = "lost"
		}
		r.answerError(reqID, code, msg)
	case f.Op == wire.OpRedirect:
		outcome = "moved"
		// Never relayed raw (core/forward/README.md#upstream-sessions): the owner's view moved on; answer
		// from this broker's own view, which follows the cluster.
		if rt := ref(); rt.Redirect != nil {
			r.c.Answer(wire.OpRedirect, reqID, rt.Redirect)
			return
		}
		code = wire.CodeUnavailable
		r.answerError(reqID, code, "the partition's ownership is moving; retry")
	case f.Op == wire.OpPublishOK:
		var ok wire.PublishOK
		if derr := ok.Decode(f.Body); derr != nil {
			outcome, code = "error", wire.CodeOutcomeUnknown
			r.answerError(reqID, code, "the owner's PUBLISH_OK is malformed: "+derr.Error())
			return
		}
		r.c.Confirm(reqID, ok.Offset) // the owner's offset
	default:
		if f.Op == wire.OpError {
			outcome = "error"
			var eb wire.ErrorBody
			if eb.Decode(f.Body) == nil {
				code = eb.Code
			}
		}
		r.c.Answer(f.Op, reqID, rawBody(append([]byte(nil), f.Body...)))
	}
}

// logForwardFailure logs a forwarded request that failed, with the code the
// client got; at most one line a second per connection, counting the ones
// it left out (an owner that dies with a full window fails hundreds at
// once).
func (r *Relay) logForwardFailure(op wire.Op, reqID uint64, owner core.NodeID, outcome string, code uint16, err error) {
	ok, skipped := r.failLog.Allow(struct{}{}, time.Now())
	if !ok {
		return
	}
	args := []any{"op", op.String(), "request_id", reqID, "owner", string(owner), "outcome", outcome, "code", code, "not_logged_before", skipped}
	if err != nil {
		args = append(args, "err", err)
	}
	r.c.Logger().Info("forwarded request failed", args...)
}

// Publish relays a PUBLISH / PUBLISH_DELAYED to owner (reader
// goroutine). The client's PUBLISH_OK is the owner's, with the owner's
// offset, or an error: 503 when the request never reached the owner, 504
// when it did and the answer was lost.
func (r *Relay) Publish(h wire.FrameHeader, body []byte, req PublishRef, owner core.NodeID) {
	if req.Confirm {
		r.c.DeferReply()
	}
	r.withUpstream(owner, body, func(u *upstream, body []byte, err error) { r.relayPublish(h, body, req, owner, u, err) })
}

// relayPublish is Publish once the upstream session is open (u) or could
// not be (err).
func (r *Relay) relayPublish(h wire.FrameHeader, body []byte, req PublishRef, owner core.NodeID, u *upstream, err error) {
	if err != nil {
		if req.Confirm {
			r.answerError(h.RequestID, core.Code(err), err.Error())
		} else {
			r.c.Drop(h.Op, "no_upstream")
		}
		return
	}
	m := r.gw.m
	m.BytesOut.Add(float64(wire.HeaderSize + len(body)))
	if !req.Confirm {
		u.lastUse.Store(time.Now().UnixNano())
		if err := u.up.Conn.Send(h.Op, 0, rawBody(body)); err != nil {
			r.c.Drop(h.Op, "upstream_lost")
			m.Requests.WithLabelValues(h.Op.String(), "dropped").Inc()
			return
		}
		m.Requests.WithLabelValues(h.Op.String(), "sent").Inc()
		return
	}
	reqID, op := h.RequestID, h.Op
	n := int64(len(body))
	if !r.gw.acquireInflight(n, r.gw.limits()) {
		m.Rejected.WithLabelValues("max_inflight_forward_bytes").Inc()
		r.answerError(reqID, wire.CodeUnavailable, "routing.max_inflight_forward_bytes is reached on this broker; retry")
		return
	}
	topic, group, partition, version := req.Topic, req.Group, req.Partition, req.Version
	reroute := func() Target { return r.c.Route(topic, group, partition, true, version) }
	kept := keepBody(body) // for the one re-send after an ownership move
	start := time.Now()
	err = u.call(start, op, rawBody(body), func(f upclient.Frame, err error) {
		r.gw.releaseInflight(n)
		if err == nil && f.Op == wire.OpRedirect {
			// The owner no longer owns it (core/forward/README.md#upstream-sessions): a new private owner
			// in this broker's view gets one more attempt.
			if rt := reroute(); rt.Owner != "" && rt.Owner != owner {
				m.Requests.WithLabelValues(op.String(), "moved").Inc()
				go func() {
					r.resendPublish(op, reqID, *kept, rt.Owner, reroute, start)
					releaseBody(kept)
				}()
				return
			}
		}
		releaseBody(kept)
		r.confirmed(f, err, start)
		r.answerForwarded(op, reqID, u.owner, reroute, f, err)
	})
	if err != nil {
		releaseBody(kept)
		r.gw.releaseInflight(n)
		m.Requests.WithLabelValues(op.String(), "not_sent").Inc()
		r.answerError(reqID, wire.CodeUnavailable, notSent(err))
	}
}

// keptBodies recycles the copies keepBody makes: a forwarded confirmed
// publish keeps its body until the owner answers, for the one re-send
// after a move, and a relay at 100k messages a second should not hand each
// copy to the garbage collector.
var keptBodies sync.Pool // of *[]byte

// maxKeptPooled is the largest copy keptBodies takes back.
const maxKeptPooled = 64 << 10

// keepBody copies body into a recycled buffer (release with releaseBody
// once nothing reads it: the upstream writer copies what it sends).
func keepBody(body []byte) *[]byte {
	b, _ := keptBodies.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append((*b)[:0], body...)
	return b
}

func releaseBody(b *[]byte) {
	if cap(*b) <= maxKeptPooled {
		keptBodies.Put(b)
	}
}

// confirmed counts a relayed PUBLISH_OK.
func (r *Relay) confirmed(f upclient.Frame, err error, start time.Time) {
	if err == nil && f.Op == wire.OpPublishOK {
		r.gw.m.Confirms.Inc()
		r.gw.m.ConfirmLatency.Add(float64(time.Since(start).Microseconds()))
	}
}

// resendPublish is the one more attempt of a confirmed publish whose owner
// answered REDIRECT while this broker's view names another private owner
// (core/forward/README.md#upstream-sessions). Its answer is final: a second move answers 503, and the
// client retries.
func (r *Relay) resendPublish(op wire.Op, reqID uint64, body []byte, owner core.NodeID, reroute func() Target, start time.Time) {
	u, err := r.upstreamFor(owner)
	if err != nil {
		r.answerError(reqID, core.Code(err), err.Error())
		return
	}
	err = u.call(time.Now(), op, rawBody(body), func(f upclient.Frame, err error) {
		r.confirmed(f, err, start)
		r.answerForwarded(op, reqID, u.owner, reroute, f, err)
	})
	if err != nil {
		r.answerError(reqID, wire.CodeUnavailable, notSent(err))
	}
}

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
	fs := &fwdSub{key: key, req: req}
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
			fs.up, fs.ownerID = u, ok.SubID
			fs.clientID = FirstSubID + r.nextSub
			r.nextSub++
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

// replyError answers the request being handled with ERROR at once (reader
// goroutine): its slot goes to the answer.
func (r *Relay) replyError(reqID uint64, code uint16, msg string) {
	r.c.DeferReply()
	r.answerError(reqID, code, msg)
}
