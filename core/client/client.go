package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Client is a connection-pooling, topology-routing Fibril client. It is
// safe for concurrent use.
type Client struct {
	opts   Options
	log    *slog.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	pool   *pool
	topo   *topoCache
	stats  statCounters
	async  *completer // callbacks of PublishAsync

	resumeMu sync.Mutex
	resume   map[string]wire.ResumeIdentity // per endpoint address (docs/protocol.md#resume)

	subsMu sync.Mutex
	subs   map[*Subscription]struct{}

	// publishing holds the queues (countKey) this client made a Publisher
	// for: their owners are dialed ahead of need (warm.go).
	publishing sync.Map

	// fenceRefresh holds, per queue, the TOPOLOGY refresh in flight after a
	// fence, closed when it is done (learnVersion).
	fenceMu      sync.Mutex
	fenceRefresh map[countKey]chan struct{}

	// member is the member id of this client's exclusive subscriptions,
	// once a broker gave one (docs/protocol.md#consumer-groups): sent on
	// every later exclusive SUBSCRIBE, to every broker, so the client is
	// one member everywhere.
	memberMu  sync.Mutex
	member    wire.UUID
	hasMember bool
}

// Stats are counters of broker behaviour the client noticed. Tests assert
// that the violation counters stay at zero.
type Stats struct {
	// PrefetchViolations counts DELIVERs that arrived for a manual-ack
	// subscription whose buffer already held prefetch deliveries.
	PrefetchViolations uint64
	// ProtocolViolations counts other broker mistakes that did not end a
	// connection: malformed pushes, a DELIVER whose key does not match its
	// subscription, a reply op that cannot answer the request, bad
	// SUBSCRIBE_OK echoes, reconcile results that skip or invent entries.
	ProtocolViolations uint64
	// UncorrelatedErrors counts ERROR frames for no pending request (each
	// one dropped its connection, docs/protocol.md#request-ids).
	UncorrelatedErrors uint64
	// UnmatchedReplies counts other replies for no pending request (for
	// example a REDIRECT answering a fire-and-forget publish).
	UnmatchedReplies uint64
	// UnknownSubDeliveries counts DELIVERs for a sub_id the connection
	// never registered.
	UnknownSubDeliveries uint64
	// DroppedDeliveries counts DELIVERs for subscriptions closed locally.
	DroppedDeliveries uint64
	// StaleSettles counts Ack/Retry/Fail calls refused with ErrStaleDelivery.
	StaleSettles uint64
	// IgnoredFrames counts frames with an opcode the client does not handle.
	IgnoredFrames uint64
	// Reconnects counts successful connects after the first, per endpoint.
	Reconnects uint64
	// Fenced counts publishes a REDIRECT with a newer partitioning version
	// sent back (the queue was repartitioned, docs/repartition.md): each was
	// routed again by the new count. Not a broker mistake: a producer
	// meets the fence once per repartition per publish in flight.
	Fenced uint64

	// Write batching (not broker behaviour): frames queued on the
	// connections (a merged ACK counts once), Write calls that carried them
	// to the sockets, bytes written, and ACKs merged into the ACK queued
	// just before them.
	FramesQueued, WriteCalls, BytesWritten, AcksMerged uint64
	// CallerWrites counts the WriteCalls made by the caller that queued a
	// lone frame rather than by the connection's writer (plaintext TCP
	// only; see "Writes" in the package documentation).
	CallerWrites uint64
}

type statCounters struct {
	prefetchViolations, protocolViolations, uncorrelatedErrors, unmatchedReplies,
	unknownSubDeliveries, droppedDeliveries, staleSettles, ignoredFrames, reconnects, fenced atomic.Uint64

	framesQueued, writeCalls, bytesWritten, acksMerged, callerWrites atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		PrefetchViolations:   s.prefetchViolations.Load(),
		ProtocolViolations:   s.protocolViolations.Load(),
		UncorrelatedErrors:   s.uncorrelatedErrors.Load(),
		UnmatchedReplies:     s.unmatchedReplies.Load(),
		UnknownSubDeliveries: s.unknownSubDeliveries.Load(),
		DroppedDeliveries:    s.droppedDeliveries.Load(),
		StaleSettles:         s.staleSettles.Load(),
		IgnoredFrames:        s.ignoredFrames.Load(),
		Reconnects:           s.reconnects.Load(),
		Fenced:               s.fenced.Load(),
		FramesQueued:         s.framesQueued.Load(),
		WriteCalls:           s.writeCalls.Load(),
		BytesWritten:         s.bytesWritten.Load(),
		AcksMerged:           s.acksMerged.Load(),
		CallerWrites:         s.callerWrites.Load(),
	}
}

