package session

import (
	"context"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// handleDeclareQueue answers DECLARE_QUEUE (docs/protocol.md#declare, S-18). In a
// cluster the answer waits, off the reader, until the queue's partitions
// have owners (answerWhenPlaced).
func (c *Conn) handleDeclareQueue(id uint64, body []byte) {
	var d wire.DeclareQueue
	if err := d.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	if err := c.authorize(ActionDeclare, d.Topic); err != nil {
		c.replyError(id, wire.CodeForbidden, err.Error())
		return
	}
	spec := queue.QueueSpec{
		Key:              queue.Key{Topic: d.Topic, Group: d.Group},
		PartitionCount:   d.PartitionCount,
		DLQ:              d.DLQPolicy,
		MaxRetries:       d.DLQMaxRetries,
		DefaultTTLMillis: d.DefaultMessageTTLMillis,
	}
	var info queue.QueueInfo
	var err error
	if r := c.srv.opts.Router; r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), routeTimeout)
		info, err = r.DeclareQueue(ctx, spec)
		cancel()
	} else {
		info, err = c.srv.opts.Queues.DeclareQueue(spec)
	}
	if err != nil {
		c.replyError(id, core.Code(err), err.Error())
		return
	}
	c.answerWhenPlaced(wire.OpDeclareQueueOK, id, &wire.DeclareQueueOK{Status: "stored", PartitionCount: info.PartitionCount},
		info.Key.Topic, info.Key.Group.Value, false)
}

// handleDeclarePlexus answers DECLARE_PLEXUS (docs/protocol.md#declare, S-70): the stream
// is recorded (kind = stream) so the topic can never become a queue.
func (c *Conn) handleDeclarePlexus(id uint64, body []byte) {
	var d wire.DeclarePlexus
	if err := d.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	if err := c.authorize(ActionDeclare, d.Topic); err != nil {
		c.replyError(id, wire.CodeForbidden, err.Error())
		return
	}
	spec := queue.StreamSpec{
		Topic:             d.Topic,
		PartitionCount:    d.PartitionCount,
		Durability:        d.Durability,
		Retention:         d.Retention,
		ReplicationFactor: d.ReplicationFactor,
	}
	var info queue.StreamInfo
	var err error
	if r := c.srv.opts.Router; r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), routeTimeout)
		info, err = r.DeclareStream(ctx, spec)
		cancel()
	} else {
		info, err = c.srv.opts.Queues.DeclareStream(spec)
	}
	if err != nil {
		c.replyError(id, core.Code(err), err.Error())
		return
	}
	c.answerWhenPlaced(wire.OpDeclarePlexusOK, id, &wire.DeclarePlexusOK{Status: "stored", PartitionCount: info.PartitionCount},
		info.Topic, "", true)
}

// handleTopology answers TOPOLOGY for a standalone broker exactly as S-113
// says: generation 0, no queue entries (SDKs then route every queue over
// their one connection), and one stream entry per declared stream
// partition with an empty owner list. The topic filter narrows streams;
// the group filter narrows queues only (S-112).
func (c *Conn) handleTopology(id uint64, body []byte) {
	var req wire.TopologyRequest
	if err := req.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	if r := c.srv.opts.Router; r != nil {
		c.reply(wire.OpTopologyOK, id, &wire.TopologyOK{Topology: r.Topology(req)})
		return
	}
	topo := &wire.TopologyOK{}
	for _, st := range c.srv.opts.Queues.Streams() {
		if t, ok := req.Topic.Get(); ok && t != st.Topic {
			continue
		}
		for p := uint32(0); p < st.PartitionCount; p++ {
			topo.Streams = append(topo.Streams, wire.StreamEntry{Topic: st.Topic, Partition: p, PartitionCount: st.PartitionCount})
		}
	}
	c.reply(wire.OpTopologyOK, id, topo)
}
