package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// SubscribeOptions configure Subscribe.
type SubscribeOptions struct {
	// Group is the queue namespace inside the topic ("" = default).
	Group string
	// Partitions to subscribe to. nil means every partition the topology
	// cache knows (read from the broker when the cache has no count for the
	// queue), or partition 0 when the count stays unknown (a standalone
	// broker, S-113). A queue subscription with nil Partitions follows a
	// repartition (S-126): it subscribes a grow's new partitions when the
	// topology cache learns the larger count, and a partition a shrink
	// retired leaves it quietly (see Subscription).
	Partitions []uint32
	// Prefetch is the maximum number of unsettled deliveries per partition
	// (docs/protocol.md#subscriptions). 0 means DefaultPrefetch.
	Prefetch uint32
	// AutoAck asks the broker to settle each delivery as it sends it.
	AutoAck bool
	// ConsumerGroup makes the subscription a member of the queue's
	// exclusive consumer group of that id ("" = competing consumers, S-87;
	// Fibril SDKs' exclusive() uses "default"): each partition delivers to
	// one member at a time. Subscribe every partition so that any of them
	// can be assigned to this client.
	ConsumerGroup string
	// ConsumerTarget is how many partitions this member would like (a
	// soft cap, S-93); 0 = no preference.
	ConsumerTarget uint32
	// OnAssignment, when set, hears every ASSIGNMENT_CHANGED for this
	// member (S-94), on a connection's reader goroutine: it must not
	// block. A notice is informational — the broker's gate is what keeps
	// a partition to one member. In a cluster every owner of the queue's
	// partitions sends the controller's plan (S-98): the same set with
	// the same Generation, so a notice with a lower Generation than one
	// already heard is stale.
	OnAssignment func(Assignment)
}

// Assignment is an ASSIGNMENT_CHANGED notice: the partitions of a queue
// one broker assigned to this member of its exclusive consumer group.
type Assignment struct {
	Topic, Group, ConsumerGroup string
	Generation                  uint64
	Assigned, Added, Revoked    []uint32
	Broker                      string // the address of the broker that sent it
}

// Subscription consumes one queue (topic, group) over one or more
// partitions, each with its own broker-side subscription (one SUBSCRIBE
// per partition). Each partition subscription is supervised: when the
// broker closes it for a non-terminal reason, when reconcile does not keep
// it, or when its connection is lost and not restored, it re-subscribes
// with backoff until the Subscription is closed. Terminal reasons end the
// partition with a *SubscriptionClosedError returned by Next. When a
// manual-ack partition subscribes again, the deliveries it still buffered
// from the subscription that ended are dropped: the broker delivers them
// again, and the new subscription starts with its whole prefetch.
//
// A queue subscription made without SubscribeOptions.Partitions follows
// the queue's partition count (S-126, docs/repartition.md). When the
// topology cache learns a larger count — from a TOPOLOGY_UPDATE push, a
// refresh after a REDIRECT or an owner move, or the periodic read every
// Options.TopologyRefresh — it subscribes the new partitions. A partition
// that a shrink retired (its subscription closed with owner_moved and the
// topology no longer lists it, or its re-subscribe answered 404 with the
// partition past the queue's count) ends quietly: Next and Err report
// nothing, Partitions no longer lists it, and the other partitions keep
// delivering. A subscription that named the partition in Partitions ends
// it with a *SubscriptionClosedError matching ErrPartitionRetired.
//
// Consume with Next or with C, not both.
type Subscription struct {
	cl       *Client
	topic    string
	group    wire.Option[string]
	opts     SubscribeOptions
	stream   *StreamOptions // a stream subscription (SubscribeStream); nil for a queue
	prefetch uint32
	ctx      context.Context
	cancel   context.CancelFunc
	notify   chan struct{}
	// follow: a queue subscription to every partition, which follows the
	// partition count; topo is signalled when the topology cache changed.
	follow bool
	topo   chan struct{}

	mu sync.Mutex
	// parts grows when a followed queue gains partitions; a retired part
	// stays until its buffer is empty (and the next grow drops it).
	parts  []*partSub
	rr     int
	errs   []error // terminal partition errors not yet returned by Next
	ended  int
	closed bool
	final  error

	cOnce sync.Once
	ch    chan *Delivery
}

