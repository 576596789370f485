package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/fibrilgo/fibril/core"
)

// watchWait is how long one blocking query waits before Consul answers
// "no change" and the Watch loop asks again. Consul adds up to 1/16 of
// jitter. It bounds the requests an idle watcher makes (one per minute),
// and how long a reset of Consul's index can go unnoticed.
const watchWait = time.Minute

// watchCoalesce is the least time between a blocking query that returned
// a change and the next one this node sends. Each answer carries the
// whole key root, so in a burst of writes (a thousand queues declared and
// placed) answering every single write would cost each broker one full
// read per write; waiting this long first folds the writes of the pause
// into one read, for at most this much more latency on a change.
const watchCoalesce = 25 * time.Millisecond

// Bounds of one request when the caller gives no deadline: a request the
// agent never answers (a connection a network fault left half-open) must
// not hang a caller forever. A blocking query may legitimately take
// watchWait plus Consul's jitter of up to 1/16 of it.
const (
	requestTimeout  = 10 * time.Second
	blockingTimeout = watchWait + watchWait/16 + requestTimeout
)

// Coordinator is the Consul backend of core.Coordinator.
type Coordinator struct {
	o       Options
	clients []*api.Client
	pools   []*http.Transport // the clients' connections
	addrs   []string
	cur     atomic.Int32 // index of the agent in use

	kvRoot string // "<prefix>/kv/": every key of the contract
	elRoot string // "<prefix>/elections/": the election locks

	index   indexClock
	reach   reachability
	metrics *metrics
	// woke is when a watch last returned a change (unix ns; watchCoalesce).
	woke atomic.Int64

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	// epoch ends the requests in flight when the agent stops or starts
	// answering again (abandonInFlight): they may sit on connections that
	// a fault left half-open, where no answer will ever come.
	epochMu  sync.Mutex
	epoch    context.Context
	endEpoch context.CancelFunc
	probing  atomic.Bool // probeAgent runs
	closed   atomic.Bool
	wg       sync.WaitGroup // leadership goroutines
}

var (
	_ core.Coordinator   = (*Coordinator)(nil)
	_ core.LeaseAttacher = (*Coordinator)(nil)
	_ core.Reachability  = (*Coordinator)(nil)
)

// Open connects to the agents of o and checks, before anything is
// served, that the token may do everything the backend needs (a missing
// ACL right is a startup error naming the right).
func Open(ctx context.Context, o Options) (*Coordinator, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	c := &Coordinator{o: o, addrs: o.Addresses, kvRoot: o.Prefix + "/kv/", elRoot: o.Prefix + "/elections/"}
	var err error
	if c.clients, c.pools, err = o.clients(); err != nil {
		return nil, err
	}
	c.reach.log = o.Logger
	c.reach.changed = c.reachabilityChanged
	c.epoch, c.endEpoch = context.WithCancel(context.Background())
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	c.metrics, c.reach.gauge = m, m.reachable
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if err := c.checkAccess(ctx); err != nil {
		c.cancel()
		m.unregister()
		return nil, err
	}
	o.Logger.Info("consul: connected", "agent", c.agent(), "prefix", o.Prefix, "session_ttl", o.SessionTTL)
	return c, nil
}

// MinTTL implements core.Coordinator: the configured session TTL, never
// below Consul's floor of 10 s.
func (c *Coordinator) MinTTL() time.Duration { return c.o.SessionTTL }

// Unreachable implements core.Reachability.
func (c *Coordinator) Unreachable() error { return c.reach.err() }

