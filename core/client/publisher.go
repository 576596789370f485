package client

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Message is what a Publisher sends.
type Message struct {
	// Key picks the partition by FNV-1a (docs/protocol.md#publish) and travels as
	// partition_key. nil means no key (round-robin); an empty non-nil
	// slice is the empty key.
	Key []byte
	// Partition, when set, overrides the partition choice.
	Partition *uint32
	// ContentType is MIME text ("" = none); the four wire.ContentType forms map to
	// their tags, anything else travels as a custom type.
	ContentType string
	Headers     map[string]string
	Payload     []byte
	// TTL is the time to live from broker receipt (0 = queue default).
	// Delayed publishes have no TTL.
	TTL time.Duration
}

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	Group string // queue namespace ("" = default)
}

// Publisher publishes to one topic (and group). It is safe for concurrent
// use.
type Publisher struct {
	cl    *Client
	topic string
	group wire.Option[string]
	rr    atomic.Uint32
}

// Publisher returns a publisher for topic.
func (c *Client) Publisher(topic string, opts PublisherOptions) *Publisher {
	p := &Publisher{cl: c, topic: topic, group: optStr(opts.Group)}
	c.notePublishing(countKey{p.topic, p.group})
	return p
}

// choose picks the partition and the partitioning version to send (docs/protocol.md#publish):
// an explicit partition wins; with N unknown or ≤ 1 it is 0; a key hashes
// with FNV-1a mod N; otherwise round-robin.
func (p *Publisher) choose(m *Message) (uint32, uint64) {
	n, version, known := p.cl.topo.count(p.topic, p.group)
	switch {
	case m.Partition != nil:
		return *m.Partition, version
	case !known || n <= 1:
		return 0, version
	case m.Key != nil:
		return wire.PartitionForKey(m.Key, n), version
	}
	return (p.rr.Add(1) - 1) % n, version
}

// afterFence runs on a REDIRECT answering a publish sent with partitioning
// version sent: a newer version means the queue was repartitioned, so the
// new count is learnt before the publish chooses its partition again.
func (p *Publisher) afterFence(ctx context.Context, r *wire.Redirect, sent uint64) {
	if r.PartitioningVersion <= sent {
		return
	}
	p.cl.stats.fenced.Add(1)
	p.cl.learnVersion(ctx, countKey{p.topic, p.group}, r.PartitioningVersion)
}

// learnVersion brings the cache's entry of queue k to partitioning version
// at least v. Every publish in flight meets a fence at once: one TOPOLOGY
// request per queue is made at a time, a publish that finds one in flight
// waits for it, and none is made once the cache knows v (from a refresh or
// a TOPOLOGY_UPDATE push). A publish that waited for another's refresh,
// which still answered an older version (its broker's view lagged), makes
// one of its own.
func (c *Client) learnVersion(ctx context.Context, k countKey, v uint64) {
	for range 2 {
		if _, known, ok := c.topo.count(k.topic, k.group); ok && known >= v {
			return
		}
		c.fenceMu.Lock()
		if wait := c.fenceRefresh[k]; wait != nil {
			c.fenceMu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return
			}
		}
		done := make(chan struct{})
		if c.fenceRefresh == nil {
			c.fenceRefresh = map[countKey]chan struct{}{}
		}
		c.fenceRefresh[k] = done
		c.fenceMu.Unlock()
		c.refreshTopology(ctx, k.topic, k.group)
		c.fenceMu.Lock()
		delete(c.fenceRefresh, k)
		c.fenceMu.Unlock()
		close(done)
		return
	}
}

func contentType(mime string) wire.ContentType {
	switch mime {
	case "":
		return wire.ContentType{}
	case "application/msgpack":
		return wire.ContentType{Tag: wire.ContentMsgPack}
	case "application/json":
		return wire.ContentType{Tag: wire.ContentJSON}
	case "text/plain; charset=utf-8":
		return wire.ContentType{Tag: wire.ContentText}
	}
	return wire.ContentType{Tag: wire.ContentCustom, Custom: mime}
}

func headers(m map[string]string) wire.Headers {
	if len(m) == 0 {
		return nil
	}
	h := make(wire.Headers, 0, len(m))
	for k, v := range m {
		h = append(h, wire.Header{Key: k, Value: v})
	}
	sort.Slice(h, func(i, j int) bool { return h[i].Key < h[j].Key })
	return h
}

// checkHeaders refuses reserved keys locally (docs/protocol.md#publish): the broker would
// answer ERROR 400, which for a fire-and-forget publish would arrive
// uncorrelated and drop the connection.
func checkHeaders(m map[string]string) error {
	for k := range m {
		if (strings.HasPrefix(k, "fibril.") && !strings.HasPrefix(k, "fibril.client.")) || strings.HasPrefix(k, "stroma.") {
			return errors.New("fibril client: header " + k + " is reserved")
		}
	}
	return nil
}