// Subscribe opens a queue subscription. It returns once every partition
// answered SUBSCRIBE_OK (following REDIRECTs and re-sending after 409 or
// 503 within ctx); if any partition fails, the others are closed and the
// error is returned.
func (c *Client) Subscribe(ctx context.Context, topic string, opts SubscribeOptions) (*Subscription, error) {
	return c.subscribe(ctx, topic, opts, nil)
}

// subscribe opens a queue subscription, or a stream one when stream is set.
func (c *Client) subscribe(ctx context.Context, topic string, opts SubscribeOptions, stream *StreamOptions) (*Subscription, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	group := optStr(opts.Group)
	parts := opts.Partitions
	if parts == nil {
		parts = []uint32{0}
		n, _, known := c.topo.count(topic, group)
		if !known { // a cold cache: the queue may be newer than the last push
			c.refreshTopology(ctx, topic, group)
			n, _, known = c.topo.count(topic, group)
		}
		if known {
			parts = make([]uint32, n)
			for i := range parts {
				parts[i] = uint32(i)
			}
		}
	}
	if len(parts) == 0 {
		return nil, errors.New("fibril client: Subscribe: empty partition list")
	}
	seen := make(map[uint32]bool, len(parts))
	for _, p := range parts {
		if seen[p] {
			return nil, fmt.Errorf("fibril client: Subscribe: partition %d listed twice", p)
		}
		seen[p] = true
	}
	if c.partsTaken(topic, group, stream != nil, seen) {
		// A connection holds one subscription per partition: the broker
		// answers a second SUBSCRIBE 409 (which this client would retry
		// until the deadline, as a 409 can also mean "owner unknown"),
		// and a second SUBSCRIBE_STREAM replaces the first (S-72), which
		// would then silently get nothing more.
		return nil, fmt.Errorf("fibril client: this Client already subscribes to a partition of %q; close that subscription or use another Client", topic)
	}
	prefetch := opts.Prefetch
	if prefetch == 0 {
		prefetch = DefaultPrefetch
	}
	s := &Subscription{
		cl: c, topic: topic, group: group, opts: opts, stream: stream, prefetch: prefetch,
		notify: make(chan struct{}, 1),
		follow: opts.Partitions == nil && stream == nil, topo: make(chan struct{}, 1),
	}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	all := make([]*partSub, 0, len(parts))
	for _, p := range parts {
		all = append(all, newPartSub(s, p))
	}
	s.parts = all
	c.trackSub(s, true) // before the first SUBSCRIBE: its ASSIGNMENT_CHANGED may follow at once
	kept := make([]*partSub, 0, len(all))
	for _, ps := range all {
		if s.follow && c.topo.retired(ps.key(), false) {
			continue // a stale count: a shrink retired it (and the refresh below said so)
		}
		err := ps.subscribeOnce(ctx)
		if err != nil && s.follow && isNotFound(err) && s.retiredAfter404(ctx, ps) {
			continue
		}
		if err != nil {
			s.Close()
			return nil, err
		}
		kept = append(kept, ps)
	}
	s.mu.Lock()
	s.parts = kept
	s.mu.Unlock()
	for _, ps := range kept {
		go ps.supervise()
	}
	if s.follow {
		go s.followCount()
	}
	return s, nil
}

// retiredAfter404 reports whether a partition whose SUBSCRIBE answered
// 404 was retired by a shrink: the queue's count, refreshed if the cache
// does not say so already, is at most the partition.
func (s *Subscription) retiredAfter404(ctx context.Context, ps *partSub) bool {
	if s.cl.topo.retired(ps.key(), true) {
		return true
	}
	s.cl.refreshTopology(ctx, s.topic, s.group)
	return s.cl.topo.retired(ps.key(), true)
}