// Close implements core.Coordinator. Sessions are left to expire.
func (c *Coordinator) Close() error {
	c.epochMu.Lock() // orders Close with reachabilityChanged's wg.Add
	already := c.closed.Swap(true)
	c.epochMu.Unlock()
	if already {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	c.metrics.unregister()
	c.abandonInFlight()
	return nil
}

// reachabilityChanged runs when the agent stops answering and when it
// answers again. Either way the requests in flight are abandoned (their
// callers retry, and the level-triggered contract loses nothing) and
// idle connections dropped, so the next requests use fresh connections
// rather than ones a fault left half-open. While the agent is
// unreachable, probeAgent asks it for its leader twice a second, so that
// its return is noticed at once even if every caller is still waiting
// out a request.
func (c *Coordinator) reachabilityChanged() {
	c.abandonInFlight()
	if c.reach.err() == nil {
		return
	}
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	if !c.closed.Load() && c.probing.CompareAndSwap(false, true) {
		c.wg.Add(1)
		go c.probeAgent()
	}
}

func (c *Coordinator) abandonInFlight() {
	c.epochMu.Lock()
	c.endEpoch()
	c.epoch, c.endEpoch = context.WithCancel(context.Background())
	c.epochMu.Unlock()
	for _, p := range c.pools {
		if p != nil {
			p.CloseIdleConnections()
		}
	}
}

func (c *Coordinator) currentEpoch() context.Context {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	return c.epoch
}

func (c *Coordinator) check() error {
	if c.closed.Load() {
		return core.ErrClosed
	}
	return nil
}

// probeInterval is how often probeAgent asks an unreachable agent.
const probeInterval = 500 * time.Millisecond

func (c *Coordinator) probeAgent() {
	defer c.wg.Done()
	defer c.probing.Store(false)
	for c.reach.err() != nil {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(probeInterval):
		}
		ctx, cancel := context.WithTimeout(c.ctx, probeInterval)
		_, _ = call(c, ctx, "status", func(ctx context.Context, cl *api.Client) (string, error) {
			return cl.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		})
		cancel()
	}
}

// call runs one request against the current agent and classifies its
// error. A connection error moves to the next agent for the next call.
//
// A request gets a deadline of requestTimeout (blockingTimeout for a
// blocking query) within the caller's, and ends early when the
// Coordinator closes or abandonInFlight runs.
func call[T any](c *Coordinator, ctx context.Context, what string, f func(ctx context.Context, cl *api.Client) (T, error)) (T, error) {
	return callKind(c, ctx, what, false, f)
}

// callBlocking is call for a blocking query.
func callBlocking[T any](c *Coordinator, ctx context.Context, what string, f func(ctx context.Context, cl *api.Client) (T, error)) (T, error) {
	return callKind(c, ctx, what, true, f)
}

func callKind[T any](c *Coordinator, ctx context.Context, what string, blocking bool, f func(ctx context.Context, cl *api.Client) (T, error)) (T, error) {
	var zero T
	if err := c.check(); err != nil {
		return zero, err
	}
	limit := requestTimeout
	if blocking {
		limit = blockingTimeout
	}
	rctx, stop := context.WithTimeout(ctx, limit)
	defer stop()
	defer context.AfterFunc(c.ctx, stop)()
	epoch := c.currentEpoch()
	defer context.AfterFunc(epoch, stop)()
	i := int(c.cur.Load())
	v, err := f(rctx, c.clients[i])
	if err == nil {
		c.metrics.requests.WithLabelValues(what, "ok").Inc()
		c.reach.ok()
		return v, nil
	}
	c.metrics.requests.WithLabelValues(what, "error").Inc()
	if epoch.Err() != nil && ctx.Err() == nil && !c.closed.Load() {
		// Abandoned by reachabilityChanged: says nothing of the agent.
		return zero, fmt.Errorf("consul %s via %s: %w: request abandoned when the agent's reachability changed; retry", what, c.addrs[i], core.ErrCoordinationUnavailable)
	}
	return zero, c.classify(ctx, i, what, err)
}

