package session

import (
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// subscription is one queue or stream subscription of a session; it is
// the engine's Consumer for it.
type subscription struct {
	sess   *Session
	id     uint64
	key    subKey
	req    wire.Subscribe // as the client asked (SUBSCRIBE_OK echo, reconcile view); queues only
	stream bool           // a SUBSCRIBE_STREAM: not reconciled, not kept through a reconnect (S-83)
	q      engineSub
	member *cohortSub // an exclusive consumer group member's (S-87); nil otherwise

	// Guarded by sess.mu.
	announced bool              // SUBSCRIBE_OK is queued; deliveries may follow it
	closed    bool              // ended; queued deliveries are dropped
	throttled bool              // paused by Deliver's answer until the queue drains
	early     []*queue.Delivery // deliveries that arrived before SUBSCRIBE_OK was queued
}

// engineSub is what the session asks of the engine's side of a
// subscription: *queue.Subscription for queues, *queue.StreamSubscription
// for streams (where Nack is ignored, S-78, and an Ack commits a durable
// cursor, S-75).
type engineSub interface {
	Ack(tags ...uint64)
	Nack(tags []uint64, requeue bool, notBefore wire.Option[uint64])
	Pause()
	Resume()
	Close()
}

// Deliver implements queue.Consumer. It runs with engine locks held, so it
// only queues the delivery and wakes the writer. When the session's queue
// of deliveries is past its bound (a client reading slowly, most often
// with auto-ack, which has no prefetch credit) it asks the engine to pause
// the subscription; the writer resumes it once the queue has drained.
func (sub *subscription) Deliver(d *queue.Delivery) bool {
	s := sub.sess
	s.mu.Lock()
	if sub.closed {
		s.mu.Unlock()
		return true
	}
	if !sub.announced {
		sub.early = append(sub.early, d)
	} else {
		s.pushes = append(s.pushes, push{sub: sub, delivery: d})
	}
	s.pushBytes += len(d.Payload)
	more := len(s.pushes)+len(sub.early) < pushHighCount && s.pushBytes < pushHighBytes
	if !more && !sub.throttled {
		sub.throttled = true
		s.throttled = append(s.throttled, sub)
	}
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.kick()
	}
	return more
}

// Bounds of a session's queue of deliveries not yet written: past either,
// subscriptions that deliver more are paused until the writer drains it.
const (
	pushHighCount = 4096
	pushHighBytes = 16 << 20
)

// unthrottle resumes the subscriptions paused because the delivery queue
// was full, once c (the connection the session follows) has written it.
// Called by c's writer.
func (s *Session) unthrottle(c *Conn) {
	s.mu.Lock()
	none := len(s.throttled) == 0
	s.mu.Unlock()
	if none {
		return
	}
	s.transition.Lock()
	defer s.transition.Unlock()
	s.mu.Lock()
	if s.conn != c || s.dormant || len(s.pushes) >= pushHighCount/2 {
		s.mu.Unlock()
		return // dormant subscriptions are resumed by attach
	}
	subs := s.throttled
	s.throttled = nil
	for _, sub := range subs {
		sub.throttled = false
	}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.q.Resume()
	}
}

// view is the subscription as RECONCILE_RESULT shows it (wire.ReconcileSub).
func (sub *subscription) view() wire.ReconcileSub {
	return wire.ReconcileSub{
		SubID:          sub.id,
		Topic:          sub.req.Topic,
		Partition:      sub.req.Partition,
		Group:          sub.req.Group,
		AutoAck:        sub.req.AutoAck,
		Prefetch:       sub.req.Prefetch,
		ConsumerGroup:  sub.req.ConsumerGroup,
		ConsumerTarget: sub.req.ConsumerTarget,
		MemberID:       sub.req.MemberID,
	}
}

func keyOf(topic string, group wire.Option[string], partition uint32) subKey {
	return subKey{topic: topic, group: group, partition: partition}
}

// subscribe registers a queue subscription on the engine. The caller
// queues SUBSCRIBE_OK and then calls announce. Errors wrap core sentinels.
func (s *Session) subscribe(req wire.Subscribe) (*subscription, error) {
	s.transition.Lock()
	defer s.transition.Unlock()
	return s.subscribeLocked(req)
}