func isNotFound(err error) bool {
	var be *Error
	return errors.As(err, &be) && be.Code == wire.CodeNotFound
}

// followCount keeps a followed queue's partitions in step with its count
// in the topology cache (S-126): it looks each time the cache changed,
// and reads the queue's topology every Options.TopologyRefresh.
func (s *Subscription) followCount() {
	var tick <-chan time.Time
	if d := s.cl.opts.TopologyRefresh; d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		tick = t.C
	}
	for {
		s.grow()
		select {
		case <-s.ctx.Done():
			return
		case <-s.topo:
		case <-tick:
			ctx, cancel := context.WithTimeout(s.ctx, s.cl.opts.OperationTimeout)
			s.cl.refreshTopology(ctx, s.topic, s.group) // signals s.topo when applied
			cancel()
		}
	}
}

// grow subscribes the partitions below the queue's cached count that no
// part covers (a grow's new ones, or retired ones that came back), and
// drops retired parts whose buffer is empty.
func (s *Subscription) grow() {
	n, _, known := s.cl.topo.count(s.topic, s.group)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	have := make(map[uint32]bool, len(s.parts))
	parts := make([]*partSub, 0, max(len(s.parts), int(n)))
	for _, ps := range s.parts {
		if ps.retired {
			if ps.buffered() == 0 {
				s.ended--
				continue
			}
		} else {
			have[ps.partition] = true
		}
		parts = append(parts, ps)
	}
	var added []*partSub
	for p := uint32(0); known && p < n; p++ {
		if !have[p] {
			ps := newPartSub(s, p)
			parts = append(parts, ps)
			added = append(added, ps)
		}
	}
	if len(parts) != len(s.parts) || len(added) > 0 {
		s.parts = parts
	}
	s.mu.Unlock()
	for _, ps := range added {
		s.cl.log.Info("subscribing a new partition", "topic", s.topic, "partition", ps.partition, "partitions", n)
		go ps.start()
	}
}

// topologyChanged tells the subscriptions that follow a queue's count
// that the topology cache changed.
func (c *Client) topologyChanged() {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for s := range c.subs {
		if s.follow {
			select {
			case s.topo <- struct{}{}:
			default:
			}
		}
	}
}

// Topic returns the subscribed topic.
func (s *Subscription) Topic() string { return s.topic }

// Partitions returns the subscribed partitions; a subscription that
// follows its queue's count lists the new ones and leaves out the
// retired ones.
func (s *Subscription) Partitions() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint32, 0, len(s.parts))
	for _, ps := range s.parts {
		if !ps.retired {
			out = append(out, ps.partition)
		}
	}
	return out
}

func (s *Subscription) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the next delivery, taking the partitions in turn. When a
// partition ended for good its *SubscriptionClosedError is returned once
// (after its buffered deliveries); when every partition has ended Next
// keeps returning the first such error, and ErrClosed after Close.
func (s *Subscription) Next(ctx context.Context) (*Delivery, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		n := len(s.parts)
		for i := 0; i < n; i++ {
			ps := s.parts[(s.rr+i)%n]
			if d := ps.pop(); d != nil {
				s.rr = (s.rr + i + 1) % n
				s.mu.Unlock()
				return d, nil
			}
		}
		if len(s.errs) > 0 {
			err := s.errs[0]
			s.errs = s.errs[1:]
			s.mu.Unlock()
			return nil, err
		}
		if s.ended == n {
			err := s.final
			s.mu.Unlock()
			if err == nil {
				err = ErrClosed
			}
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// C returns a channel fed by Next. It is closed when Next fails for good
// (every partition ended, or Close); Err tells why. A terminal error of a
// single partition is logged and does not close the channel while other
// partitions are alive.
func (s *Subscription) C() <-chan *Delivery {
	s.cOnce.Do(func() {
		s.ch = make(chan *Delivery)
		go func() {
			defer close(s.ch)
			for {
				d, err := s.Next(s.ctx)
				if err != nil {
					if s.allEnded() || s.ctx.Err() != nil {
						return
					}
					s.cl.log.Warn("partition subscription ended", "topic", s.topic, "err", err)
					continue
				}
				select {
				case s.ch <- d:
				case <-s.ctx.Done():
					return
				}
			}
		}()
	})
	return s.ch
}

func (s *Subscription) allEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended == len(s.parts)
}

// Err returns why the subscription stopped: nil while any partition is
// alive, ErrClosed after Close, else the first terminal error.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.ended < len(s.parts):
		return nil
	}
	return s.final
}

