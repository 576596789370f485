package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// errRetired: the endpoint was dropped from the pool (it owns nothing
// any more); the caller routes again.
var errRetired = errors.New("fibril client: endpoint retired")

// session is one broker-side session as seen through an endpoint. It
// survives reconnects that the broker answers with `resumed`; any other
// outcome makes it stale, and deliveries received under it can no longer
// be settled (docs/protocol.md#resume).
type session struct{ stale atomic.Bool }

type dialAttempt struct {
	done chan struct{}
	err  error
}

// endpoint is the supervised connection to one broker address, with the
// queue subscriptions registered on it. It reconnects (presenting the
// resume identity and reconciling its subscriptions) when the connection
// drops and it still has a reason to exist.
type endpoint struct {
	cl         *Client
	bootstrap  bool
	candidates []string // bootstrap only: Options.Addrs, tried in turn

	mu        sync.Mutex
	addr      string
	next      int // bootstrap: index of the candidate to dial next
	conn      *Conn
	sess      *session
	attempt   *dialAttempt
	subs      map[*partSub]struct{} // live queue subscriptions attached here
	byID      map[uint64]*partSub   // sub_id on the current connection → subscription
	hadSubs   bool                  // the broker session may hold subscriptions: reconcile on reconnect
	retired   bool
	connected bool // connected at least once (for the reconnect counter)
	// bootstrap only: the resume identity of its own session and the
	// address it holds for. The bootstrap endpoint rotates over the
	// candidates; it must never resume the session of another endpoint
	// connected to the same broker (the broker would move that session's
	// pushes to this connection, under sub_ids it does not route).
	bootResume     *wire.ResumeIdentity
	bootResumeAddr string
}

func newEndpoint(cl *Client, addr string) *endpoint {
	return &endpoint{cl: cl, addr: addr, subs: make(map[*partSub]struct{}), byID: make(map[uint64]*partSub)}
}

func (ep *endpoint) currentAddr() string {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.addr
}

// live returns the live connection, or nil when there is none (no dial
// is started).
func (ep *endpoint) live() (*Conn, *session) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.retired || ep.conn == nil || ep.conn.closed() {
		return nil, nil
	}
	return ep.conn, ep.sess
}