// subscribeLocked is subscribe for a caller that holds s.transition.
func (s *Session) subscribeLocked(req wire.Subscribe) (*subscription, error) {
	exclusive := req.ConsumerGroup.Present
	if exclusive {
		id, err := s.memberID(req.MemberID)
		if err != nil {
			return nil, err
		}
		req.MemberID = wire.Some(id) // SUBSCRIBE_OK and reconcile show the effective id (S-89)
	}
	qs := s.srv.opts.Queues
	if kind, ok := qs.Kind(req.Topic); ok && kind == queue.KindStream {
		// S-22: a queue SUBSCRIBE on a stream topic.
		return nil, core.Errorf(core.ErrBadRequest, "topic %q is a stream; subscribe to it with SUBSCRIBE_STREAM", req.Topic)
	}
	part, err := qs.Partition(queue.Key{Topic: req.Topic, Group: req.Group}, req.Partition)
	if err != nil {
		return nil, err
	}
	sub, dormant, err := s.reserve(&subscription{key: keyOf(req.Topic, req.Group, req.Partition), req: req},
		queue.Key{Topic: req.Topic, Group: req.Group}.String())
	if err != nil {
		return nil, err
	}
	q, err := part.Subscribe(sub, queue.SubscribeOptions{Prefetch: req.Prefetch, AutoAck: req.AutoAck, Standby: exclusive})
	if err != nil {
		s.unreserve(sub)
		return nil, err
	}
	sub.q = q
	if exclusive {
		cs, err := s.srv.cohorts.join(s, req, q)
		if err != nil {
			q.Close()
			s.unreserve(sub)
			return nil, err
		}
		sub.q, sub.member = cs, cs
	}
	if dormant {
		q.Pause()
	}
	s.srv.opts.Metrics.SubscriptionsOpen.Inc()
	return sub, nil
}

// reserve gives sub (its key and request set) the session and the next
// sub id and registers it under its key while the engine subscribes (a
// caller holding s.transition); dormant reports that no connection
// follows the session. A queue key already taken is 409 (S-44); a stream
// subscription of the key is replaced (S-72: its deliveries stop, and no
// SUBSCRIPTION_CLOSED is sent, the client asked for it). name is the
// channel as the 409 names it.
func (s *Session) reserve(sub *subscription, name string) (_ *subscription, dormant bool, _ error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, false, core.Errorf(core.ErrUnavailable, "session ended")
	}
	old := s.subs[sub.key]
	if old != nil && !(old.stream && sub.stream) {
		s.mu.Unlock()
		return nil, false, core.Errorf(core.ErrConflict, "already subscribed to %s partition %d on this connection", name, sub.key.partition)
	}
	if s.nextSubID >= maxSubID {
		s.mu.Unlock()
		return nil, false, core.Errorf(core.ErrUnavailable, "subscription ids exhausted for this session; reconnect")
	}
	var replaced []*subscription
	if old != nil {
		old.closed = true
		replaced = append(replaced, old)
	}
	sub.sess, sub.id = s, s.nextSubID
	s.nextSubID++
	s.subs[sub.key] = sub
	dormant = s.conn == nil
	s.mu.Unlock()
	s.closeDropped(replaced)
	return sub, dormant, nil
}

// unreserve forgets a reserved subscription the engine refused.
func (s *Session) unreserve(sub *subscription) {
	s.mu.Lock()
	if s.subs[sub.key] == sub {
		delete(s.subs, sub.key)
	}
	s.mu.Unlock()
}

// announce marks SUBSCRIBE_OK as queued: deliveries that arrived before it
// move to the push queue behind it.
func (s *Session) announce(sub *subscription) {
	s.mu.Lock()
	sub.announced = true
	if !sub.closed {
		for _, d := range sub.early {
			s.pushes = append(s.pushes, push{sub: sub, delivery: d})
		}
	}
	sub.early = nil
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.kick()
	}
	if sub.member != nil {
		s.srv.cohorts.rebalance(sub.member) // its ASSIGNMENT_CHANGED follows its SUBSCRIBE_OK (S-94)
	}
}

// findSub returns the subscription for a settle's key (docs/protocol.md#subscriptions: ACK and
// NACK find it by (topic, partition, group), not by sub_id).
func (s *Session) findSub(key subKey) *subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs[key]
}

