package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// The gateway side of forwarding (seed §3 shape b, WIRE §22): a public
// broker serves a partition owned by a private broker (or by a broker
// behind its own shared address) by relaying the client's operations over
// an upstream session — one per (client connection, owner node) — opened
// on first use over the inter-broker transport, authenticated as @node and
// marked with FORWARDED_SESSION. A forwarded confirm is the owner's: the
// gateway never stores, confirms or counts a forwarded message itself.
//
// Frames keep their bodies: PUBLISH, PUBLISH_DELAYED, ACK and NACK go up
// unchanged; PUBLISH_OK and ERROR come back unchanged; SUBSCRIBE_OK,
// DELIVER and SUBSCRIPTION_CLOSED come back with the subscription id
// rewritten in place to the client-facing id (from 2^48 up, above every
// id of a local subscription). Per owner, order is the upstream's order.
//
// Upstream sessions live with the client connection: when it ends they
// are closed in order (an empty RECONCILE_CLIENT first, so the owner
// requeues what they held, then a clean end of stream, with FFS2's
// release_on_close). Upstream resume is a later capability.

// Upstream is an open upstream session, as the gateway uses it.
type Upstream struct {
	// Conn speaks the wire protocol to the owner: HELLO, AUTH as @node and
	// FORWARDED_SESSION are done.
	Conn *upclient.Conn
	// Abort ends the session as a broken link would (the owner keeps its
	// grace); Conn.Close ends it in order.
	Abort func()
}

// UpstreamDialer opens an upstream session to owner on behalf of the
// client described by fs (OriginNodeID is the dialer's to fill), within
// ctx. onPush receives every server-initiated frame (DELIVER,
// SUBSCRIPTION_CLOSED, GOING_AWAY, …) on the upstream's reader goroutine;
// its body is only valid during the call. An error wraps
// core.ErrPeerRefused when the owner could not be reached, or
// core.ErrUnavailable when it is not forwarding-capable.
type UpstreamDialer func(ctx context.Context, owner core.NodeID, fs wire.ForwardedSession, onPush func(upclient.Frame)) (Upstream, error)

// firstForwardedSubID is the first client-facing id of a forwarded
// subscription (issue 6 §5): local ids stay below it (maxSubID).
const firstForwardedSubID = maxSubID

// refusedFailFast is how long an owner that refused a connection gets 503
// at once, without a new dial (seed §6).
const refusedFailFast = time.Second

// relayHighBytes bounds the relayed frames a client connection has queued
// and not yet written: past it the upstream reader waits for the client's
// writer (no buffering beyond what the owner's prefetch allows in flight,
// and backpressure to the owner for auto-ack subscriptions).
const relayHighBytes = 8 << 20

// gateway is a connection's forwarding state.
type gateway struct {
	mu      sync.Mutex
	ups     map[core.NodeID]*upstream
	subs    map[subKey]*fwdSub
	nextSub uint64
	closed  bool
	// failLogged and failSkipped rate-limit logForwardFailure.
	failLogged  time.Time
	failSkipped int
	// opening holds, per owner whose upstream session is being opened, the
	// operations that wait for it, in the order the client sent them. The
	// entry stays until they have all run, so a later operation for that
	// owner queues behind them instead of overtaking them.
	opening map[core.NodeID]*opening
}

// opening is an upstream session being opened and the operations waiting
// for it.
type opening struct {
	ops   []queuedOp
	bytes int           // of the bodies queued
	done  chan struct{} // closed when the queue has run
}

// queuedOp is an operation waiting for its upstream session: the handler
// and its own copy of the frame body (the reader reuses its buffer).
type queuedOp struct {
	body []byte
	run  func(u *upstream, body []byte, err error)
}

// maxOpeningQueue bounds the bytes of the operations one connection queues
// for an upstream session being opened: past it the reader waits for the
// session, as it would for any full buffer (fire-and-forget publishes take
// no reply slot, so nothing else bounds them).
const maxOpeningQueue = 1 << 20

// upstream is one upstream session of a client connection.
type upstream struct {
	c     *Conn
	owner core.NodeID
	up    Upstream
	subs  map[uint64]*fwdSub // by the owner's sub id; guarded by gateway.mu

	outstanding  atomic.Int64 // requests sent, not yet answered
	lastProgress atomic.Int64 // unix nanos: last answer, or first request after idle
	lastUse      atomic.Int64 // unix nanos
	gone         chan struct{}
	reason       atomic.Pointer[string] // why this broker ended it (the first reason wins); nil: it was lost
}

// closing records why this broker ends the upstream session, for the log
// line cleanup writes.
func (u *upstream) closing(reason string) { u.reason.CompareAndSwap(nil, &reason) }

