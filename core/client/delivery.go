package client

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// RetriesHeader is the broker-added header carrying the redelivery count
// (docs/protocol.md#publish).
const RetriesHeader = "fibril.retries"

// Delivery is one message delivered to a Subscription. Settle it exactly
// once with Ack, Retry or Fail (unless the subscription is auto-ack).
type Delivery struct {
	Topic       string
	Group       string // "" = default namespace
	Partition   uint32
	Offset      uint64
	Tag         uint64    // delivery tag (docs/protocol.md#subscriptions)
	Published   time.Time // producer clock; zero when the producer sent 0
	Received    time.Time // broker clock at receipt
	ContentType string    // MIME text ("" = none)
	Headers     map[string]string
	Payload     []byte
	Retries     int // earlier redeliveries, from the fibril.retries header

	ep      *endpoint
	sess    *session
	frameID uint64 // request id of the DELIVER frame, echoed by ACK/NACK (docs/protocol.md#request-ids)
	group   wire.Option[string]
	autoAck bool
	held    *atomic.Int64 // the delivering connection's unsettled count, which counts it (nil for auto-ack)
	settled atomic.Bool
	tag     [1]uint64 // ACK encoding scratch (no allocation per ack)
}

func newDelivery(ep *endpoint, sess *session, frameID uint64, d *wire.Deliver, autoAck bool) *Delivery {
	dl := &Delivery{
		Topic:       d.Topic,
		Group:       d.Group.Value,
		Partition:   d.Partition,
		Offset:      d.Offset,
		Tag:         d.DeliveryTag,
		Received:    unixMillis(d.PublishReceived),
		Published:   unixMillis(d.Published),
		ContentType: d.ContentType.MIME(),
		Payload:     d.Payload,
		ep:          ep,
		sess:        sess,
		frameID:     frameID,
		group:       d.Group,
		autoAck:     autoAck,
	}
	if len(d.Headers) > 0 {
		dl.Headers = make(map[string]string, len(d.Headers))
		for _, h := range d.Headers {
			dl.Headers[h.Key] = h.Value // the last duplicate wins (wire.Headers)
		}
		if v, ok := dl.Headers[RetriesHeader]; ok {
			dl.Retries, _ = strconv.Atoi(v)
		}
	}
	return dl
}

// hold counts d as unsettled on the connection that delivered it (the
// lone ACK's hint, writer.go); auto-ack deliveries are settled already.
// Called before anyone else can see d.
func (d *Delivery) hold(c *Conn) {
	if !d.autoAck {
		d.held = c.unsettled
		d.held.Add(1)
	}
}

// unhold uncounts d, once: when its settle is queued, or when it is
// dropped without ever being handed out.
func (d *Delivery) unhold() {
	if d.held != nil {
		d.held.Add(-1)
	}
}

func unixMillis(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}

// Ack acknowledges the delivery (ACK, docs/protocol.md#subscriptions). It returns once the ACK is
// queued for writing. Consecutive ACKs for the same partition that are
// still queued together travel as one ACK frame with several tags. An ACK
// lost with its connection leaves the delivery unsettled: the broker
// redelivers it once its lease expires (at-least-once).
func (d *Delivery) Ack(ctx context.Context) error {
	return d.settle(ctx, wire.OpAck, nil)
}

// Retry makes the message deliverable again (NACK requeue=1, docs/protocol.md#subscriptions), not
// before delay has passed when delay > 0.
func (d *Delivery) Retry(ctx context.Context, delay time.Duration) error {
	n := &wire.Nack{Topic: d.Topic, Group: d.group, Partition: d.Partition, Tags: []uint64{d.Tag}, Requeue: true}
	if delay > 0 {
		n.NotBefore = wire.Some(uint64(time.Now().Add(delay).UnixMilli()))
	}
	return d.settle(ctx, wire.OpNack, n)
}

// Fail settles the delivery as a terminal failure (NACK requeue=0): it is
// dead-lettered per the queue's policy, or discarded.
func (d *Delivery) Fail(ctx context.Context) error {
	return d.settle(ctx, wire.OpNack, &wire.Nack{Topic: d.Topic, Group: d.group, Partition: d.Partition, Tags: []uint64{d.Tag}})
}

// settle queues ACK/NACK with the DELIVER's request id on the session that
// delivered it (body is nil for ACK, which is encoded in place). Deliveries of auto-ack subscriptions were settled by the
// broker, so nothing is sent. A delivery from a session that was not
// resumed returns ErrStaleDelivery and sends nothing (docs/protocol.md#resume). If the
// connection is down, settle waits (within ctx) for the reconnect to tell
// whether the session survived.
func (d *Delivery) settle(ctx context.Context, op wire.Op, body wire.Encoder) error {
	if d.autoAck {
		return nil
	}
	if d.sess.stale.Load() {
		d.ep.cl.stats.staleSettles.Add(1)
		return ErrStaleDelivery
	}
	if !d.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	for {
		conn, sess, err := d.ep.get(ctx)
		if err != nil {
			if errors.Is(err, errRetired) {
				d.ep.cl.stats.staleSettles.Add(1)
				return ErrStaleDelivery
			}
			d.settled.Store(false)
			return err
		}
		if sess != d.sess || d.sess.stale.Load() {
			d.ep.cl.stats.staleSettles.Add(1)
			return ErrStaleDelivery
		}
		if op == wire.OpAck {
			d.tag[0] = d.Tag
			err = conn.queueAck(ctx, d.frameID, d.Topic, d.group, d.Partition, d.tag[:])
		} else {
			err = conn.queueFrame(ctx, op, d.frameID, body, nil, false)
		}
		if err == nil {
			d.unhold()
			return nil
		}
		if !isNotWritten(err) || ctx.Err() != nil {
			d.settled.Store(false)
			return err
		}
	}
}