// publish builds the body for one attempt. The partition and version are
// re-chosen on every attempt, so a re-send after a REDIRECT with a newer
// partitioning version uses the refreshed count.
func (p *Publisher) build(m *Message, confirm bool, notBefore *time.Time) (*routeKey, wire.Encoder, uint64) {
	part, version := p.choose(m)
	k := &routeKey{topic: p.topic, partition: part, group: p.group}
	var key wire.Option[[]byte]
	if m.Key != nil {
		key = wire.Some(m.Key)
	}
	if notBefore != nil {
		return k, &wire.PublishDelayed{
			Topic: p.topic, Group: p.group, Partition: part, RequireConfirm: confirm,
			NotBefore: uint64(notBefore.UnixMilli()), ContentType: contentType(m.ContentType),
			Headers: headers(m.Headers), PartitionKey: key, PartitioningVersion: version, Payload: m.Payload,
		}, version
	}
	body := &wire.Publish{
		Topic: p.topic, Group: p.group, Partition: part, RequireConfirm: confirm,
		ContentType: contentType(m.ContentType), Headers: headers(m.Headers),
		PartitionKey: key, PartitioningVersion: version, Payload: m.Payload,
	}
	if m.TTL > 0 {
		body.TTLMillis = wire.Some(uint64(max(1, m.TTL.Milliseconds())))
	}
	return k, body, version
}

func (p *Publisher) confirmed(ctx context.Context, m *Message, notBefore *time.Time) (uint64, error) {
	op := wire.OpPublish
	if notBefore != nil {
		op = wire.OpPublishDelayed
	}
	var sentVersion uint64
	spec := opSpec{
		op:       op,
		retry409: true,
		prepare: func() (*routeKey, wire.Encoder) {
			k, body, v := p.build(m, true, notBefore)
			sentVersion = v
			return k, body
		},
		afterRedirect: func(ctx context.Context, r *wire.Redirect) { p.afterFence(ctx, r, sentVersion) },
	}
	f, err := p.cl.roundTrip(ctx, spec)
	if err != nil {
		return 0, err
	}
	var ok wire.PublishOK
	if err := f.Decode(&ok); err != nil {
		p.cl.stats.protocolViolations.Add(1)
		return 0, protocolErrorf("malformed PUBLISH_OK: %v", err)
	}
	return ok.Offset, nil
}

// PublishConfirmed publishes and waits for PUBLISH_OK, returning the
// message's offset in its partition. It follows REDIRECTs and re-sends
// after 409 or 503, and a publish still queued when its connection died,
// within ctx (OperationTimeout when ctx has no deadline); a 504 or a
// connection lost with the publish written returns an error matching
// ErrOutcomeUnknown (the message may or may not be stored, and it is not
// re-sent). It is PublishAsync plus the wait: many goroutines may share a
// Publisher, and their publishes share the connection's writes.
//
// Reserved headers (docs/protocol.md#publish) are left for the broker to refuse (ERROR 400).
func (p *Publisher) PublishConfirmed(ctx context.Context, m Message) (uint64, error) {
	if p.cl.ctx.Err() != nil {
		return 0, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, &notWrittenError{err: err}
	}
	op := p.newOp(ctx, m, nil)
	op.wait = make(chan pubResult, 1) // per call: see pubOps
	if err := op.send(); err != nil {
		op.recycle()
		return 0, err
	}
	r := <-op.wait
	op.recycle()
	return r.off, r.err
}

// Publish publishes without confirmation; it returns once the frame is
// queued for writing (waiting while the write buffer is full). Nothing is
// reported afterwards: neither broker-side failures (docs/protocol.md#answers) nor the loss
// of a frame still queued when its connection dies (at most once). Reserved headers
// (docs/protocol.md#publish) are refused locally, since the broker's ERROR 400 would arrive
// uncorrelated and drop the connection.
func (p *Publisher) Publish(ctx context.Context, m Message) error {
	if err := checkHeaders(m.Headers); err != nil {
		return err
	}
	k, body, _ := p.build(&m, false, nil)
	return p.cl.sendFireAndForget(ctx, wire.OpPublish, k, body)
}

// PublishDelayed stores the message now and keeps it undeliverable until
// notBefore (docs/protocol.md#publish). With confirm it waits for PUBLISH_OK and returns the
// offset; without, it returns 0 once the frame is written. Delayed
// publishes carry no TTL, so m.TTL must be 0.
// Without confirm it returns once the frame is queued, as Publish does.
func (p *Publisher) PublishDelayed(ctx context.Context, m Message, notBefore time.Time, confirm bool) (uint64, error) {
	if m.TTL != 0 {
		return 0, errors.New("fibril client: PublishDelayed: delayed publishes carry no TTL")
	}
	if confirm {
		return p.confirmed(ctx, &m, &notBefore)
	}
	if err := checkHeaders(m.Headers); err != nil {
		return 0, err
	}
	k, body, _ := p.build(&m, false, &notBefore)
	return 0, p.cl.sendFireAndForget(ctx, wire.OpPublishDelayed, k, body)
}