// fwdSub is one forwarded subscription.
type fwdSub struct {
	up       *upstream // nil while SUBSCRIBE is in flight (the key is reserved)
	key      subKey
	req      wire.Subscribe // as the client asked
	clientID uint64
	ownerID  uint64
}

// gatewayLimits are the server-wide counters behind routing.max_upstream_*
// and the fail-fast window after a refused connect.
type gatewayLimits struct {
	mu       sync.Mutex
	total    int
	perOwner map[core.NodeID]int
	refused  map[core.NodeID]time.Time
	warned   map[core.NodeID]time.Time
}

// take reserves an upstream session to owner; on refusal it returns the
// limit's label (fibril_forward_rejected_total) and the 503 to answer.
func (l *gatewayLimits) take(owner core.NodeID, set Settings, now time.Time) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until, ok := l.refused[owner]; ok && now.Before(until) {
		return "refused_recently", core.Errorf(core.ErrUnavailable, "owner %s refused a connection less than %s ago; retry", owner, refusedFailFast)
	}
	if set.MaxUpstreams > 0 && l.total >= set.MaxUpstreams {
		return "max_upstream_sessions", core.Errorf(core.ErrUnavailable, "this broker has routing.max_upstream_sessions (%d) upstream sessions open; retry", set.MaxUpstreams)
	}
	if set.MaxUpstreamsPerOwner > 0 && l.perOwner[owner] >= set.MaxUpstreamsPerOwner {
		return "max_upstream_sessions_per_owner", core.Errorf(core.ErrUnavailable, "this broker has routing.max_upstream_sessions_per_owner (%d) upstream sessions open to %s; retry", set.MaxUpstreamsPerOwner, owner)
	}
	if l.perOwner == nil {
		l.perOwner = make(map[core.NodeID]int)
	}
	l.total++
	l.perOwner[owner]++
	return "", nil
}

func (l *gatewayLimits) release(owner core.NodeID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perOwner[owner]--; l.perOwner[owner] <= 0 {
		delete(l.perOwner, owner)
	}
}

func (l *gatewayLimits) refuse(owner core.NodeID, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil {
		l.refused = make(map[core.NodeID]time.Time)
	}
	l.refused[owner] = until
}

// warnEvery rate-limits the warnings about one owner.
const warnEvery = 10 * time.Second

// warnDue reports whether a warning about owner may be logged now.
func (l *gatewayLimits) warnDue(owner core.NodeID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.warned == nil {
		l.warned = make(map[core.NodeID]time.Time)
	}
	if now.Sub(l.warned[owner]) < warnEvery {
		return false
	}
	l.warned[owner] = now
	return true
}

// byOwner returns the upstream sessions open (or being opened) per owner.
func (l *gatewayLimits) byOwner() map[core.NodeID]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[core.NodeID]int, len(l.perOwner))
	for o, n := range l.perOwner {
		out[o] = n
	}
	return out
}

// Open returns the number of upstream sessions open on this broker.
func (l *gatewayLimits) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// rawBody is a body relayed as received.
type rawBody []byte

func (r rawBody) AppendTo(b []byte) []byte { return append(b, r...) }

