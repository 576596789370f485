package session

import (
	"github.com/fibrilgo/fibril/core/wire"
)

// handleSettle applies ACK and NACK (docs/protocol.md#subscriptions). Both are
// fire-and-forget: nothing is ever sent back, not even for a malformed
// body or an invalid combination (docs/protocol.md#answers wins over S-59's error).
// Unknown subscriptions and tags are ignored (S-61).
func (c *Conn) handleSettle(op wire.Op, body []byte) {
	if op == wire.OpAck {
		var a wire.Ack
		if err := a.Decode(body); err != nil {
			c.drop(op, "malformed")
			return
		}
		if c.relay.Settle(op, a.Topic, a.Group, a.Partition, body) {
			return
		}
		if sub := c.sess.findSub(keyOf(a.Topic, a.Group, a.Partition)); sub != nil {
			if c.acks.sub != sub {
				c.flushAcks()
				c.acks.sub = sub
			}
			c.acks.tags = append(c.acks.tags, a.Tags...)
		}
		return
	}
	c.flushAcks()
	var n wire.Nack
	if err := n.Decode(body); err != nil {
		c.drop(op, "malformed")
		return
	}
	if !n.Requeue && n.NotBefore.Present {
		c.drop(op, "not_before_without_requeue") // S-59: nothing is applied
		return
	}
	if c.relay.Settle(op, n.Topic, n.Group, n.Partition, body) {
		return
	}
	if sub := c.sess.findSub(keyOf(n.Topic, n.Group, n.Partition)); sub != nil {
		sub.q.Nack(n.Tags, n.Requeue, n.NotBefore)
	}
}

// pendingAcks gathers consecutive ACKs for one subscription so the engine
// settles them with one journal write (SDKs send one tag per ACK). They
// are applied before any other frame is handled and before the reader
// waits for more input, so batching never delays an ack behind a read.
type pendingAcks struct {
	sub  *subscription
	tags []uint64
}

// flushAcks applies the gathered ACKs. Reader goroutine only.
func (c *Conn) flushAcks() {
	if c.acks.sub != nil && len(c.acks.tags) > 0 {
		c.acks.sub.q.Ack(c.acks.tags...)
	}
	c.acks.sub = nil
	c.acks.tags = c.acks.tags[:0]
}