// classify turns a Consul client error into the contract's errors. ctx is
// the caller's: when it ended, its error is the answer (the contract), and
// when its deadline passed with no answer the agent counts as unreachable.
func (c *Coordinator) classify(ctx context.Context, agent int, what string, err error) error {
	if c.closed.Load() {
		return core.ErrClosed
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) && c.reach.err() == nil {
			// Only a first sign: an earlier error (connection refused,
			// say) tells an operator more than a timeout does.
			c.reach.fail(c.addrs[agent], fmt.Errorf("no answer to %s within the caller's deadline", what))
		}
		return cerr
	}
	msg := err.Error()
	status := statusOf(err)
	switch {
	case aclDenied(err):
		c.reach.ok() // the agent answered
		return core.Errorf(core.ErrForbidden, "consul %s: the ACL token (%s) is not allowed to: %s", what, KeyToken, msg)
	case status == http.StatusRequestEntityTooLarge || strings.Contains(msg, "too large"):
		c.reach.ok()
		return core.Errorf(core.ErrTooLarge, "consul %s: %s (Consul's kv_max_value_size and txn_max_req_len limit values, 512 KiB by default)", what, msg)
	case status == http.StatusBadRequest:
		c.reach.ok()
		return core.Errorf(core.ErrBadRequest, "consul %s: %s", what, msg)
	}
	if status == 0 && !strings.Contains(msg, "Unexpected response code") && !strings.Contains(msg, "Failed request") {
		// No HTTP answer at all: try the next agent next time.
		if n := len(c.clients); n > 1 {
			c.cur.CompareAndSwap(int32(agent), int32((agent+1)%n))
		}
	}
	c.reach.fail(c.addrs[agent], err)
	return fmt.Errorf("consul %s via %s: %w: %v", what, c.addrs[agent], core.ErrCoordinationUnavailable, err)
}

func (c *Coordinator) agent() string { return c.addrs[c.cur.Load()] }