// withUpstream runs an operation for owner on the connection's upstream
// session to it (reader goroutine). When that session is open and nothing
// for owner waits, run is called at once with body. Otherwise the
// operation joins the queue of the session being opened — which it starts
// when there is none — and run is called later, in order, on the
// goroutine that opens it, with a copy of body, and with the error when
// the session could not be opened. So a dial to an owner that is slow to
// answer (up to routing.upstream_connect_timeout_ms) never holds up the
// client's operations on other partitions. run answers through enqueue
// with a reply slot (the caller has deferred its reply).
func (c *Conn) withUpstream(owner core.NodeID, body []byte, run func(u *upstream, body []byte, err error)) {
	g := &c.gw
	g.mu.Lock()
	for {
		o := g.opening[owner]
		if o == nil {
			break
		}
		if o.bytes < maxOpeningQueue {
			o.ops = append(o.ops, queuedOp{body: bytes.Clone(body), run: run})
			o.bytes += len(body)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		<-o.done
		g.mu.Lock()
	}
	if g.closed {
		g.mu.Unlock()
		run(nil, body, errConnClosing)
		return
	}
	if u := g.ups[owner]; u != nil {
		g.mu.Unlock()
		run(u, body, nil)
		return
	}
	g.mu.Unlock()
	if err := c.reserveUpstream(owner); err != nil {
		run(nil, body, err)
		return
	}
	o := &opening{ops: []queuedOp{{body: bytes.Clone(body), run: run}}, bytes: len(body), done: make(chan struct{})}
	g.mu.Lock()
	if g.opening == nil {
		g.opening = make(map[core.NodeID]*opening)
	}
	g.opening[owner] = o
	g.mu.Unlock()
	go func() {
		u, err := c.openUpstream(owner)
		for {
			g.mu.Lock()
			q := o.ops
			if len(q) == 0 {
				delete(g.opening, owner)
				close(o.done)
				g.mu.Unlock()
				return
			}
			o.ops, o.bytes = nil, 0
			g.mu.Unlock()
			for _, op := range q {
				op.run(u, op.body, err)
			}
		}
	}()
}

// answerError answers a request whose reply was deferred with ERROR
// (any goroutine).
func (c *Conn) answerError(reqID uint64, code uint16, msg string) {
	c.enqueue(outFrame{op: wire.OpError, reqID: reqID, slot: true, body: &wire.ErrorBody{Code: code, Message: msg}})
}

// errConnClosing answers an operation that needs an upstream session
// while the client connection is ending.
var errConnClosing = core.Errorf(core.ErrUnavailable, "connection closing")

// upstreamFor returns the connection's upstream session to owner, opening
// it on first use (the dial is bounded by routing.upstream_connect_timeout_ms).
// The reader calls it, and so does a publish re-sent after an ownership
// move; two dials racing for one owner keep the first registered.
func (c *Conn) upstreamFor(owner core.NodeID) (*upstream, error) {
	g := &c.gw
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errConnClosing
	}
	if u := g.ups[owner]; u != nil {
		g.mu.Unlock()
		return u, nil
	}
	g.mu.Unlock()
	if err := c.reserveUpstream(owner); err != nil {
		return nil, err
	}
	return c.openUpstream(owner)
}

// reserveUpstream takes owner's place under the upstream session limits
// (openUpstream gives it back when the session does not open).
func (c *Conn) reserveUpstream(owner core.NodeID) error {
	if c.srv.opts.Upstreams == nil {
		return core.Errorf(core.ErrUnavailable, "this broker cannot forward to %s", owner)
	}
	if limit, err := c.srv.gwLimits.take(owner, c.srv.opts.Settings(), time.Now()); err != nil {
		c.srv.opts.Metrics.ForwardRejected.WithLabelValues(limit).Inc()
		return err
	}
	return nil
}

