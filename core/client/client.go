package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

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

	resumeMu sync.Mutex
	resume   map[string]wire.ResumeIdentity // per endpoint address (§8.4)

	subsMu sync.Mutex
	subs   map[*Subscription]struct{}
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
	// one dropped its connection, §2.2).
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
}

type statCounters struct {
	prefetchViolations, protocolViolations, uncorrelatedErrors, unmatchedReplies,
	unknownSubDeliveries, droppedDeliveries, staleSettles, ignoredFrames, reconnects atomic.Uint64
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

// Close closes every connection and subscription. Requests in flight fail
// with an error matching ErrOutcomeUnknown; later calls fail with
// ErrClosed.
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
		Resume: resume, Reconcile: rc, OnPush: ep.onPush,
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

// roundTrip sends a request and returns its success reply, applying the
// §7.3 client column: re-send a request that was never written, or that
// was answered with REDIRECT (at most MaxRedirects), 409 (when retry409)
// or 503, within ctx (or OperationTimeout when ctx has no deadline);
// never re-send after a 504 or after the connection died with the request
// in flight (ErrOutcomeUnknown). Other error codes are returned as *Error.
func (c *Client) roundTrip(ctx context.Context, spec opSpec) (Frame, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.OperationTimeout)
		defer cancel()
	}
	redirects, attempt := 0, 0
	var lastErr error
	retry := func(err error) bool {
		lastErr = err
		ok := sleepCtx(ctx, c.opts.backoff(attempt))
		attempt++
		return ok
	}
	giveUp := func(err error) error {
		if lastErr != nil {
			return lastErr
		}
		return err
	}
	for {
		if c.ctx.Err() != nil {
			return Frame{}, ErrClosed
		}
		key, body := spec.prepare()
		ep := c.route(key)
		conn, _, err := ep.get(ctx)
		if err != nil {
			switch {
			case errors.Is(err, ErrClosed) && c.ctx.Err() != nil:
				return Frame{}, ErrClosed
			case errors.Is(err, errRetired) && ctx.Err() == nil:
				continue // routed again from the updated cache
			case ctx.Err() != nil:
				return Frame{}, giveUp(err)
			case fatalDialError(err):
				return Frame{}, err
			}
			if key != nil && ep != c.pool.boot {
				// The owner is unreachable: it may have moved or died.
				c.refreshTopology(ctx, key.topic, key.group)
			}
			if !retry(err) {
				return Frame{}, giveUp(err)
			}
			continue
		}
		if spec.onConn != nil {
			spec.onConn(ep)
		}
		var hook func(Frame)
		if spec.hook != nil {
			hook = func(f Frame) { spec.hook(ep, conn, f) }
		}
		f, err := conn.do(ctx, spec.op, body, hook)
		if err != nil {
			if isNotWritten(err) {
				// Never reached the broker: re-send while the deadline allows,
				// else report the last broker answer if there was one.
				if ctx.Err() != nil || !retry(err) {
					return Frame{}, giveUp(err)
				}
				continue
			}
			return Frame{}, err
		}
		switch f.Op {
		case wire.OpRedirect:
			var r wire.Redirect
			if err := f.Decode(&r); err != nil {
				c.stats.protocolViolations.Add(1)
				return Frame{}, protocolErrorf("malformed REDIRECT: %v", err)
			}
			if key != nil && (r.Topic != key.topic || r.Partition != key.partition || r.Group != key.group) {
				c.stats.protocolViolations.Add(1)
				return Frame{}, protocolErrorf("REDIRECT for (%q, %d, %v) answering %v for (%q, %d, %v)",
					r.Topic, r.Partition, r.Group, spec.op, key.topic, key.partition, key.group)
			}
			redirects++
			last := ""
			if len(r.Owners) > 0 {
				last = r.Owners[0].String()
			}
			if redirects > c.opts.MaxRedirects {
				return Frame{}, &RedirectError{Op: spec.op, Last: last, N: redirects}
			}
			// The REDIRECT is the freshest word on this partition: apply it
			// after any refresh it triggers, so the refresh cannot undo it.
			if spec.afterRedirect != nil {
				spec.afterRedirect(ctx, &r)
			}
			c.topo.applyRedirect(&r)
			continue
		case wire.OpError, wire.OpSubscribeErr:
			err := errorFromBody(spec.op, f.Body)
			var be *Error
			if !errors.As(err, &be) {
				return Frame{}, err
			}
			switch {
			case be.Code == wire.CodeConflict && spec.retry409:
				if key != nil {
					c.refreshTopology(ctx, key.topic, key.group)
				}
				if !retry(be) {
					return Frame{}, be
				}
				continue
			case be.Code == wire.CodeUnavailable:
				if !retry(be) {
					return Frame{}, be
				}
				continue
			}
			return Frame{}, be // 504 matches ErrOutcomeUnknown and is never replayed
		}
		return f, nil
	}
}

// sendFireAndForget writes a request that has no reply (unconfirmed
// publish), re-sending only while it was never written.
func (c *Client) sendFireAndForget(ctx context.Context, op wire.Op, key *routeKey, body wire.Encoder) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.OperationTimeout)
		defer cancel()
	}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if c.ctx.Err() != nil {
			return ErrClosed
		}
		conn, _, err := c.route(key).get(ctx)
		if err == nil {
			if err = conn.Send(op, 0, body); err == nil {
				return nil
			}
		}
		if errors.Is(err, errRetired) && ctx.Err() == nil {
			continue // routed again from the updated cache
		}
		if fatalDialError(err) || (errors.Is(err, ErrClosed) && c.ctx.Err() != nil) {
			return err
		}
		lastErr = err
		if ctx.Err() != nil || !sleepCtx(ctx, c.opts.backoff(attempt)) {
			return lastErr
		}
	}
}