// Close stops consuming. v1 has no unsubscribe op (docs/protocol.md#going-away): the broker-side
// subscriptions end with the session or at the next reconcile, and until
// then deliveries that still arrive for them are dropped unsettled: their
// leases expire (delivery.inflight_ttl_ms, S-50) and they are delivered
// again, while the session lives possibly to the same broker-side
// subscription. Closing the Client ends the session, which hands them to
// other consumers at once (S-54).
func (s *Subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	parts := s.parts
	s.mu.Unlock()
	s.cancel()
	for _, ps := range parts {
		ps.end(nil)
		ps.mu.Lock()
		ps.dropBufferedLocked() // Next hands nothing out after Close
		ps.mu.Unlock()
	}
	s.cl.trackSub(s, false)
	s.signal()
	return nil
}

// partEnded counts an ended part; retired marks one a shrink retired
// (err is then nil: it ends quietly).
func (s *Subscription) partEnded(ps *partSub, err error, retired bool) {
	s.mu.Lock()
	s.ended++
	ps.retired = retired
	if err != nil && !s.closed {
		s.errs = append(s.errs, err)
		if s.final == nil {
			s.final = err
		}
	}
	s.mu.Unlock()
	s.signal()
}

// dropBufferedLocked drops the buffered deliveries (ps.mu held). They
// were never handed out, so they will never be settled: their
// connections stop counting them.
func (ps *partSub) dropBufferedLocked() {
	for _, d := range ps.buf {
		d.unhold()
	}
	ps.buf = nil
}

// partSub is the subscription of one partition.
type partSub struct {
	sub       *Subscription
	partition uint32
	events    chan detachNote
	endCh     chan struct{}
	space     chan struct{} // signalled when a buffered delivery is taken

	mu       sync.Mutex
	ep       *endpoint // where it is attached (nil when detached)
	subID    uint64
	attached bool
	ended    bool
	buf      []*Delivery
	bufCap   int
	next     uint64 // streams: the offset after the last record received
	seen     bool   // streams: a record was received (next is set)

	retired bool // guarded by sub.mu: ended quietly, retired by a shrink
}

func newPartSub(s *Subscription, p uint32) *partSub {
	return &partSub{
		sub: s, partition: p,
		events: make(chan detachNote, 4),
		endCh:  make(chan struct{}),
		space:  make(chan struct{}, 1),
	}
}

func (ps *partSub) key() routeKey {
	return routeKey{topic: ps.sub.topic, partition: ps.partition, group: ps.sub.group}
}

// subscribeOnce sends one SUBSCRIBE (with the operation's redirect and
// re-send rules) and attaches the partition on SUBSCRIBE_OK.
func (ps *partSub) subscribeOnce(ctx context.Context) error {
	s := ps.sub
	k := ps.key()
	op := wire.OpSubscribe
	var body wire.Encoder = &wire.Subscribe{Topic: s.topic, Partition: ps.partition, Group: s.group, Prefetch: s.prefetch, AutoAck: s.opts.AutoAck,
		ConsumerGroup: optStr(s.opts.ConsumerGroup), ConsumerTarget: optU32(s.opts.ConsumerTarget), MemberID: s.cl.memberID()}
	if s.stream != nil {
		op, body = wire.OpSubscribeStream, ps.streamBody()
	}
	// attachErr is written by the hook on the reader goroutine before the
	// reply is handed to roundTrip, so reading it afterwards is ordered.
	var attachErr error
	spec := opSpec{
		op:       op,
		retry409: true,
		prepare:  func() (*routeKey, wire.Encoder) { return &k, body },
		onConn:   func(ep *endpoint) { ep.markHadSubs() },
		hook: func(ep *endpoint, conn *Conn, f Frame) {
			if f.Op == wire.OpSubscribeOK {
				attachErr = ps.onSubscribeOK(ep, conn, f)
			}
		},
	}
	if _, err := s.cl.roundTrip(ctx, spec); err != nil {
		return err
	}
	return attachErr
}