// PublishAsync publishes with confirmation without waiting for it: it
// returns once the PUBLISH is queued for writing, and f is called exactly
// once later with the message's offset, or with the error that
// PublishConfirmed would have returned. The re-send rules are
// PublishConfirmed's (docs/protocol.md#answers): a REDIRECT, a 409 or a 503 is re-sent, and so
// is a publish still queued when its connection died (it was never
// written), all within ctx's deadline (OperationTimeout when ctx has
// none); a 504, or a connection lost after the frame was handed to the
// socket, gives an error matching ErrOutcomeUnknown and no re-send. If ctx
// ends before the confirm, f gets an error matching ErrOutcomeUnknown and
// the context's error (the frame may already be on its way).
//
// When PublishAsync returns an error (the client is closed, ctx ended, no
// connection could be had in time, or the broker refused to connect),
// nothing was sent and f is never called. PublishAsync blocks while no
// connection to the partition's owner is up (dialing) and while the
// connection's write buffer is full (Options.WriteBufferSize): that is
// the backpressure that bounds memory. The window of publishes in flight
// is the caller's to bound (a semaphore released by f, for example).
//
// m's Payload, Key, Headers and Partition must not be modified until f has
// been called: a re-send encodes them again.
//
// f runs on a goroutine of the client, one callback at a time for the
// whole Client, in the order the outcomes were known (not necessarily the
// publish order). It must not block for long, since it delays the other
// callbacks, and must not wait for another callback. It may call
// PublishAsync.
//
// Per call there is no goroutine and no timer: the confirm is matched on
// the connection's reader goroutine, and a context without deadline is
// bounded by the connections' periodic sweep.
func (p *Publisher) PublishAsync(ctx context.Context, m Message, f func(offset uint64, err error)) error {
	if f == nil {
		return errors.New("fibril client: PublishAsync: nil callback")
	}
	cl := p.cl
	if cl.ctx.Err() != nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return &notWrittenError{err: err}
	}
	op := p.newOp(ctx, m, f)
	cl.async.begin()
	if err := op.send(); err != nil {
		cl.async.cancel()
		op.recycle()
		return err
	}
	return nil
}

// pubOp is one confirmed publish (PublishAsync, PublishConfirmed) across
// its attempts. Its embedded pendingReq is registered with the connection
// of each attempt; the outcome goes to cb through the completer, or to
// wait for PublishConfirmed (cb nil).
type pubOp struct {
	pendingReq
	p        *Publisher
	ctx      context.Context
	deadline time.Time // OperationTimeout bound when ctx has no deadline
	m        Message
	cb       func(uint64, error)
	wait     chan pubResult // capacity 1, kept across reuses
	body     wire.Publish
	key      routeKey
	version  uint64 // partitioning version of the last attempt
	st       resendState
	keep     bool // given up while registered: its entry may still be referenced
}

type pubResult struct {
	off uint64
	err error
}

// pubOps recycles publish operations. A pooled op holds no channel: a
// channel belongs to the testing/synctest bubble (or to no bubble) it was
// made in, and using it from another is a fatal error, so an op from a
// test that ran in one bubble must not carry its channel into the next
// (core/sim runs a bubble per seed; applications test with synctest too).
var pubOps = sync.Pool{New: func() any {
	op := &pubOp{}
	op.h = op
	return op
}}

func (p *Publisher) newOp(ctx context.Context, m Message, cb func(uint64, error)) *pubOp {
	op := pubOps.Get().(*pubOp)
	op.p, op.ctx, op.m, op.cb = p, ctx, m, cb
	if _, ok := ctx.Deadline(); !ok {
		op.deadline = time.Now().Add(p.cl.opts.OperationTimeout)
	}
	return op
}

func (op *pubOp) recycle() {
	if op.keep {
		return
	}
	*op = pubOp{}
	op.h = op
	pubOps.Put(op)
}

// prepare chooses the partition and encodes nothing yet: the body is
// appended to the write buffer by the connection.
func (op *pubOp) prepare() {
	m := &op.m
	part, version := op.p.choose(m)
	op.key = routeKey{topic: op.p.topic, partition: part, group: op.p.group}
	op.version = version
	var key wire.Option[[]byte]
	if m.Key != nil {
		key = wire.Some(m.Key)
	}
	op.body = wire.Publish{
		Topic: op.p.topic, Group: op.p.group, Partition: part, RequireConfirm: true,
		ContentType: contentType(m.ContentType), Headers: headers(m.Headers),
		PartitionKey: key, PartitioningVersion: version, Payload: m.Payload,
	}
	if m.TTL > 0 {
		op.body.TTLMillis = wire.Some(uint64(max(1, m.TTL.Milliseconds())))
	}
}