// openUpstream dials the upstream session to owner that reserveUpstream
// made room for, and installs it (any goroutine).
func (c *Conn) openUpstream(owner core.NodeID) (*upstream, error) {
	g := &c.gw
	dial := c.srv.opts.Upstreams
	set := c.srv.opts.Settings()
	now := time.Now()
	fs := wire.ForwardedSession{V2: true, HopCount: wire.ForwardedHopCount, Flags: wire.FlagReleaseOnClose,
		ConnectionID: c.id, ClientRemoteAddr: c.remote}
	if id := c.identity.Load(); id != nil { // any goroutine: the reader's published view
		fs.ActingUsername, fs.ClientID = id.user, id.clientID
	}
	u := &upstream{c: c, owner: owner, subs: make(map[uint64]*fwdSub), gone: make(chan struct{})}
	timeout := set.UpstreamConnectTimeout
	if timeout <= 0 {
		timeout = core.DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	up, err := dial(ctx, owner, fs, u.onPush)
	cancel()
	if err != nil {
		c.srv.gwLimits.release(owner)
		if errors.Is(err, core.ErrPeerRefused) {
			c.srv.gwLimits.refuse(owner, time.Now().Add(refusedFailFast))
		}
		if c.srv.gwLimits.warnDue(owner, time.Now()) {
			c.log.Warn("upstream session not opened (this warning repeats at most every 10 s per owner)", "owner", string(owner), "err", err)
		}
		return nil, core.Errorf(core.ErrUnavailable, "cannot reach the owner %s: %v; retry", owner, err)
	}
	u.up = up
	u.lastUse.Store(now.UnixNano())
	g.mu.Lock()
	if g.closed || g.ups[owner] != nil {
		// The connection ended meanwhile (or, impossible on the one reader,
		// another upstream won): do not keep this one.
		g.mu.Unlock()
		c.srv.gwLimits.release(owner)
		go closeUpstream(up)
		if other := g.ups[owner]; other != nil && !g.closed {
			return other, nil
		}
		return nil, errConnClosing
	}
	if g.ups == nil {
		g.ups = make(map[core.NodeID]*upstream)
	}
	g.ups[owner] = u
	g.mu.Unlock()
	c.log.Info("upstream session opened", "owner", string(owner))
	go u.watch()
	return u, nil
}

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
	err := u.up.Conn.Go(op, body, func(f upclient.Frame, err error) {
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
// aborted: seed §6), or after routing.upstream_idle_close_ms with no
// subscription and no request in flight.
func (u *upstream) watch() {
	c := u.c
	defer u.cleanup()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-u.up.Conn.Done():
			return
		case <-tick.C:
		}
		set := c.srv.opts.Settings()
		now := time.Now()
		if u.outstanding.Load() > 0 && set.ForwardTimeout > 0 &&
			now.Sub(time.Unix(0, u.lastProgress.Load())) > set.ForwardTimeout {
			c.log.Warn("upstream session aborted: no answer within routing.forward_timeout_ms", "owner", string(u.owner),
				"timeout", set.ForwardTimeout, "outstanding", u.outstanding.Load())
			u.closing("forward_timeout")
			u.up.Abort()
			return
		}
		c.gw.mu.Lock()
		idle := len(u.subs) == 0 && u.outstanding.Load() == 0 && set.UpstreamIdleClose > 0 &&
			now.Sub(time.Unix(0, u.lastUse.Load())) > set.UpstreamIdleClose
		if idle {
			delete(c.gw.ups, u.owner) // no new request can pick it up now
		}
		c.gw.mu.Unlock()
		if idle {
			u.closing("idle")
			closeUpstream(u.up)
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
	c := u.c
	c.gw.mu.Lock()
	if c.gw.ups[u.owner] == u {
		delete(c.gw.ups, u.owner)
	}
	subs := make([]*fwdSub, 0, len(u.subs))
	for id, fs := range u.subs {
		subs = append(subs, fs)
		delete(u.subs, id)
		if c.gw.subs[fs.key] == fs {
			delete(c.gw.subs, fs.key)
		}
	}
	closing := c.gw.closed
	c.gw.mu.Unlock()
	c.srv.gwLimits.release(u.owner)
	close(u.gone)
	reason, err := "lost", u.up.Conn.Err()
	if r := u.reason.Load(); r != nil {
		reason = *r
	} else if err == nil || errors.Is(err, upclient.ErrClosed) {
		reason = "closed"
	}
	if reason == "lost" {
		c.log.Info("upstream session closed", "owner", string(u.owner), "reason", reason, "err", err, "subscriptions_closed", len(subs))
	} else {
		c.log.Info("upstream session closed", "owner", string(u.owner), "reason", reason, "subscriptions_closed", len(subs))
	}
	if closing {
		return
	}
	for _, fs := range subs {
		c.enqueue(outFrame{op: wire.OpSubscriptionClosed, body: &wire.SubscriptionClosed{SubID: fs.clientID,
			Code: wire.ReasonOwnerMoved, Message: "the upstream session to the partition's owner ended; subscribe again"}})
	}
}

// closeUpstream ends an upstream session in order (seed §6): an empty
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

// closeGateway closes every upstream session of a connection that ended
// (in order, in the background: the owners requeue what was held).
func (c *Conn) closeGateway() {
	g := &c.gw
	g.mu.Lock()
	g.closed = true
	ups := make([]*upstream, 0, len(g.ups))
	for _, u := range g.ups {
		ups = append(ups, u)
	}
	g.ups = nil
	g.mu.Unlock()
	for _, u := range ups {
		u.closing("client_closed")
		go closeUpstream(u.up)
	}
}

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

// inflightWaitMax caps how long a publish waits for forwarding byte room:
// the forward timeout, at most the 5 s heartbeat interval (issue 6 §6).
const inflightWaitMax = 5 * time.Second

// acquireInflight reserves n bytes of routing.max_inflight_forward_bytes,
// waiting (the client's reader, so the client feels the backpressure) at
// most the forward timeout capped at inflightWaitMax. A single publish
// larger than the limit passes when nothing else is in flight.
func (s *Server) acquireInflight(n int64, set Settings) bool {
	limit := set.MaxInflightForwardBytes
	wait := min(set.ForwardTimeout, inflightWaitMax)
	deadline := time.Now().Add(wait)
	for {
		cur := s.gwInflight.Load()
		if limit <= 0 || cur == 0 || cur+n <= limit {
			if s.gwInflight.CompareAndSwap(cur, cur+n) {
				s.opts.Metrics.ForwardInflightBytes.Add(float64(n))
				return true
			}
			continue
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *Server) releaseInflight(n int64) {
	s.gwInflight.Add(-n)
	s.opts.Metrics.ForwardInflightBytes.Sub(float64(n))
}

// ForwardingCounts is what the node publishes in its labels (seed §8):
// upstream sessions open as a gateway, forwarded sessions served as an
// owner.
func (s *Server) ForwardingCounts() (upstreams, forwarded int) {
	return s.gwLimits.open(), int(s.forwardedOpen.Load())
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