// onSubscribeOK runs on the reader goroutine: it checks the echo (wire.SubscribeOK)
// and registers the sub_id before the next frame (possibly its first
// DELIVER) is read.
func (ps *partSub) onSubscribeOK(ep *endpoint, conn *Conn, f Frame) error {
	s := ps.sub
	var ok wire.SubscribeOK
	if err := f.Decode(&ok); err != nil {
		s.cl.stats.protocolViolations.Add(1)
		return protocolErrorf("malformed SUBSCRIBE_OK: %v", err)
	}
	exclusive := s.opts.ConsumerGroup != "" && s.stream == nil
	if ok.Topic != s.topic || ok.Partition != ps.partition || ok.Group != s.group ||
		ok.Prefetch != s.prefetch || ok.MemberID.Present != exclusive {
		s.cl.stats.protocolViolations.Add(1)
		return protocolErrorf("SUBSCRIBE_OK echo (%q, %d, %v, prefetch %d, member %v) does not match SUBSCRIBE (%q, %d, %v, prefetch %d)",
			ok.Topic, ok.Partition, ok.Group, ok.Prefetch, ok.MemberID.Present, s.topic, ps.partition, s.group, s.prefetch)
	}
	if id, ok := ok.MemberID.Get(); ok {
		s.cl.setMemberID(id)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.conn != conn {
		return &notWrittenError{err: ErrConnectionLost}
	}
	ep.hadSubs = true
	ep.byID[ok.SubID] = ps
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.ended {
		return nil // a late answer for a closed subscription: its deliveries are dropped
	}
	ps.subID = ok.SubID
	ps.ep = ep
	ps.attached = true
	ps.bufCap = max(1, int(ok.Prefetch)) // the Go SDK buffers exactly prefetch (minimum 1)
	if s.credited() {
		// Anything still buffered came from a broker-side subscription that
		// ended (this is a re-subscribe). Those deliveries come again (the
		// broker released their leases, or does when the old session ends;
		// a named stream restarts at its cursor, at or before them), and
		// this subscription gets a whole prefetch: kept, they would count
		// against it, its first DELIVERs counted as violations and queued
		// behind deliveries whose tags are void. Dropped as purge drops a
		// non-resumed session's. Auto-ack deliveries and an unnamed
		// stream's records do not come again: they stay.
		ps.dropBufferedLocked()
	}
	ep.subs[ps] = struct{}{}
	return nil
}

// detached is called when the broker-side subscription is gone; the
// supervisor decides what to do.
func (ps *partSub) detached(n detachNote) {
	ps.mu.Lock()
	if !ps.attached || ps.ended {
		ps.mu.Unlock()
		return
	}
	ps.attached = false
	ps.ep = nil
	ps.mu.Unlock()
	n.ps = ps
	select {
	case ps.events <- n:
	default:
	}
}

func (ps *partSub) isAttached() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.attached
}

// supervise re-subscribes after every non-terminal detach, with backoff,
// for as long as the Subscription lives.
func (ps *partSub) supervise() {
	s := ps.sub
	for {
		select {
		case n := <-ps.events:
			if n.terminal {
				ps.end(&SubscriptionClosedError{Topic: s.topic, Partition: ps.partition, Reason: n.code, Message: n.msg})
				return
			}
			s.cl.log.Info("re-subscribing", "topic", s.topic, "partition", ps.partition, "reason", n.code, "message", n.msg)
			if !ps.resubscribe(n) {
				return
			}
		case <-s.ctx.Done():
			ps.end(nil)
			return
		}
	}
}