// send queues one attempt (and re-sends when it cannot be queued),
// blocking while no connection is up. nil means queued: the outcome then
// comes through onReply, and op must not be touched any more here (it may
// already be completed and reused).
func (op *pubOp) send() error {
	cl := op.p.cl
	w := waitCtx{parent: op.ctx, deadline: op.deadline}
	defer w.release()
	for {
		if cl.ctx.Err() != nil {
			return ErrClosed
		}
		if err := w.err(); err != nil {
			return op.st.giveUp(&notWrittenError{err: err})
		}
		op.prepare()
		ep := cl.route(&op.key)
		conn, _ := ep.live()
		if conn == nil {
			var err error
			conn, _, err = ep.get(w.get())
			if err != nil {
				retry, err := cl.afterConnErr(&w, ep, &op.key, &op.st, err)
				if retry {
					continue
				}
				return err
			}
		}
		op.pendingReq.op = wire.OpPublish
		op.pendingReq.ctx = op.ctx
		op.pendingReq.hook = nil
		op.pendingReq.expire = 0
		if !op.deadline.IsZero() {
			op.pendingReq.expire = op.deadline.UnixNano()
		}
		err := conn.start(op.ctx, &op.pendingReq, &op.body)
		if err == nil {
			return nil
		}
		retry, err := cl.afterReply(&w, op.spec(), &op.key, &op.st, Frame{}, err)
		if !retry {
			return err
		}
	}
}

func (op *pubOp) spec() *opSpec {
	return &opSpec{
		op:            wire.OpPublish,
		retry409:      true,
		afterRedirect: func(ctx context.Context, r *wire.Redirect) { op.p.afterFence(ctx, r, op.version) },
	}
}

// onReply takes one attempt's outcome. It runs on the reader goroutine
// (or wherever the connection completes the request) and never blocks:
// confirms and final errors go to the completer; REDIRECT, 409, 503 and
// malformed answers are dealt with on a goroutine of their own (rare).
func (op *pubOp) onReply(f Frame, err error) {
	if op.abandoned {
		op.keep = true // its entry stays in the connection's pending map
	}
	switch {
	case err != nil && !isNotWritten(err):
		op.complete(0, err) // outcome unknown: never replayed
		return
	case err == nil && f.Op == wire.OpPublishOK:
		var ok wire.PublishOK
		if derr := ok.Decode(f.Body); derr != nil {
			op.p.cl.stats.protocolViolations.Add(1)
			op.complete(0, protocolErrorf("malformed PUBLISH_OK: %v", derr))
			return
		}
		op.complete(ok.Offset, nil)
		return
	case err == nil && !acceptsReply(wire.OpPublish, f.Op):
		op.complete(0, protocolErrorf("%v answered with %v (request id %d)", wire.OpPublish, f.Op, f.RequestID))
		return
	}
	f.Body = bytes.Clone(f.Body)
	go op.retry(f, err)
}

// retry applies the re-send rules to a REDIRECT, an ERROR or a
// never-written attempt, then sends again or completes.
func (op *pubOp) retry(f Frame, err error) {
	cl := op.p.cl
	w := waitCtx{parent: op.ctx, deadline: op.deadline}
	again, err := cl.afterReply(&w, op.spec(), &op.key, &op.st, f, err)
	w.release()
	if again {
		err = op.send()
		if err == nil {
			return
		}
	}
	if err == nil {
		err = protocolErrorf("%v answered with %v", wire.OpPublish, f.Op)
	}
	op.complete(0, err)
}

// complete hands the outcome to the completer, or to the waiting
// PublishConfirmed (exactly once per op).
func (op *pubOp) complete(off uint64, err error) {
	if op.cb == nil {
		op.wait <- pubResult{off, err} // the waiter recycles op
		return
	}
	cl, cb := op.p.cl, op.cb
	op.recycle()
	cl.async.push(cb, off, err)
}

// resendNeverWritten re-sends, in their original order, the asynchronous
// publishes that were still queued when their connection died: they never
// reached the broker (docs/protocol.md#answers). One backoff for the batch, then each is
// routed and queued again (waiting for a connection within its deadline).
func resendNeverWritten(ops []*pubOp, cause error) {
	cl := ops[0].p.cl
	sleepCtx(cl.ctx, cl.opts.backoff(0))
	for _, op := range ops {
		op.st.lastErr = &notWrittenError{err: cause}
		op.st.attempt++
		if err := op.send(); err != nil {
			op.complete(0, err)
		}
	}
}