// get returns the live connection, dialing (or joining a dial in progress)
// if there is none. A failed dial returns its error; the caller decides
// whether to back off and try again.
func (ep *endpoint) get(ctx context.Context) (*Conn, *session, error) {
	for {
		ep.mu.Lock()
		if ep.retired {
			ep.mu.Unlock()
			return nil, nil, errRetired
		}
		if ep.conn != nil && !ep.conn.closed() {
			c, s := ep.conn, ep.sess
			ep.mu.Unlock()
			return c, s, nil
		}
		att := ep.ensureDialLocked()
		ep.mu.Unlock()
		select {
		case <-att.done:
			if att.err != nil {
				return nil, nil, att.err
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-ep.cl.ctx.Done():
			return nil, nil, ErrClosed
		}
	}
}

func (ep *endpoint) ensureDialLocked() *dialAttempt {
	if ep.attempt == nil {
		ep.attempt = &dialAttempt{done: make(chan struct{})}
		go ep.dial(ep.attempt)
	}
	return ep.attempt
}

// dial runs one connect + handshake. On success it installs the
// connection: a non-resumed session makes the previous one stale and
// drops the deliveries still buffered under it; reconcile verdicts re-key
// or release the subscriptions; only then does the reader start, so no
// DELIVER is routed with a stale sub_id.
func (ep *endpoint) dial(att *dialAttempt) {
	cl := ep.cl
	ctx, cancel := context.WithTimeout(cl.ctx, cl.opts.DialTimeout)
	defer cancel()

	ep.mu.Lock()
	addr := ep.addr
	resume := cl.resumeFor(addr)
	if ep.bootstrap {
		addr = ep.candidates[ep.next%len(ep.candidates)]
		resume = nil
		if addr == ep.bootResumeAddr {
			resume = ep.bootResume
		}
	}
	var rc *wire.ReconcileClient
	var sent map[uint64]*partSub
	if ep.hadSubs {
		rc, sent = buildReconcile(cl.opts.ReconcilePolicy.wire(), ep.subs)
	}
	ep.mu.Unlock()

	cfg := cl.connConfig(resume, rc, ep)
	conn, err := dialConn(ctx, addr, cfg, &cl.stats)
	// A private endpoint that did not answer is avoided from now on
	// (Options.PreferPrivateEndpoints): recorded before the waiters wake,
	// so that they route past it.
	privateFailed := err != nil && !ep.bootstrap && cl.topo.privateFailed(addr)

	ep.mu.Lock()
	if err == nil && (ep.retired || cl.ctx.Err() != nil) {
		conn.Close()
		err = errRetired
		if cl.ctx.Err() != nil {
			err = ErrClosed
		}
	}
	if err != nil {
		if ep.bootstrap {
			ep.next++
		}
		ep.attempt = nil
		att.err = err
		close(att.done)
		ep.mu.Unlock()
		cl.log.Debug("connect failed", "broker", addr, "err", err)
		if privateFailed {
			cl.log.Info("private endpoint did not answer; using the gateway", "broker", addr, "err", err,
				"retry_after", cl.opts.PrivateRetryAfter)
		}
		return
	}
	hs := conn.Handshake()
	if id := hs.Hello.Identity(); ep.bootstrap {
		ep.bootResume, ep.bootResumeAddr = &id, addr
	} else {
		cl.setResume(addr, id)
	}
	resumed := hs.Hello.ResumeOutcome == wire.ResumeResumed && ep.sess != nil
	if !resumed {
		if ep.sess != nil {
			ep.sess.stale.Store(true)
		}
		ep.sess = &session{}
		for ps := range ep.subs {
			ps.purge()
		}
	}
	var notes []detachNote
	ep.byID = make(map[uint64]*partSub)
	if rc != nil {
		notes = ep.applyReconcileLocked(sent, hs.Reconcile)
	}
	for ps := range ep.subs {
		if ps.sub.stream != nil {
			// The broker ended them with the old connection (S-83); the
			// supervisor subscribes again. A named one starts again at its
			// cursor, which is at or before what is buffered here: drop
			// the buffer rather than hand those records out twice.
			if ps.sub.stream.DurableName != "" {
				ps.purge()
			}
			delete(ep.subs, ps)
			notes = append(notes, detachNote{ps: ps, code: wire.ReasonOwnerMoved,
				msg: "reconnected: stream subscriptions are subscribed again"})
		}
	}
	ep.addr = addr
	ep.conn = conn
	ep.hadSubs = len(ep.subs) > 0
	if ep.connected {
		cl.stats.reconnects.Add(1)
	}
	ep.connected = true
	ep.attempt = nil
	close(att.done)
	ep.mu.Unlock()

	cl.log.Debug("connected", "broker", addr, "resume", hs.Hello.ResumeOutcome, "reconciled", len(sent))
	for _, n := range notes {
		n.ps.detached(n)
	}
	conn.Start()
	go ep.watch(conn)
}

// watch waits for conn to end and starts reconnecting when the endpoint
// still matters: it is the bootstrap (topology pushes arrive there) or it
// carries subscriptions (reconcile should restore them).
func (ep *endpoint) watch(conn *Conn) {
	<-conn.Done()
	ep.mu.Lock()
	if ep.conn != conn {
		ep.mu.Unlock()
		return
	}
	ep.conn = nil
	ep.byID = make(map[uint64]*partSub)
	lost := !ep.retired && ep.cl.ctx.Err() == nil
	need := lost && (ep.bootstrap || len(ep.subs) > 0)
	ep.mu.Unlock()
	if lost && !ep.bootstrap && ep.cl.topo.privateFailed(conn.Addr()) {
		// A private endpoint (Options.PreferPrivateEndpoints) is not
		// reconnected: its partitions go through the gateway, where the
		// subscriptions subscribe again.
		ep.cl.log.Info("connection to a private endpoint lost; using the gateway", "broker", conn.Addr(), "err", conn.Err(),
			"retry_after", ep.cl.opts.PrivateRetryAfter)
		ep.releaseSubs(detachNote{msg: "connection to the private endpoint lost; subscribing through the gateway"})
		return
	}
	if need {
		ep.cl.log.Info("connection lost; reconnecting", "broker", conn.Addr(), "err", conn.Err())
	} else {
		ep.cl.log.Debug("connection ended", "broker", conn.Addr(), "err", conn.Err())
	}
	if need {
		go ep.reconnectLoop()
	}
}

// reconnectLoop reconnects with backoff. If the first attempt fails, the
// subscriptions are handed back to their supervisors (not restored by
// reconcile: they re-subscribe, possibly elsewhere); the bootstrap keeps
// trying until the client closes.
func (ep *endpoint) reconnectLoop() {
	cl := ep.cl
	for attempt := 0; ; attempt++ {
		if !sleepCtx(cl.ctx, cl.opts.backoff(attempt)) {
			return
		}
		ep.mu.Lock()
		if ep.retired || ep.conn != nil {
			ep.mu.Unlock()
			return
		}
		att := ep.ensureDialLocked()
		ep.mu.Unlock()
		select {
		case <-att.done:
		case <-cl.ctx.Done():
			return
		}
		if att.err == nil {
			return
		}
		ep.releaseSubs(detachNote{msg: "connection lost and not restored", refresh: true})
		ep.mu.Lock()
		again := ep.bootstrap && !ep.retired
		ep.mu.Unlock()
		if !again {
			return
		}
	}
}

// releaseSubs detaches every subscription of the endpoint and tells its
// supervisor why. The broker session may still hold them, so the next
// handshake reconciles (hadSubs stays set).
func (ep *endpoint) releaseSubs(n detachNote) {
	ep.mu.Lock()
	var out []*partSub
	for ps := range ep.subs {
		out = append(out, ps)
		delete(ep.subs, ps)
	}
	ep.mu.Unlock()
	for _, ps := range out {
		nn := n
		nn.ps = ps
		ps.detached(nn)
	}
}

// retire removes an endpoint that owns nothing any more: its subscriptions
// re-subscribe through fresh routing and its connection is closed once no
// request is waiting on it.
func (ep *endpoint) retire() {
	ep.mu.Lock()
	if ep.retired || ep.bootstrap {
		ep.mu.Unlock()
		return
	}
	ep.retired = true
	conn := ep.conn
	ep.mu.Unlock()
	ep.releaseSubs(detachNote{msg: "endpoint owns no partition any more", refresh: true})
	if conn != nil {
		go closeWhenIdle(conn, ep.cl.opts.OperationTimeout)
	}
}

func closeWhenIdle(conn *Conn, limit time.Duration) {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for conn.waiters() > 0 && time.Now().Before(deadline) {
		select {
		case <-conn.Done():
			return
		case <-t.C:
		}
	}
	conn.Close()
}

// shutdown closes the endpoint for good (Client.Close).
func (ep *endpoint) shutdown() {
	ep.mu.Lock()
	ep.retired = true
	conn := ep.conn
	ep.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// onPush handles the pushes of one connection of this endpoint; it runs on
// that connection's reader goroutine.
func (ep *endpoint) onPush(conn *Conn, f Frame) {
	cl := ep.cl
	switch f.Op {
	case wire.OpDeliver:
		d := new(wire.Deliver)
		if err := f.Decode(d); err != nil {
			cl.stats.protocolViolations.Add(1)
			cl.log.Warn("malformed DELIVER", "err", err)
			return
		}
		ep.mu.Lock()
		ps, sess := ep.byID[d.SubID], ep.sess
		ep.mu.Unlock()
		if ps == nil {
			cl.stats.unknownSubDeliveries.Add(1)
			cl.log.Debug("DELIVER for an unknown sub_id", "sub_id", d.SubID)
			return
		}
		ps.deliver(ep, conn, sess, f.RequestID, d)
	case wire.OpSubscriptionClosed:
		var sc wire.SubscriptionClosed
		if err := f.Decode(&sc); err != nil {
			cl.stats.protocolViolations.Add(1)
			cl.log.Warn("malformed SUBSCRIPTION_CLOSED", "err", err)
			return
		}
		ep.mu.Lock()
		ps := ep.byID[sc.SubID]
		delete(ep.byID, sc.SubID)
		_, live := ep.subs[ps]
		delete(ep.subs, ps)
		ep.mu.Unlock()
		if ps == nil || !live {
			return // unknown sub_id: ignored (docs/protocol.md#reason-codes)
		}
		ps.detached(detachNote{ps: ps, code: sc.Code, msg: sc.Message, terminal: terminalReason(sc.Code), refresh: true})
	case wire.OpTopologyUpdate:
		cl.onTopologyUpdate(conn, f)
	case wire.OpGoingAway:
		var g wire.GoingAway
		if err := f.Decode(&g); err == nil {
			cl.log.Info("broker going away", "broker", conn.Addr(), "grace_ms", g.GraceMillis, "message", g.Message)
		}
	case wire.OpAssignmentChanged:
		var ac wire.AssignmentChanged
		if err := f.Decode(&ac); err != nil {
			cl.stats.protocolViolations.Add(1)
			cl.log.Warn("malformed ASSIGNMENT_CHANGED", "err", err)
			return
		}
		cl.onAssignment(conn.Addr(), &ac)
	default:
		// RECONCILE_SERVER (never sent upstream) is ignored.
	}
}

// pool holds one endpoint per broker address, plus the bootstrap.
type pool struct {
	cl   *Client
	mu   sync.Mutex
	boot *endpoint
	eps  map[string]*endpoint
}

// endpoint returns the endpoint for addr; "" is the bootstrap.
func (p *pool) endpoint(addr string) *endpoint {
	if addr == "" || p.boot.currentAddr() == addr {
		return p.boot
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ep := p.eps[addr]
	if ep == nil {
		ep = newEndpoint(p.cl, addr)
		p.eps[addr] = ep
	}
	return ep
}

// prune retires pooled endpoints that own nothing in the cache (S-115).
func (p *pool) prune(owned map[string]bool) {
	p.mu.Lock()
	var drop []*endpoint
	for a, ep := range p.eps {
		if !owned[a] {
			drop = append(drop, ep)
			delete(p.eps, a)
		}
	}
	p.mu.Unlock()
	for _, ep := range drop {
		ep.retire()
	}
}

func (p *pool) shutdown() {
	p.mu.Lock()
	eps := []*endpoint{p.boot}
	for _, ep := range p.eps {
		eps = append(eps, ep)
	}
	p.mu.Unlock()
	// Each connection flushes what is queued before it closes: in
	// parallel, so that one stuck socket does not delay the others.
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep.shutdown()
		}()
	}
	wg.Wait()
}