func (ps *partSub) resubscribe(n detachNote) bool {
	s := ps.sub
	cl := s.cl
	for attempt := 0; ; attempt++ {
		if !sleepCtx(s.ctx, cl.opts.backoff(attempt)) {
			ps.end(nil)
			return false
		}
		if ps.isAttached() {
			return true
		}
		ctx, cancel := context.WithTimeout(s.ctx, cl.opts.OperationTimeout)
		if n.refresh || attempt > 0 {
			cl.refreshTopology(ctx, s.topic, s.group)
			if s.stream == nil && cl.topo.retired(ps.key(), false) {
				cancel()
				ps.retire()
				return false
			}
		}
		err := ps.subscribeOnce(ctx)
		if err != nil && s.stream == nil && isNotFound(err) && !ps.isAttached() && s.retiredAfter404(ctx, ps) {
			cancel()
			ps.retire()
			return false
		}
		cancel()
		if err == nil || ps.isAttached() {
			return true
		}
		if s.ctx.Err() != nil {
			ps.end(nil)
			return false
		}
		if !resubscribeRetryable(err) {
			sc := &SubscriptionClosedError{Topic: s.topic, Partition: ps.partition, Err: err}
			var be *Error
			if errors.As(err, &be) && be.Code == wire.CodeNotFound {
				// The topic was deleted: its SUBSCRIPTION_CLOSED may not have
				// reached this client before the topology dropped the owner's
				// connection; the refusal tells the same.
				sc.Reason = wire.ReasonTopicDeleted
			}
			ps.end(sc)
			return false
		}
		cl.log.Debug("re-subscribe failed", "topic", s.topic, "partition", ps.partition, "err", err)
	}
}

// resubscribeRetryable: a SUBSCRIBE whose outcome is unknown is safe to
// repeat (a dangling broker-side subscription is dropped by reconcile or
// answered 409 and then found attached); refusals and protocol violations
// are not.
func resubscribeRetryable(err error) bool {
	if errors.Is(err, ErrOutcomeUnknown) || isNotWritten(err) {
		return true
	}
	if fatalDialError(err) {
		return false
	}
	return Retryable(err)
}

// start subscribes a partition the Subscription gained (grow), then
// supervises it.
func (ps *partSub) start() {
	if ps.resubscribe(detachNote{msg: "new partition"}) {
		ps.supervise()
	}
}

// retire ends a partition that a shrink retired (S-126): quietly in a
// subscription that follows the queue's count, else with an error that
// matches ErrPartitionRetired.
func (ps *partSub) retire() {
	s := ps.sub
	n, _, _ := s.cl.topo.count(s.topic, s.group)
	if s.follow {
		s.cl.log.Info("partition retired by a repartition; its subscription ends", "topic", s.topic, "partition", ps.partition, "partitions", n)
		ps.endAs(nil, true)
		return
	}
	ps.end(&SubscriptionClosedError{Topic: s.topic, Partition: ps.partition, Reason: wire.ReasonOwnerMoved,
		Message: fmt.Sprintf("the queue has %d partitions now", n), Err: ErrPartitionRetired})
}

// end finishes the partition subscription (err nil: closed locally). Its
// sub_id stays routed so that deliveries still arriving are dropped
// quietly rather than counted as unknown.
func (ps *partSub) end(err error) { ps.endAs(err, false) }

func (ps *partSub) endAs(err error, retired bool) {
	ps.mu.Lock()
	if ps.ended {
		ps.mu.Unlock()
		return
	}
	ps.ended = true
	ps.attached = false
	ep := ps.ep
	ps.ep = nil
	close(ps.endCh)
	ps.mu.Unlock()
	if ep != nil {
		ep.mu.Lock()
		delete(ep.subs, ps)
		ep.mu.Unlock()
	}
	ps.sub.partEnded(ps, err, retired)
}