// Dial connects to the first bootstrap address that completes the
// handshake, then loads the whole topology into the routing cache. It
// fails if no address completes the handshake (the error joins every
// attempt's failure) or if the TOPOLOGY request fails.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("fibril client: Options.Addrs is empty")
	}
	opts = opts.withDefaults()
	c := &Client{
		opts:   opts,
		log:    opts.Logger,
		topo:   newTopoCache(),
		resume: make(map[string]wire.ResumeIdentity),
		subs:   make(map[*Subscription]struct{}),
		async:  newCompleter(),
	}
	if opts.PreferPrivateEndpoints {
		c.topo.preferPrivateEndpoints(opts.PrivateRetryAfter)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	boot := newEndpoint(c, opts.Addrs[0])
	boot.bootstrap = true
	boot.candidates = append([]string(nil), opts.Addrs...)
	c.pool = &pool{cl: c, boot: boot, eps: make(map[string]*endpoint)}

	var errs []error
	for range opts.Addrs {
		_, _, err := boot.get(ctx)
		if err == nil {
			errs = nil
			break
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if errs != nil {
		c.Close()
		return nil, errors.Join(errs...)
	}
	if _, err := c.Topology(ctx, ""); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every connection and subscription. Each connection first
// hands the frames already queued (acks, unconfirmed publishes) to its
// socket, for at most 2s. Requests in flight then fail with an error
// matching ErrOutcomeUnknown (and PublishAsync callbacks run with it);
// later calls fail with ErrClosed.
func (c *Client) Close() error {
	c.subsMu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	c.subsMu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	c.cancel()
	c.pool.shutdown()
	return nil
}

func (c *Client) trackSub(s *Subscription, add bool) {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if add {
		c.subs[s] = struct{}{}
	} else {
		delete(c.subs, s)
	}
}

func (c *Client) resumeFor(addr string) *wire.ResumeIdentity {
	c.resumeMu.Lock()
	defer c.resumeMu.Unlock()
	if id, ok := c.resume[addr]; ok {
		return &id
	}
	return nil
}

func (c *Client) setResume(addr string, id wire.ResumeIdentity) {
	c.resumeMu.Lock()
	defer c.resumeMu.Unlock()
	c.resume[addr] = id
}

func (c *Client) connConfig(resume *wire.ResumeIdentity, rc *wire.ReconcileClient, ep *endpoint) ConnConfig {
	o := &c.opts
	return ConnConfig{
		ClientName: o.ClientName, ClientVersion: o.ClientVersion,
		Username: o.Username, Password: o.Password,
		TLS: o.TLS, Heartbeat: o.Heartbeat, Dial: o.Dial, Logger: o.Logger,
		Resume: resume, Reconcile: rc, OnPush: ep.onPush, WriteBufferSize: o.WriteBufferSize,
	}
}

// route returns the endpoint for a partition key: its cached owner, or the
// bootstrap when the owner is unknown (or k is nil).
func (c *Client) route(k *routeKey) *endpoint {
	if k == nil {
		return c.pool.boot
	}
	return c.pool.endpoint(c.topo.owner(*k))
}

// opSpec describes one request for roundTrip.
type opSpec struct {
	op wire.Op
	// retry409 re-sends after ERROR/SUBSCRIBE_ERR 409 (not the owner),
	// refreshing the topology first. Declares do not set it: their 409 is
	// a real conflict.
	retry409 bool
	// prepare returns the route key (nil = bootstrap) and the body, once
	// per attempt, so that a re-send can pick up a changed route or
	// partitioning version.
	prepare func() (*routeKey, wire.Encoder)
	// onConn runs once the connection is known, before the write.
	onConn func(ep *endpoint)
	// hook runs on the reader goroutine when the reply arrives.
	hook func(ep *endpoint, conn *Conn, f Frame)
	// afterRedirect runs after the cache took the REDIRECT, before the
	// re-send.
	afterRedirect func(ctx context.Context, r *wire.Redirect)
}

// waitCtx is the context for the blocking steps of an operation (dialing,
// backoff, topology refreshes). When the caller's context has no
// deadline the operation is bounded by OperationTimeout: the derived
// context (and its timer) is only created if such a step is needed, and
// replies are bounded by the connections' sweep instead.
type waitCtx struct {
	parent   context.Context
	deadline time.Time // zero: parent has its own deadline
	ctx      context.Context
	cancel   context.CancelFunc
}

func (c *Client) newWaitCtx(ctx context.Context) waitCtx {
	w := waitCtx{parent: ctx}
	if _, ok := ctx.Deadline(); !ok {
		w.deadline = time.Now().Add(c.opts.OperationTimeout)
	}
	return w
}

func (w *waitCtx) get() context.Context {
	if w.deadline.IsZero() {
		return w.parent
	}
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithDeadline(w.parent, w.deadline)
	}
	return w.ctx
}

// err is the context error of the operation: the parent's, or
// DeadlineExceeded once its OperationTimeout passed.
func (w *waitCtx) err() error {
	if err := w.parent.Err(); err != nil {
		return err
	}
	if !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (w *waitCtx) release() {
	if w.cancel != nil {
		w.cancel()
	}
}

// resendState is the re-send bookkeeping (docs/protocol.md#answers) of one operation across attempts.
type resendState struct {
	redirects, attempt int
	lastErr            error
}

// backoff records err as the last error and sleeps the next backoff; false
// when the operation's deadline ended first.
func (c *Client) backoff(w *waitCtx, st *resendState, err error) bool {
	st.lastErr = err
	ok := sleepCtx(w.get(), c.opts.backoff(st.attempt))
	st.attempt++
	return ok
}

// giveUp returns the last broker answer if there was one, else err.
func (st *resendState) giveUp(err error) error {
	if st.lastErr != nil {
		return st.lastErr
	}
	return err
}

// afterConnErr decides what to do when no connection could be had for an
// attempt: retry (true) or fail with the returned error.
func (c *Client) afterConnErr(w *waitCtx, ep *endpoint, key *routeKey, st *resendState, err error) (bool, error) {
	switch {
	case errors.Is(err, ErrClosed) && c.ctx.Err() != nil:
		return false, ErrClosed
	case errors.Is(err, errRetired) && w.err() == nil:
		return true, nil // routed again from the updated cache
	case w.err() != nil:
		return false, st.giveUp(err)
	case key != nil && c.route(key) != ep:
		// The route moved — a private endpoint that did not answer is
		// avoided now (Options.PreferPrivateEndpoints): the gateway at once.
		return true, nil
	case fatalDialError(err):
		return false, err
	}
	if key != nil && ep != c.pool.boot {
		// The owner is unreachable: it may have moved or died.
		c.refreshTopology(w.get(), key.topic, key.group)
	}
	if !c.backoff(w, st, err) {
		return false, st.giveUp(err)
	}
	return true, nil
}

// afterReply applies the client column of docs/protocol.md#answers to one attempt's outcome: a
// success reply is returned (retry false, err nil); a never-written
// request, a REDIRECT (at most MaxRedirects), a 409 (when retry409) and a
// 503 are re-sent (retry true) within the deadline, after the backoff or
// topology refresh they call for; anything else is final.
func (c *Client) afterReply(w *waitCtx, spec *opSpec, key *routeKey, st *resendState, f Frame, err error) (bool, error) {
	if err != nil {
		if isNotWritten(err) {
			// Never reached the broker: re-send while the deadline allows,
			// else report the last broker answer if there was one.
			if w.err() != nil || !c.backoff(w, st, err) {
				return false, st.giveUp(err)
			}
			return true, nil
		}
		return false, err
	}
	switch f.Op {
	case wire.OpRedirect:
		var r wire.Redirect
		if err := f.Decode(&r); err != nil {
			c.stats.protocolViolations.Add(1)
			return false, protocolErrorf("malformed REDIRECT: %v", err)
		}
		if key != nil && (r.Topic != key.topic || r.Partition != key.partition || r.Group != key.group) {
			c.stats.protocolViolations.Add(1)
			return false, protocolErrorf("REDIRECT for (%q, %d, %v) answering %v for (%q, %d, %v)",
				r.Topic, r.Partition, r.Group, spec.op, key.topic, key.partition, key.group)
		}
		st.redirects++
		last := ""
		if len(r.Owners) > 0 {
			last = r.Owners[0].String()
		}
		if st.redirects > c.opts.MaxRedirects {
			return false, &RedirectError{Op: spec.op, Last: last, N: st.redirects}
		}
		// The REDIRECT is the freshest word on this partition: apply it
		// after any refresh it triggers, so the refresh cannot undo it.
		if spec.afterRedirect != nil {
			spec.afterRedirect(w.get(), &r)
		}
		c.topo.applyRedirect(&r)
		return true, nil
	case wire.OpError, wire.OpSubscribeErr:
		err := errorFromBody(spec.op, f.Body)
		var be *Error
		if !errors.As(err, &be) {
			return false, err
		}
		switch {
		case be.Code == wire.CodeConflict && spec.retry409:
			if key != nil {
				c.refreshTopology(w.get(), key.topic, key.group)
			}
			if !c.backoff(w, st, be) {
				return false, be
			}
			return true, nil
		case be.Code == wire.CodeUnavailable:
			if !c.backoff(w, st, be) {
				return false, be
			}
			return true, nil
		}
		return false, be // 504 matches ErrOutcomeUnknown and is never replayed
	}
	return false, nil
}

// roundTrip sends a request and returns its success reply, applying the
// client column of docs/protocol.md#answers (afterReply) within ctx (or OperationTimeout when ctx
// has no deadline): re-send a request that was never written, or that was
// answered with REDIRECT, 409 (when retry409) or 503; never re-send after
// a 504 or after the connection died with the request in flight
// (ErrOutcomeUnknown). Other error codes are returned as *Error.
func (c *Client) roundTrip(ctx context.Context, spec opSpec) (Frame, error) {
	w := c.newWaitCtx(ctx)
	defer w.release()
	var st resendState
	for {
		if c.ctx.Err() != nil {
			return Frame{}, ErrClosed
		}
		key, body := spec.prepare()
		ep := c.route(key)
		conn, _ := ep.live()
		if conn == nil {
			var err error
			conn, _, err = ep.get(w.get())
			if err != nil {
				retry, err := c.afterConnErr(&w, ep, key, &st, err)
				if retry {
					continue
				}
				return Frame{}, err
			}
		}
		if spec.onConn != nil {
			spec.onConn(ep)
		}
		var hook func(Frame)
		if spec.hook != nil {
			hook = func(f Frame) { spec.hook(ep, conn, f) }
		}
		f, err := conn.do(ctx, spec.op, body, hook, w.deadline)
		retry, err := c.afterReply(&w, &spec, key, &st, f, err)
		if retry {
			continue
		}
		if err != nil {
			return Frame{}, err
		}
		return f, nil
	}
}

// sendFireAndForget queues a request that has no reply (unconfirmed
// publish), re-sending only while it could not be queued.
func (c *Client) sendFireAndForget(ctx context.Context, op wire.Op, key *routeKey, body wire.Encoder) error {
	w := c.newWaitCtx(ctx)
	defer w.release()
	var st resendState
	for {
		if c.ctx.Err() != nil {
			return ErrClosed
		}
		ep := c.route(key)
		conn, _ := ep.live()
		var err error
		if conn == nil {
			conn, _, err = ep.get(w.get())
		}
		if err == nil {
			if err = conn.queueFrame(w.get(), op, conn.NextID(), body, nil, false); err == nil {
				return nil
			}
		}
		if (errors.Is(err, errRetired) || key != nil && c.route(key) != ep) && w.err() == nil {
			continue // routed again from the updated cache (or past an avoided private endpoint)
		}
		if fatalDialError(err) || (errors.Is(err, ErrClosed) && c.ctx.Err() != nil) {
			return err
		}
		if w.err() != nil || !c.backoff(&w, &st, err) {
			return err
		}
	}
}
