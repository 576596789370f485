package session

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

// The operations a gateway relays over upstream sessions (gateway.go):
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
		u.c.log.Info("upstream owner is going away", "owner", string(u.owner))
	}
}

// relaySub relays a DELIVER or SUBSCRIPTION_CLOSED with the sub id (the
// first field after the magic) rewritten to the client-facing one.
func (u *upstream) relaySub(f upclient.Frame) {
	c := u.c
	if len(f.Body) < 12 {
		return
	}
	ownerID := binary.BigEndian.Uint64(f.Body[4:12])
	c.gw.mu.Lock()
	fs := u.subs[ownerID]
	if fs != nil && f.Op == wire.OpSubscriptionClosed {
		delete(u.subs, ownerID)
		if c.gw.subs[fs.key] == fs {
			delete(c.gw.subs, fs.key)
		}
	}
	c.gw.mu.Unlock()
	if fs == nil {
		return // a subscription the client no longer has
	}
	body := f.Body // a push owns its body (client.ConnConfig.OnPush): rewrite it in place
	binary.BigEndian.PutUint64(body[4:12], fs.clientID)
	c.srv.opts.Metrics.ForwardBytesIn.Add(float64(wire.HeaderSize + len(body)))
	if c.relayQueued.Load() > relayHighBytes {
		c.waitRelayRoom(u)
	}
	c.relayQueued.Add(int64(len(body)))
	c.enqueue(outFrame{op: f.Op, reqID: f.RequestID, body: rawBody(body), relay: len(body)})
}