// deliver buffers one DELIVER (reader goroutine). The buffer holds at most
// prefetch deliveries: for a manual-ack subscription a DELIVER beyond that
// means the broker violated prefetch, which is counted (and the delivery
// still buffered); for an auto-ack subscription the reader waits for room,
// which is the TCP backpressure docs/protocol.md#subscriptions relies on.
func (ps *partSub) deliver(ep *endpoint, conn *Conn, sess *session, frameID uint64, d *wire.Deliver) {
	s := ps.sub
	cl := s.cl
	if d.Topic != s.topic || d.Partition != ps.partition || d.Group != s.group {
		cl.stats.protocolViolations.Add(1)
		cl.log.Warn("DELIVER key does not match its subscription", "sub_id", d.SubID,
			"topic", d.Topic, "partition", d.Partition, "want_topic", s.topic, "want_partition", ps.partition)
	}
	dl := newDelivery(ep, sess, frameID, d, s.opts.AutoAck)
	ps.mu.Lock()
	if ps.ended {
		ps.mu.Unlock()
		cl.stats.droppedDeliveries.Add(1)
		return
	}
	if s.stream != nil && d.Offset+1 > ps.next {
		ps.next, ps.seen = d.Offset+1, true
	}
	if len(ps.buf) >= ps.bufCap {
		if !s.credited() {
			unpark := conn.parkReader()
			for len(ps.buf) >= ps.bufCap && !ps.ended {
				ps.mu.Unlock()
				select {
				case <-ps.space:
				case <-ps.endCh:
				case <-conn.Done():
				}
				ps.mu.Lock()
				if conn.closed() {
					break
				}
			}
			unpark()
			if ps.ended {
				ps.mu.Unlock()
				cl.stats.droppedDeliveries.Add(1)
				return
			}
		} else {
			cl.stats.prefetchViolations.Add(1)
			cl.log.Warn("prefetch violated: DELIVER with a full buffer", "topic", s.topic,
				"partition", ps.partition, "prefetch", ps.bufCap, "buffered", len(ps.buf))
		}
	}
	dl.hold(conn)
	ps.buf = append(ps.buf, dl)
	ps.mu.Unlock()
	s.signal()
}

// credited reports whether the broker bounds the subscription by prefetch
// (a manual-ack queue subscription, or a named stream one without
// auto-ack); the others rely on the connection's backpressure.
func (s *Subscription) credited() bool { return !s.opts.AutoAck && s.streamCredit() }

// buffered is the number of deliveries waiting for Next.
func (ps *partSub) buffered() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.buf)
}

func (ps *partSub) pop() *Delivery {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.buf) == 0 {
		return nil
	}
	d := ps.buf[0]
	ps.buf[0] = nil
	ps.buf = ps.buf[1:]
	select {
	case ps.space <- struct{}{}:
	default:
	}
	return d
}

// purge drops buffered deliveries of a session that was not resumed: their
// tags are void and the broker redelivers them.
//
// An unnamed stream subscription continues after the last record it
// received; what is dropped here was not handed out, so it continues at
// the first dropped record instead (the buffer is in offset order).
func (ps *partSub) purge() {
	ps.mu.Lock()
	if ps.sub.stream != nil && len(ps.buf) > 0 {
		ps.next = ps.buf[0].Offset
	}
	ps.dropBufferedLocked()
	ps.mu.Unlock()
	select {
	case ps.space <- struct{}{}:
	default:
	}
}

func (ep *endpoint) markHadSubs() {
	ep.mu.Lock()
	ep.hadSubs = true
	ep.mu.Unlock()
}

// partsTaken reports whether a live subscription of this Client, of the
// same kind (queue or stream), reads one of parts of topic (and group):
// its connection carries at most one subscription per partition.
func (c *Client) partsTaken(topic string, group wire.Option[string], stream bool, parts map[uint32]bool) bool {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for s := range c.subs {
		if (s.stream != nil) != stream || s.topic != topic || s.group != group {
			continue
		}
		s.mu.Lock()
		taken := slices.ContainsFunc(s.parts, func(ps *partSub) bool { return !ps.retired && parts[ps.partition] })
		s.mu.Unlock()
		if taken {
			return true
		}
	}
	return false
}