// statusOf is the HTTP status of a Consul client error (0: no answer, or
// an error the client reports without its status).
func statusOf(err error) int {
	var se api.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// aclDenied reports whether Consul refused a request for its ACL token;
// a rolled-back transaction reports it only in its error text.
func aclDenied(err error) bool {
	msg := err.Error()
	return statusOf(err) == http.StatusForbidden || strings.Contains(msg, "Permission denied") || strings.Contains(msg, "ACL not found")
}

func queryOpts(ctx context.Context, consistent bool) *api.QueryOptions {
	return (&api.QueryOptions{RequireConsistent: consistent}).WithContext(ctx)
}

func (c *Coordinator) fromPair(p *api.KVPair) core.KV {
	return core.KV{Key: strings.TrimPrefix(p.Key, c.kvRoot), Value: p.Value, Version: p.ModifyIndex, Lease: p.Session}
}

// Get implements core.Coordinator: a consistent read (answered by the
// Consul leader after it confirmed leadership).
func (c *Coordinator) Get(ctx context.Context, key string) (core.KV, error) {
	if err := core.CheckKey(key); err != nil {
		return core.KV{}, err
	}
	p, err := call(c, ctx, "get", func(ctx context.Context, cl *api.Client) (*api.KVPair, error) {
		p, _, err := cl.KV().Get(c.kvRoot+key, queryOpts(ctx, true))
		return p, err
	})
	if err != nil {
		return core.KV{}, err
	}
	if p == nil {
		return core.KV{Key: key}, nil
	}
	return c.fromPair(p), nil
}

// List implements core.Coordinator. It reads the whole key root and
// filters, so that every index this backend hands out is the root's:
// Consul's index for a narrower prefix is that prefix's own, and would
// not compare with the cluster view's.
func (c *Coordinator) List(ctx context.Context, prefix string) ([]core.KV, uint64, error) {
	if err := core.CheckPrefix(prefix); err != nil {
		return nil, 0, err
	}
	pairs, raw, err := c.readRoot(ctx, false, 0)
	if err != nil {
		return nil, 0, err
	}
	return c.filter(pairs, prefix), c.index.observe(raw), nil
}

// readRoot reads every key under the key root with Consul's index: a
// consistent read ("list"), or a blocking query that answers once the
// index passes wait ("watch").
func (c *Coordinator) readRoot(ctx context.Context, blocking bool, wait uint64) (api.KVPairs, uint64, error) {
	type answer struct {
		pairs api.KVPairs
		index uint64
	}
	read := func(ctx context.Context, cl *api.Client) (answer, error) {
		q := queryOpts(ctx, !blocking)
		if blocking {
			q.WaitIndex, q.WaitTime = wait, watchWait
		}
		pairs, meta, err := cl.KV().List(c.kvRoot, q)
		if err != nil {
			return answer{}, err
		}
		return answer{pairs, meta.LastIndex}, nil
	}
	var a answer
	var err error
	if blocking {
		a, err = callBlocking(c, ctx, "watch", read)
	} else {
		a, err = call(c, ctx, "list", read)
	}
	return a.pairs, a.index, err
}

func (c *Coordinator) filter(pairs api.KVPairs, prefix string) []core.KV {
	out := []core.KV{}
	for _, p := range pairs {
		kv := c.fromPair(p)
		if strings.HasPrefix(kv.Key, prefix) {
			out = append(out, kv)
		}
	}
	return out // Consul lists in key order
}

// Watch implements core.Coordinator with blocking queries on the key
// root: no polling, one request per change or per watchWait.
func (c *Coordinator) Watch(ctx context.Context, prefix string, after uint64) ([]core.KV, uint64, error) {
	if err := core.CheckPrefix(prefix); err != nil {
		return nil, 0, err
	}
	for {
		wait := c.index.raw(after)
		if d := watchCoalesce - time.Duration(time.Now().UnixNano()-c.woke.Load()); wait > 0 && d > 0 {
			sleepCtx(ctx, d)
		}
		pairs, raw, err := c.readRoot(ctx, true, wait)
		if err != nil {
			return nil, 0, err
		}
		if idx := c.index.observe(raw); idx > after {
			c.woke.Store(time.Now().UnixNano())
			return c.filter(pairs, prefix), idx, nil
		}
	}
}

// CompareAndSet implements core.Coordinator. The write deletes the key
// and sets it again in the same transaction: Consul keeps a key's lock
// holder across a plain set, and the contract says a CompareAndSet
// unbinds a key from its lease.
func (c *Coordinator) CompareAndSet(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if err := core.CheckWritableKey(key); err != nil {
		return 0, err
	}
	return c.write(ctx, c.kvRoot+key, value, version, "")
}

// write is the one compare-and-set path: check the version, replace the
// key (bound to session when not empty), read back its new ModifyIndex.
func (c *Coordinator) write(ctx context.Context, full string, value []byte, version uint64, session string) (uint64, error) {
	ops := api.TxnOps{}
	switch version {
	case core.AnyVersion:
	case 0:
		ops = append(ops, kvOp(api.KVCheckNotExists, full, nil, 0, ""))
	default:
		ops = append(ops, kvOp(api.KVCheckIndex, full, nil, version, ""))
	}
	checks := len(ops)
	ops = append(ops, kvOp(api.KVDelete, full, nil, 0, ""))
	if session == "" {
		ops = append(ops, kvOp(api.KVSet, full, value, 0, ""))
	} else {
		ops = append(ops, kvOp(api.KVLock, full, value, 0, session))
	}
	ops = append(ops, kvOp(api.KVGet, full, nil, 0, ""))
	resp, err := c.txn(ctx, "write", ops)
	if err != nil {
		return 0, err
	}
	if len(resp.Errors) > 0 {
		e := resp.Errors[0]
		switch {
		case e.OpIndex < checks:
			return 0, fmt.Errorf("consul: %s: %w", strings.TrimPrefix(full, c.kvRoot), core.ErrVersionConflict)
		case session != "" && strings.Contains(e.What, "session"):
			return 0, fmt.Errorf("consul: session %s: %w", session, core.ErrLeaseLost)
		}
		return 0, fmt.Errorf("consul write %s: %w: %s", full, core.ErrCoordinationUnavailable, e.What)
	}
	for i := len(resp.Results) - 1; i >= 0; i-- {
		if r := resp.Results[i]; r.KV != nil && r.KV.Key == full {
			return r.KV.ModifyIndex, nil
		}
	}
	return 0, fmt.Errorf("consul write %s: %w: no result", full, core.ErrCoordinationUnavailable)
}

func kvOp(verb api.KVOp, key string, value []byte, index uint64, session string) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: verb, Key: key, Value: value, Index: index, Session: session}}
}

