package session

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/replica"
	"github.com/fibrilgo/fibril/core/wire"
)

// publishReq is the part of PUBLISH and PUBLISH_DELAYED the broker acts
// on; both bodies decode into it.
type publishReq struct {
	topic     string
	group     wire.Option[string]
	partition uint32
	confirm   bool
	version   uint64
	msg       queue.Message
}

// handlePublish answers PUBLISH / PUBLISH_DELAYED (docs/protocol.md#publish). Confirmed
// publishes are answered once the storage durability policy holds, from
// the log's commit callback; the reader moves on at once, so one
// connection can keep many confirms in flight. Unconfirmed ones are never
// answered, failures included (docs/protocol.md#answers).
func (c *Conn) handlePublish(h wire.FrameHeader, body []byte) {
	received := c.srv.opts.Now()
	req, err := c.decodePublish(h.Op, body)
	if err != nil {
		if confirm, ok := peekConfirm(body); ok && !confirm {
			c.drop(h.Op, "malformed")
			return
		}
		c.replyError(h.RequestID, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	req.msg.Received = received.UnixMilli()
	fail := func(code uint16, reason, msg string) {
		if req.confirm {
			c.replyError(h.RequestID, code, msg)
		} else {
			c.drop(h.Op, reason)
		}
	}
	if err := c.authorize(ActionPublish, req.topic); err != nil {
		fail(wire.CodeForbidden, "forbidden", err.Error())
		return
	}
	qs := c.srv.opts.Queues
	kind, known := qs.Kind(req.topic)
	if known && kind == queue.KindStream {
		req.group = wire.None[string]() // S-77: a stream has no groups
	}
	if rt := c.route(req.topic, req.group, req.partition, true, req.version); !rt.Serve {
		switch {
		case rt.Forward != "" && c.srv.opts.Upstreams != nil:
			c.relay.Publish(h, body, forward.PublishRef{Confirm: req.confirm, Topic: req.topic, Group: req.group,
				Partition: req.partition, Version: req.version}, rt.Forward)
		case rt.Redirect == nil:
			fail(core.Code(rt.Err), "not_served", rt.Err.Error())
		case req.confirm:
			c.reply(wire.OpRedirect, h.RequestID, rt.Redirect)
		default:
			c.drop(h.Op, "redirected") // nobody waits for a fire-and-forget answer (S-116)
		}
		return
	}
	if !known { // the router may have installed what it serves here
		kind, known = qs.Kind(req.topic)
	}
	if known && kind == queue.KindStream {
		c.publishStream(h, req, received, fail)
		return
	}
	key := queue.Key{Topic: req.topic, Group: req.group}
	part, err := qs.Partition(key, req.partition)
	if err != nil {
		fail(core.Code(err), "rejected", err.Error())
		return
	}
	if v := part.PartitioningVersion(); req.version < v {
		c.fenced(h, req, v)
		return
	}
	c.store(h, req, received, part)
}

// fenced answers a publish routed under an older partitioning than the
// queue's current version v (docs/protocol.md#topology): it is not stored;
// the REDIRECT carries v, even to this broker's own address. Only a
// waiting client can use it.
func (c *Conn) fenced(h wire.FrameHeader, req *publishReq, v uint64) {
	if req.confirm {
		c.reply(wire.OpRedirect, h.RequestID, &wire.Redirect{Topic: req.topic, Partition: req.partition,
			Group: req.group, Owners: c.srv.opts.Advertise, PartitioningVersion: v})
	} else {
		c.drop(h.Op, "stale_partitioning")
	}
}

// partitionLog is where a publish is stored: a queue's partition
// (*queue.Partition) or a stream's (*queue.StreamPartition).
type partitionLog interface {
	Publish(msg *queue.Message, done func(offset uint64, err error)) error
	PublishDeferred(msg *queue.Message, done func(offset uint64, err error)) error
	PartitioningVersion() uint64
	committer
}

// store appends req to part. An unconfirmed publish is never answered; a
// confirmed one gets PUBLISH_OK with the offset, or ERROR, from the log's
// commit callback, and the reader moves on at once.
func (c *Conn) store(h wire.FrameHeader, req *publishReq, received time.Time, part partitionLog) {
	req.msg.PartitioningVersion = req.version
	if !req.confirm {
		if err := part.Publish(&req.msg, c.unconfirmedDone(h.Op)); errors.Is(err, queue.ErrStalePartitioning) {
			c.drop(h.Op, "stale_partitioning")
		} else if err != nil {
			c.drop(h.Op, "rejected")
		}
		return
	}
	reqID := h.RequestID
	publish := part.Publish
	if c.br.Buffered() == 0 {
		// The last frame read: serve calls commitOwed right after this
		// frame, before it waits for input, and the commit may then run
		// on this goroutine instead of waking the storage committer.
		publish = part.PublishDeferred
		c.owed = part
	}
	err := publish(&req.msg, func(offset uint64, err error) {
		if err != nil {
			msg := "publish not stored: "
			if errors.Is(err, replica.ErrNotConfirmed) {
				msg = "publish not confirmed: " // it may be stored (S-141)
			}
			c.log.Warn("confirmed publish failed", "topic", req.topic, "partition", req.partition, "err", err)
			c.enqueue(outFrame{op: wire.OpError, reqID: reqID, slot: true,
				body: &wire.ErrorBody{Code: core.Code(err), Message: msg + err.Error()}})
			return
		}
		c.srv.opts.Metrics.ConfirmLatency.Observe(time.Since(received).Seconds())
		c.enqueue(outFrame{op: wire.OpPublishOK, reqID: reqID, offset: offset, slot: true})
	})
	if errors.Is(err, queue.ErrStalePartitioning) { // the version was raised since the check above
		c.fenced(h, req, part.PartitioningVersion())
		return
	}
	if err != nil {
		c.replyError(h.RequestID, core.Code(err), err.Error())
		return
	}
	c.deferReply()
}

// unconfirmedDone counts storage failures of unconfirmed publishes, which
// nobody waits for.
func (c *Conn) unconfirmedDone(op wire.Op) func(uint64, error) {
	return func(_ uint64, err error) {
		if err != nil {
			c.drop(op, "store_failed")
		}
	}
}

// drop counts a fire-and-forget request that failed (docs/protocol.md#answers last row:
// nothing is sent back).
func (c *Conn) drop(op wire.Op, reason string) {
	c.srv.opts.Metrics.Dropped.WithLabelValues(op.String(), reason).Inc()
}

func (c *Conn) decodePublish(op wire.Op, body []byte) (*publishReq, error) {
	r := &publishReq{}
	if op == wire.OpPublish {
		var p wire.Publish
		if err := p.Decode(body); err != nil {
			return nil, err
		}
		r.topic, r.group, r.partition, r.confirm, r.version = p.Topic, p.Group, p.Partition, p.RequireConfirm, p.PartitioningVersion
		r.msg = queue.Message{ContentType: p.ContentType, Headers: p.Headers, Published: p.Published,
			TTLMillis: p.TTLMillis, Payload: p.Payload}
		return r, nil
	}
	var p wire.PublishDelayed
	if err := p.Decode(body); err != nil {
		return nil, err
	}
	r.topic, r.group, r.partition, r.confirm, r.version = p.Topic, p.Group, p.Partition, p.RequireConfirm, p.PartitioningVersion
	r.msg = queue.Message{ContentType: p.ContentType, Headers: p.Headers, Published: p.Published,
		NotBefore: p.NotBefore, Payload: p.Payload}
	return r, nil
}

// peekConfirm reads require_confirm from a body that failed to decode, so
// a malformed fire-and-forget publish is not answered (docs/protocol.md#answers). It
// reports ok=false when even that prefix is unreadable; the broker then
// answers 400, since it cannot tell.
func peekConfirm(b []byte) (confirm, ok bool) {
	if len(b) < 4 {
		return false, false
	}
	i := 4 // magic
	str := func() bool {
		if len(b)-i < 4 {
			return false
		}
		n := int(binary.BigEndian.Uint32(b[i:]))
		if n < 0 || len(b)-i-4 < n {
			return false
		}
		i += 4 + n
		return true
	}
	if !str() || i >= len(b) { // topic, then group's option tag
		return false, false
	}
	switch b[i] {
	case 0:
		i++
	case 1:
		i++
		if !str() {
			return false, false
		}
	default:
		return false, false
	}
	i += 4 // partition
	if i >= len(b) || b[i] > 1 {
		return false, false
	}
	return b[i] == 1, true
}

// publishStream appends a PUBLISH to a stream topic (S-77): group,
// partitioning version and TTL play no role; PUBLISH_OK carries the
// record's offset once the stream's tier confirms it (S-82).
func (c *Conn) publishStream(h wire.FrameHeader, req *publishReq, received time.Time, fail func(code uint16, reason, msg string)) {
	if h.Op != wire.OpPublish {
		fail(wire.CodeBadRequest, "rejected", "topic "+req.topic+" is a stream; publish to it with PUBLISH (a stream has no delayed delivery)")
		return
	}
	sp, err := c.srv.opts.Queues.StreamPartition(req.topic, req.partition)
	if err != nil {
		fail(core.Code(err), "rejected", err.Error())
		return
	}
	c.store(h, req, received, sp)
}