// unsubscribeLocked ends subscriptions the client no longer has (reconcile):
// their unsettled deliveries return to Ready at once (S-54). Caller holds
// s.transition.
func (s *Session) unsubscribeLocked(subs []*subscription) {
	s.mu.Lock()
	for _, sub := range subs {
		sub.closed = true
		if s.subs[sub.key] == sub {
			delete(s.subs, sub.key)
		}
	}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.q.Close()
	}
	s.srv.opts.Metrics.SubscriptionsOpen.Sub(float64(len(subs)))
}

// CloseMoved ends every local subscription on a partition that moved
// reports as no longer this broker's (its ownership went to another
// broker while this one lives: a drain's handoff): the client gets
// SUBSCRIPTION_CLOSED with reason owner_moved and subscribes again where
// the topology now says, and the subscription's unsettled deliveries are
// released here (the new owner redelivers them). It returns how many it
// ended.
func (s *Server) CloseMoved(moved func(topic, group string, partition uint32) bool) int {
	return s.CloseSubscriptions(moved, wire.ReasonOwnerMoved, "the partition moved to another broker; subscribe again")
}

// CloseSubscriptions ends every local subscription that match selects
// and tells its client with SUBSCRIPTION_CLOSED(reason, message); it
// returns how many it ended. A deleted queue's subscriptions end with
// topic_deleted (docs/admin.md#delete).
func (s *Server) CloseSubscriptions(match func(topic, group string, partition uint32) bool, reason wire.Reason, message string) int {
	n := 0
	for _, sess := range s.sessions.all() {
		n += sess.closeMatching(match, reason, message)
	}
	return n
}

func (s *Session) closeMatching(moved func(topic, group string, partition uint32) bool, reason wire.Reason, message string) int {
	s.transition.Lock()
	s.mu.Lock()
	var gone []*subscription
	for _, sub := range s.subs {
		if moved(sub.key.topic, sub.key.group.Value, sub.key.partition) {
			gone = append(gone, sub)
		}
	}
	s.mu.Unlock()
	if len(gone) > 0 {
		s.unsubscribeLocked(gone)
	}
	s.transition.Unlock()
	for _, sub := range gone {
		s.notify(wire.OpSubscriptionClosed, &wire.SubscriptionClosed{SubID: sub.id, Code: reason, Message: message})
	}
	if len(gone) > 0 {
		s.saveSkeleton()
	}
	return len(gone)
}

// saveSkeleton persists the session's identity and subscriptions (S-106).
// It holds transition so that it cannot write a skeleton after end has
// deleted it.
func (s *Session) saveSkeleton() {
	if s.srv.skeletons == nil {
		return
	}
	s.transition.Lock()
	defer s.transition.Unlock()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	subs := make([]skeletonSub, 0, len(s.subs))
	for _, sub := range s.subs {
		if sub.stream {
			continue // re-subscribed by the client (S-83)
		}
		sk := skeletonSub{Topic: sub.req.Topic, Partition: sub.req.Partition, Prefetch: sub.req.Prefetch, AutoAck: sub.req.AutoAck}
		if g, ok := sub.req.Group.Get(); ok {
			sk.Group = &g
		}
		subs = append(subs, sk)
	}
	s.skeleton = true
	s.mu.Unlock()
	if err := s.srv.skeletons.save(s.id, s.token, subs); err != nil {
		s.log.Warn("cannot persist session skeleton", "err", err)
	}
}

// handleSubscribe answers SUBSCRIBE. Failures use ERROR (op 255), which all
// five SDKs correlate to the pending subscribe (docs/protocol.md#answers, docs/protocol.md#deviations item 9).
func (c *Conn) handleSubscribe(id uint64, body []byte) {
	var req wire.Subscribe
	if err := req.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	if err := c.authorize(ActionConsume, req.Topic); err != nil {
		c.replyError(id, wire.CodeForbidden, err.Error())
		return
	}
	if rt := c.route(req.Topic, req.Group, req.Partition, false, 0); !rt.Serve {
		if rt.Forward != "" && c.srv.opts.Upstreams != nil {
			c.relay.Subscribe(id, body, req, rt.Forward)
			return
		}
		if rt.Redirect != nil {
			c.reply(wire.OpRedirect, id, rt.Redirect)
		} else {
			c.replyError(id, core.Code(rt.Err), rt.Err.Error()) // docs/protocol.md#answers: ERROR, not SUBSCRIBE_ERR
		}
		return
	}
	sub, err := c.sess.subscribe(req)
	if err != nil {
		c.replyError(id, core.Code(err), err.Error())
		return
	}
	c.reply(wire.OpSubscribeOK, id, &wire.SubscribeOK{
		SubID:          sub.id,
		Topic:          req.Topic,
		Partition:      req.Partition,
		Group:          req.Group,
		Prefetch:       req.Prefetch, // echoed unclamped (wire.SubscribeOK)
		ConsumerGroup:  req.ConsumerGroup,
		ConsumerTarget: req.ConsumerTarget,
		MemberID:       sub.req.MemberID, // the effective one, present only for a member (S-89)
	})
	c.sess.announce(sub)
	c.sess.saveSkeleton()
}

