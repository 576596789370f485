package client

import "github.com/fibrilgo/fibril/core/wire"

// Exclusive consumer groups on the client side
// (docs/protocol.md#consumer-groups): one member id per Client, learnt
// from the first SUBSCRIBE_OK that carries one and sent with every later
// exclusive SUBSCRIBE and reconcile entry; ASSIGNMENT_CHANGED handed to
// the subscriptions of its queue and cohort.

// memberID is the member id to send on an exclusive SUBSCRIBE: absent
// until a broker gave one.
func (c *Client) memberID() wire.Option[wire.UUID] {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	if !c.hasMember {
		return wire.Option[wire.UUID]{}
	}
	return wire.Some(c.member)
}

// memberIDFor is memberID for an exclusive subscription, absent otherwise.
func (c *Client) memberIDFor(exclusive bool) wire.Option[wire.UUID] {
	if !exclusive {
		return wire.Option[wire.UUID]{}
	}
	return c.memberID()
}

// setMemberID keeps the first member id a broker gave.
func (c *Client) setMemberID(id wire.UUID) {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	if !c.hasMember {
		c.member, c.hasMember = id, true
	}
}

// onAssignment hands an ASSIGNMENT_CHANGED from the broker at addr to the
// subscriptions of its queue and cohort that listen (reader goroutine).
func (c *Client) onAssignment(addr string, ac *wire.AssignmentChanged) {
	a := Assignment{Topic: ac.Topic, Group: ac.Group.Value, ConsumerGroup: ac.ConsumerGroup, Generation: ac.Generation,
		Assigned: ac.Assigned, Added: ac.Added, Revoked: ac.Revoked, Broker: addr}
	c.subsMu.Lock()
	var to []*Subscription
	for s := range c.subs {
		if s.stream == nil && s.opts.OnAssignment != nil && s.topic == ac.Topic && s.group == ac.Group &&
			s.opts.ConsumerGroup == ac.ConsumerGroup {
			to = append(to, s)
		}
	}
	c.subsMu.Unlock()
	for _, s := range to {
		s.opts.OnAssignment(a)
	}
}

func optU32(v uint32) wire.Option[uint32] {
	if v == 0 {
		return wire.Option[uint32]{}
	}
	return wire.Some(v)
}