// txn runs a transaction; a rolled-back one is an answer (resp.Errors),
// not an error.
func (c *Coordinator) txn(ctx context.Context, what string, ops api.TxnOps) (*api.TxnResponse, error) {
	return call(c, ctx, what, func(ctx context.Context, cl *api.Client) (*api.TxnResponse, error) {
		_, resp, _, err := cl.Txn().Txn(ops, queryOpts(ctx, false))
		if err == nil && resp != nil {
			for _, e := range resp.Errors {
				if err := errors.New(e.What); aclDenied(err) {
					return nil, err
				}
			}
		}
		return resp, err
	})
}

// CompareAndDelete implements core.Coordinator.
func (c *Coordinator) CompareAndDelete(ctx context.Context, key string, version uint64) error {
	if err := core.CheckWritableKey(key); err != nil {
		return err
	}
	full := c.kvRoot + key
	var op *api.TxnOp
	switch version {
	case core.AnyVersion:
		op = kvOp(api.KVDelete, full, nil, 0, "")
	case 0:
		op = kvOp(api.KVCheckNotExists, full, nil, 0, "") // absent: done; present: conflict
	default:
		// delete-cas alone takes a missing key as deleted whatever the
		// index; the contract calls that a conflict.
		op = kvOp(api.KVCheckIndex, full, nil, version, "")
	}
	ops := api.TxnOps{op}
	if version != 0 && version != core.AnyVersion {
		ops = append(ops, kvOp(api.KVDeleteCAS, full, nil, version, ""))
	}
	resp, err := c.txn(ctx, "delete", ops)
	if err != nil {
		return err
	}
	if len(resp.Errors) > 0 {
		return fmt.Errorf("consul: %s: %w", key, core.ErrVersionConflict)
	}
	return nil
}

// indexClock keeps the index this Coordinator returns from going
// backwards when Consul's goes back (tombstones reaped, a store restored
// from an older snapshot): returned = base + Consul's, and base grows past
// every index already returned when Consul's falls.
type indexClock struct {
	mu      sync.Mutex
	base    uint64
	lastRaw uint64
}

func (k *indexClock) observe(raw uint64) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	raw = max(raw, 1) // Consul's own advice: never block on index 0
	if raw < k.lastRaw {
		k.base += k.lastRaw
	}
	k.lastRaw = raw
	return k.base + raw
}

// raw is the Consul index to block on for an index this Coordinator
// returned (0, answering at once, for one from before a reset).
func (k *indexClock) raw(idx uint64) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if idx < k.base {
		return 0
	}
	return idx - k.base
}

// reachability remembers whether the agent answered the last call, and
// logs once per change of state.
type reachability struct {
	log interface {
		Warn(string, ...any)
		Info(string, ...any)
	}
	gauge interface{ Set(float64) }
	// changed runs (outside the lock) when the state flips either way.
	changed func()
	mu      sync.Mutex
	last    error
	since   time.Time
}

func (r *reachability) fail(agent string, err error) {
	r.mu.Lock()
	flipped := r.last == nil
	if flipped {
		r.since = time.Now()
		if r.gauge != nil {
			r.gauge.Set(0)
		}
		if r.log != nil {
			r.log.Warn("consul: agent unreachable; retrying with backoff (a lease stays valid until its TTL runs out)", "agent", agent, "err", err)
		}
	}
	r.last = fmt.Errorf("consul agent %s: %w", agent, err)
	r.mu.Unlock()
	if flipped && r.changed != nil {
		r.changed()
	}
}

func (r *reachability) ok() {
	r.mu.Lock()
	flipped := r.last != nil
	if flipped {
		if r.log != nil {
			r.log.Info("consul: agent reachable again", "down_for", time.Since(r.since).Round(time.Millisecond))
		}
		if r.gauge != nil {
			r.gauge.Set(1)
		}
	}
	r.last = nil
	r.mu.Unlock()
	if flipped && r.changed != nil {
		r.changed()
	}
}

func (r *reachability) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}