// handleSubscribeStream answers SUBSCRIBE_STREAM (S-72 … S-75,
// docs/protocol.md#streams). Failures use ERROR, as for SUBSCRIBE.
func (c *Conn) handleSubscribeStream(id uint64, body []byte) {
	var req wire.SubscribeStream
	if err := req.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	if err := c.authorize(ActionConsume, req.Topic); err != nil {
		c.replyError(id, wire.CodeForbidden, err.Error())
		return
	}
	qs := c.srv.opts.Queues
	kind, known := qs.Kind(req.Topic)
	isQueue := func() bool { // S-22
		if known && kind != queue.KindStream {
			c.replyError(id, wire.CodeBadRequest, "topic "+req.Topic+" is a queue; subscribe to it with SUBSCRIBE")
			return true
		}
		return false
	}
	switch {
	case isQueue():
		return
	case !known && c.srv.opts.Router == nil:
		c.replyError(id, wire.CodeNotFound, "stream "+req.Topic+" does not exist; declare it first") // S-72
		return
	}
	// In a cluster, a stream this broker has not heard of yet is looked
	// up by the router (it answers 404 when the cluster has none either).
	if rt := c.route(req.Topic, wire.None[string](), req.Partition, false, 0); !rt.Serve {
		switch {
		case rt.Forward != "" && c.srv.opts.Upstreams != nil:
			c.relay.SubscribeStream(id, body, req, rt.Forward)
		case rt.Redirect != nil:
			c.reply(wire.OpRedirect, id, rt.Redirect) // S-86
		default:
			c.replyError(id, core.Code(rt.Err), rt.Err.Error())
		}
		return
	}
	if !known { // the router installed what it serves here
		if kind, known = qs.Kind(req.Topic); isQueue() {
			return
		}
	}
	sub, err := c.sess.subscribeStream(req)
	if err != nil {
		c.replyError(id, core.Code(err), err.Error())
		return
	}
	c.reply(wire.OpSubscribeOK, id, &wire.SubscribeOK{
		SubID:     sub.id,
		Topic:     req.Topic,
		Partition: req.Partition,
		Prefetch:  req.Prefetch, // echoed (docs/protocol.md#streams)
	})
	c.sess.announce(sub)
}

// subscribeStream registers a stream subscription on the engine. The
// caller queues SUBSCRIBE_OK and then calls announce.
func (s *Session) subscribeStream(req wire.SubscribeStream) (*subscription, error) {
	s.transition.Lock()
	defer s.transition.Unlock()
	if name, ok := req.DurableName.Get(); ok && name == "" {
		return nil, core.Errorf(core.ErrBadRequest, "durable_name must not be empty (leave it absent for an ephemeral subscription)")
	}
	if !req.Start.Kind.Valid() {
		return nil, core.Errorf(core.ErrBadRequest, "unknown stream start kind %d", req.Start.Kind)
	}
	sp, err := s.srv.opts.Queues.StreamPartition(req.Topic, req.Partition)
	if err != nil {
		return nil, err
	}
	sub, dormant, err := s.reserve(&subscription{key: keyOf(req.Topic, wire.None[string](), req.Partition), stream: true}, req.Topic)
	if err != nil {
		return nil, err
	}
	q, err := sp.Subscribe(sub, queue.StreamSubscribeOptions{
		DurableName: req.DurableName.Value,
		Start:       req.Start,
		Filter:      req.Filter,
		Prefetch:    max(req.Prefetch, 1), // clamped like a queue's (S-46)
		AutoAck:     req.AutoAck,
		Paused:      true, // until sub.q is set: Deliver may ask the writer to resume it
	})
	if err != nil {
		s.unreserve(sub)
		return nil, err
	}
	sub.q = q
	if !dormant {
		q.Resume()
	}
	s.srv.opts.Metrics.SubscriptionsOpen.Inc()
	return sub, nil
}