// waitRelayRoom parks the upstream reader until the client's writer has
// written enough relayed frames (or either side ends). The upstream's
// heartbeat monitor does not count the wait, and its PINGs keep the owner
// from declaring the upstream dead.
func (c *Conn) waitRelayRoom(u *upstream) {
	unpark := u.up.Conn.ParkReader()
	defer unpark()
	for c.relayQueued.Load() > relayHighBytes {
		select {
		case <-c.done:
			return
		case <-u.up.Conn.Done():
			return
		case <-c.relayRoom:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// relayWritten is called by the writer after it wrote relayed bytes.
func (c *Conn) relayWritten(n int) {
	if c.relayQueued.Add(-int64(n)) <= relayHighBytes/2 {
		select {
		case c.relayRoom <- struct{}{}:
		default:
		}
	}
}

// answerForwarded turns the owner's answer to a forwarded request into the
// client's (any goroutine). reply is the frame to relay; err says why
// there is none (NotWritten: 503; otherwise the outcome is unknown).
func (c *Conn) answerForwarded(op wire.Op, reqID uint64, owner core.NodeID, ref func() Route, f upclient.Frame, err error) {
	m := c.srv.opts.Metrics
	outcome, code := "ok", uint16(0)
	defer func() {
		m.ForwardRequests.WithLabelValues(op.String(), outcome).Inc()
		if code != 0 {
			c.logForwardFailure(op, reqID, owner, outcome, code, err)
		}
	}()
	if err == nil {
		m.ForwardBytesIn.Add(float64(wire.HeaderSize + len(f.Body)))
	}
	switch {
	case err != nil && upclient.NotWritten(err):
		outcome, code = "not_sent", wire.CodeUnavailable
		c.answerError(reqID, code, notSent(err))
	case err != nil:
		var msg string
		code, msg = wire.CodeOutcomeUnknown, "the upstream session to the partition's owner was lost after the request was sent; its outcome is unknown: "+err.Error()
		outcome = "outcome_unknown"
		if op != wire.OpPublish && op != wire.OpPublishDelayed {
			// A SUBSCRIBE dies with the upstream session on the owner.
			code, msg = wire.CodeUnavailable, "the upstream session to the partition's owner was lost: "+err.Error()+"; retry"
			outcome = "lost"
		}
		c.answerError(reqID, code, msg)
	case f.Op == wire.OpRedirect:
		outcome = "moved"
		// Never relayed raw (seed §3): the owner's view moved on; answer
		// from this broker's own view, which follows the cluster.
		if rt := ref(); rt.Redirect != nil {
			c.enqueue(outFrame{op: wire.OpRedirect, reqID: reqID, slot: true, body: rt.Redirect})
			return
		}
		code = wire.CodeUnavailable
		c.answerError(reqID, code, "the partition's ownership is moving; retry")
	case f.Op == wire.OpPublishOK:
		var ok wire.PublishOK
		if derr := ok.Decode(f.Body); derr != nil {
			outcome, code = "error", wire.CodeOutcomeUnknown
			c.answerError(reqID, code, "the owner's PUBLISH_OK is malformed: "+derr.Error())
			return
		}
		c.enqueue(outFrame{op: wire.OpPublishOK, reqID: reqID, offset: ok.Offset, slot: true}) // the owner's offset, inline
	default:
		if f.Op == wire.OpError {
			outcome = "error"
			var eb wire.ErrorBody
			if eb.Decode(f.Body) == nil {
				code = eb.Code
			}
		}
		c.enqueue(outFrame{op: f.Op, reqID: reqID, slot: true, body: rawBody(append([]byte(nil), f.Body...))})
	}
}

// logForwardFailure logs a forwarded request that failed, with the code the
// client got; at most one line a second per connection, counting the ones
// it left out (an owner that dies with a full window fails hundreds at
// once).
func (c *Conn) logForwardFailure(op wire.Op, reqID uint64, owner core.NodeID, outcome string, code uint16, err error) {
	g := &c.gw
	now := time.Now()
	g.mu.Lock()
	if now.Sub(g.failLogged) < time.Second {
		g.failSkipped++
		g.mu.Unlock()
		return
	}
	skipped := g.failSkipped
	g.failLogged, g.failSkipped = now, 0
	g.mu.Unlock()
	args := []any{"op", op.String(), "request_id", reqID, "owner", string(owner), "outcome", outcome, "code", code, "not_logged_before", skipped}
	if err != nil {
		args = append(args, "err", err)
	}
	c.log.Info("forwarded request failed", args...)
}

// forwardPublish relays a PUBLISH / PUBLISH_DELAYED to owner (reader
// goroutine). The client's PUBLISH_OK is the owner's, with the owner's
// offset, or an error: 503 when the request never reached the owner, 504
// when it did and the answer was lost.
func (c *Conn) forwardPublish(h wire.FrameHeader, body []byte, req *publishReq, owner core.NodeID) {
	if req.confirm {
		c.deferReply()
	}
	c.withUpstream(owner, body, func(u *upstream, body []byte, err error) { c.relayPublish(h, body, req, owner, u, err) })
}

// relayPublish is forwardPublish once the upstream session is open (u) or
// could not be (err).
func (c *Conn) relayPublish(h wire.FrameHeader, body []byte, req *publishReq, owner core.NodeID, u *upstream, err error) {
	if err != nil {
		if req.confirm {
			c.answerError(h.RequestID, core.Code(err), err.Error())
		} else {
			c.drop(h.Op, "no_upstream")
		}
		return
	}
	m := c.srv.opts.Metrics
	m.ForwardBytesOut.Add(float64(wire.HeaderSize + len(body)))
	if !req.confirm {
		u.lastUse.Store(time.Now().UnixNano())
		if err := u.up.Conn.Send(h.Op, 0, rawBody(body)); err != nil {
			c.drop(h.Op, "upstream_lost")
			m.ForwardRequests.WithLabelValues(h.Op.String(), "dropped").Inc()
			return
		}
		m.ForwardRequests.WithLabelValues(h.Op.String(), "sent").Inc()
		return
	}
	reqID, op := h.RequestID, h.Op
	n := int64(len(body))
	if !c.srv.acquireInflight(n, c.srv.opts.Settings()) {
		m.ForwardRejected.WithLabelValues("max_inflight_forward_bytes").Inc()
		c.answerError(reqID, wire.CodeUnavailable, "routing.max_inflight_forward_bytes is reached on this broker; retry")
		return
	}
	topic, group, partition, version := req.topic, req.group, req.partition, req.version
	reroute := func() Route { return c.route(topic, group, partition, true, version) }
	kept := keepBody(body) // for the one re-send after an ownership move
	start := time.Now()
	err = u.call(start, op, rawBody(body), func(f upclient.Frame, err error) {
		c.srv.releaseInflight(n)
		if err == nil && f.Op == wire.OpRedirect {
			// The owner no longer owns it (seed §3): a new private owner
			// in this broker's view gets one more attempt.
			if rt := reroute(); rt.Forward != "" && rt.Forward != owner {
				m.ForwardRequests.WithLabelValues(op.String(), "moved").Inc()
				go func() {
					c.resendPublish(op, reqID, *kept, rt.Forward, reroute, start)
					releaseBody(kept)
				}()
				return
			}
		}
		releaseBody(kept)
		c.confirmed(f, err, start)
		c.answerForwarded(op, reqID, u.owner, reroute, f, err)
	})
	if err != nil {
		releaseBody(kept)
		c.srv.releaseInflight(n)
		m.ForwardRequests.WithLabelValues(op.String(), "not_sent").Inc()
		c.answerError(reqID, wire.CodeUnavailable, notSent(err))
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
func (c *Conn) confirmed(f upclient.Frame, err error, start time.Time) {
	if err == nil && f.Op == wire.OpPublishOK {
		c.srv.opts.Metrics.ForwardConfirms.Inc()
		c.srv.opts.Metrics.ForwardConfirmLatency.Add(float64(time.Since(start).Microseconds()))
	}
}

// resendPublish is the one more attempt of a confirmed publish whose owner
// answered REDIRECT while this broker's view names another private owner
// (seed §3). Its answer is final: a second move answers 503, and the
// client retries.
func (c *Conn) resendPublish(op wire.Op, reqID uint64, body []byte, owner core.NodeID, reroute func() Route, start time.Time) {
	u, err := c.upstreamFor(owner)
	if err != nil {
		c.answerError(reqID, core.Code(err), err.Error())
		return
	}
	err = u.call(time.Now(), op, rawBody(body), func(f upclient.Frame, err error) {
		c.confirmed(f, err, start)
		c.answerForwarded(op, reqID, u.owner, reroute, f, err)
	})
	if err != nil {
		c.answerError(reqID, wire.CodeUnavailable, notSent(err))
	}
}

// forwardSubscribe relays a queue SUBSCRIBE to owner (reader goroutine):
// the client's prefetch goes up as asked, and the SUBSCRIBE_OK comes back
// with a client-facing sub id from 2^48 up.
func (c *Conn) forwardSubscribe(id uint64, body []byte, req wire.Subscribe, owner core.NodeID) {
	if req.ConsumerGroup.Present {
		c.replyError(id, wire.CodeBadRequest, "exclusive consumer groups are not supported by this broker yet")
		return
	}
	key := keyOf(req.Topic, req.Group, req.Partition)
	g := &c.gw
	g.mu.Lock()
	_, dup := g.subs[key]
	if !dup && c.sess.findSub(key) != nil {
		dup = true
	}
	if dup {
		g.mu.Unlock()
		c.replyError(id, wire.CodeConflict, fmt.Sprintf("already subscribed to %s partition %d on this connection", req.Topic, req.Partition))
		return
	}
	fs := &fwdSub{key: key, req: req}
	if g.subs == nil {
		g.subs = make(map[subKey]*fwdSub)
	}
	g.subs[key] = fs // reserved while SUBSCRIBE is in flight
	g.mu.Unlock()
	unreserve := func() {
		g.mu.Lock()
		if g.subs[key] == fs {
			delete(g.subs, key)
		}
		g.mu.Unlock()
	}
	c.deferReply()
	call := &subscribeCall{id: id, req: req, key: key, fs: fs, unreserve: unreserve}
	c.withUpstream(owner, body, func(u *upstream, body []byte, err error) {
		if err != nil {
			unreserve()
			c.answerError(id, core.Code(err), err.Error())
			return
		}
		c.relaySubscribe(call, body, u)
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

// relaySubscribe is forwardSubscribe once the upstream session is open.
// An owner that answers REDIRECT while this broker's view names another
// private owner gets the SUBSCRIBE once more, there (seed §3, as a
// publish does); that answer is final.
func (c *Conn) relaySubscribe(call *subscribeCall, body []byte, u *upstream) {
	g := &c.gw
	id, fs, unreserve := call.id, call.fs, call.unreserve
	reroute := func() Route { return c.route(call.req.Topic, call.req.Group, call.req.Partition, false, 0) }
	var kept []byte
	if !call.resent {
		kept = bytes.Clone(body) // for the one re-send after a move
	}
	c.srv.opts.Metrics.ForwardBytesOut.Add(float64(wire.HeaderSize + len(body)))
	err := u.call(time.Now(), wire.OpSubscribe, rawBody(body), func(f upclient.Frame, err error) {
		if err == nil && f.Op == wire.OpSubscribeOK {
			var ok wire.SubscribeOK
			if derr := ok.Decode(f.Body); derr != nil {
				unreserve()
				c.answerError(id, wire.CodeUnavailable, "the owner's SUBSCRIBE_OK is malformed: "+derr.Error())
				return
			}
			g.mu.Lock()
			if g.closed || g.subs[call.key] != fs {
				g.mu.Unlock()
				return // the connection ended; the upstream's close releases it
			}
			fs.up, fs.ownerID = u, ok.SubID
			fs.clientID = firstForwardedSubID + g.nextSub
			g.nextSub++
			u.subs[ok.SubID] = fs
			g.mu.Unlock()
			ok.SubID = fs.clientID
			// Queued here, on the upstream reader, before any DELIVER of
			// the subscription is read: SUBSCRIBE_OK goes out first.
			c.srv.opts.Metrics.ForwardRequests.WithLabelValues(wire.OpSubscribe.String(), "ok").Inc()
			c.enqueue(outFrame{op: wire.OpSubscribeOK, reqID: id, slot: true, body: &ok})
			return
		}
		if err == nil && f.Op == wire.OpRedirect && !call.resent {
			if rt := reroute(); rt.Forward != "" && rt.Forward != u.owner {
				c.srv.opts.Metrics.ForwardRequests.WithLabelValues(wire.OpSubscribe.String(), "moved").Inc()
				call.resent = true
				go func() {
					u2, err := c.upstreamFor(rt.Forward)
					if err != nil {
						unreserve()
						c.answerError(id, core.Code(err), err.Error())
						return
					}
					c.relaySubscribe(call, kept, u2)
				}()
				return
			}
		}
		unreserve()
		if err == nil && f.Op == wire.OpSubscribeErr {
			f.Op = wire.OpError // WIRE §7.3: subscribe failures use ERROR
		}
		c.answerForwarded(wire.OpSubscribe, id, u.owner, reroute, f, err)
	})
	if err != nil {
		unreserve()
		c.answerError(id, wire.CodeUnavailable, notSent(err))
	}
}

// forwardedSettle relays an ACK or NACK for a forwarded subscription to
// the upstream that holds it; it reports false when the partition has no
// forwarded subscription on this connection (reader goroutine).
func (c *Conn) forwardedSettle(op wire.Op, key subKey, body []byte) bool {
	c.gw.mu.Lock()
	fs := c.gw.subs[key]
	var u *upstream
	if fs != nil {
		u = fs.up
	}
	c.gw.mu.Unlock()
	if fs == nil {
		return false
	}
	if u == nil {
		return true // SUBSCRIBE still in flight: nothing was delivered to settle
	}
	u.lastUse.Store(time.Now().UnixNano())
	c.srv.opts.Metrics.ForwardBytesOut.Add(float64(wire.HeaderSize + len(body)))
	if err := u.up.Conn.Send(op, 0, rawBody(body)); err != nil {
		c.drop(op, "upstream_lost")
	}
	return true
}

// view is the forwarded subscription as RECONCILE_RESULT shows it.
func (fs *fwdSub) view() wire.ReconcileSub {
	return wire.ReconcileSub{SubID: fs.clientID, Topic: fs.req.Topic, Partition: fs.req.Partition, Group: fs.req.Group,
		AutoAck: fs.req.AutoAck, Prefetch: fs.req.Prefetch}
}

// reconcileForwarded answers the part of a RECONCILE_CLIENT that concerns
// forwarded subscriptions (issue 6 §6b; seed §11), until upstream resume
// exists: a listed subscription this connection forwards is kept; a listed
// one whose partition this broker forwards but that has no upstream
// subscription here (a new connection after a reconnect) is
// recreate_client_side when manual-ack and close_client_side when
// auto-ack, under either policy; a forwarded subscription the client no
// longer lists is closed on the owner (an upstream RECONCILE_CLIENT that
// lists only the ones kept). The other listed entries are returned for the
// local reconcile.
func (c *Conn) reconcileForwarded(listed []wire.ReconcileSub) (entries []wire.ReconcileEntry, rest []wire.ReconcileSub) {
	log := verdictLog{m: c.srv.opts.Metrics}
	add := log.add
	keep := map[subKey]bool{}
	for _, cs := range listed {
		key := keyOf(cs.Topic, cs.Group, cs.Partition)
		c.gw.mu.Lock()
		fs := c.gw.subs[key]
		c.gw.mu.Unlock()
		switch {
		case fs != nil && fs.up != nil:
			keep[key] = true
			v := vMatched
			if fs.clientID != cs.SubID {
				v = vIDChanged
			}
			add(wire.Some(cs), wire.Some(fs.view()), v)
		case fs == nil && c.srv.opts.Upstreams != nil && c.route(cs.Topic, cs.Group, cs.Partition, false, 0).Forward != "":
			if cs.AutoAck {
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, vMissing)
			} else {
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, vRecreate)
			}
		default:
			rest = append(rest, cs)
		}
	}
	// Forwarded subscriptions the client dropped: closed on their owners.
	c.gw.mu.Lock()
	dropped := map[*upstream]bool{}
	for key, fs := range c.gw.subs {
		if fs.up == nil || keep[key] {
			continue
		}
		dropped[fs.up] = true
		delete(c.gw.subs, key)
		delete(fs.up.subs, fs.ownerID)
		add(wire.Option[wire.ReconcileSub]{}, wire.Some(fs.view()), vClientMissing)
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
	c.gw.mu.Unlock()
	for u, kept := range upstreamLists {
		_ = u.call(time.Now(), wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileConservative, Subscriptions: kept},
			func(upclient.Frame, error) {})
	}
	return log.entries, rest
}
