package broker

// Message inspection (S-69) and dead-letter replay (S-68) for the admin
// API (docs/admin.md#messages, docs/admin.md#dead-letters). Like the
// queues view, each step runs on the partition's owner: this broker when
// it owns it, else the owner over NODE_ADMIN.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/admin"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// Node admin actions for messages.
const (
	actionMessagesList   = "messages.list"   // browse one partition (messagesQuery)
	actionMessagesRemove = "messages.remove" // settle ready/delayed offsets of one partition
	actionQueueAppend    = "queues.append"   // publish copies to one partition and wait for their confirms
)

// Replay limits and the dead-letter headers (S-66, S-68).
const (
	messagesMaxLimit        = 5000 // S-69's cap on one page
	replayMaxOffsets        = 100
	replayAllMaxMessages    = 100_000 // one "all" replay; run it again for more
	replayAllPage           = 500
	replayReportedEntries   = 100 // entries listed in an answer; counts cover the rest
	dlqHeaderPrefix         = "stroma.dlq."
	dlqHeaderSourceTopic    = "stroma.dlq.source_topic"
	dlqHeaderSourceGroup    = "stroma.dlq.source_group"
	dlqHeaderSourceOffset   = "stroma.dlq.source_offset"
	dlqHeaderReason         = "stroma.dlq.reason"
	dlqHeaderRetryCount     = "stroma.dlq.retry_count"
	dlqHeaderDeadLetteredAt = "stroma.dlq.dead_lettered_at_ms"
)

// messagesQuery selects messages of one queue partition.
type messagesQuery struct {
	Topic          string   `json:"topic"`
	Group          string   `json:"group,omitempty"`
	Partition      uint32   `json:"partition"`
	From           uint64   `json:"from"`
	Limit          int      `json:"limit"`
	IncludeSettled bool     `json:"include_settled,omitempty"`
	PayloadLimit   int      `json:"payload_limit,omitempty"` // 0: no payload
	States         []string `json:"states,omitempty"`
}

// nodeAdminPayloadBudget bounds the payload bytes of one NODE_ADMIN
// request or answer (messages.list, queues.append), well below
// broker.max_frame_bytes' default of 64 MiB.
const nodeAdminPayloadBudget = 8 << 20

func (q messagesQuery) options() queue.BrowseOptions {
	return queue.BrowseOptions{From: q.From, Limit: q.Limit, IncludeSettled: q.IncludeSettled,
		PayloadLimit: q.PayloadLimit, States: q.States, PayloadBudget: nodeAdminPayloadBudget}
}

// apiMessage is one message as the API shows it and NODE_ADMIN carries
// it.
type apiMessage struct {
	queue.BrowsedMessage
	ContentTag    uint8        `json:"content_tag"`
	ContentCustom string       `json:"content_custom,omitempty"`
	Headers       []apiHeader  `json:"headers"`
	DLQ           *dlqMetadata `json:"dlq,omitempty"` // the dead-letter headers, read
}

type apiHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// dlqMetadata is what dead-lettering recorded about a message's origin
// (S-66).
type dlqMetadata struct {
	SourceTopic    string `json:"source_topic"`
	SourceGroup    string `json:"source_group,omitempty"`
	SourceOffset   string `json:"source_offset,omitempty"`
	Reason         string `json:"reason,omitempty"`
	RetryCount     string `json:"retry_count,omitempty"`
	DeadLetteredAt string `json:"dead_lettered_at_ms,omitempty"`
}

func toAPIMessage(m queue.BrowsedMessage) apiMessage {
	a := apiMessage{BrowsedMessage: m, ContentTag: uint8(m.Type.Tag), ContentCustom: m.Type.Custom, Headers: []apiHeader{}}
	var d dlqMetadata
	for _, h := range m.Headers {
		a.Headers = append(a.Headers, apiHeader{h.Key, h.Value})
		switch h.Key {
		case dlqHeaderSourceTopic:
			d.SourceTopic = h.Value
		case dlqHeaderSourceGroup:
			d.SourceGroup = h.Value
		case dlqHeaderSourceOffset:
			d.SourceOffset = h.Value
		case dlqHeaderReason:
			d.Reason = h.Value
		case dlqHeaderRetryCount:
			d.RetryCount = h.Value
		case dlqHeaderDeadLetteredAt:
			d.DeadLetteredAt = h.Value
		}
	}
	if d.SourceTopic != "" {
		a.DLQ = &d
	}
	return a
}

// messagesAnswer is a page of messages.
type messagesAnswer struct {
	Topic     string       `json:"topic"`
	Group     string       `json:"group,omitempty"`
	Partition uint32       `json:"partition"`
	Owner     core.NodeID  `json:"owner,omitempty"`
	Next      uint64       `json:"next"` // where the next page starts
	Messages  []apiMessage `json:"messages"`
}

// localQueuePartition returns a queue partition this broker serves: in a
// cluster one it owns (409 naming the owner otherwise). It never creates
// a queue (inspection "creates no publisher/subscriber lease", S-69).
func (b *Broker) localQueuePartition(topic, group string, n uint32) (*queue.Partition, error) {
	qm := b.readyQueues()
	if qm == nil {
		return nil, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
	}
	key := queueKey(topic, group)
	if c := b.adminCluster.Load(); c != nil {
		p, ok := c.cl.Snapshot().Partition(core.PartitionRef{Topic: topic, Group: group, Partition: n})
		if !ok || p.Node != c.self.ID {
			return nil, core.Errorf(core.ErrConflict, "%s partition %d is not owned by this broker", key, n)
		}
		if err := c.router.EnsureLocal(c.cl.Snapshot(), p.Ref); err != nil {
			return nil, err
		}
	} else if !qm.HasQueue(key) {
		if k, ok := qm.Kind(topic); ok && k == queue.KindStream {
			return nil, core.Errorf(core.ErrBadRequest, "%s is a stream: its records are read with a stream subscription", topic)
		}
		return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", key)
	}
	return qm.Partition(key, n)
}

// listLocal browses one partition this broker serves.
func (b *Broker) listLocal(q messagesQuery) (messagesAnswer, error) {
	p, err := b.localQueuePartition(q.Topic, q.Group, q.Partition)
	if err != nil {
		return messagesAnswer{}, err
	}
	msgs, next, err := p.Browse(q.options())
	if err != nil {
		return messagesAnswer{}, err
	}
	out := messagesAnswer{Topic: q.Topic, Group: q.Group, Partition: q.Partition, Next: next, Messages: make([]apiMessage, 0, len(msgs))}
	for _, m := range msgs {
		out.Messages = append(out.Messages, toAPIMessage(m))
	}
	return out, nil
}

// partitionOwner resolves who serves a queue partition: "" (this broker)
// in standalone mode and when it owns it, else the live owner's id.
func (b *Broker) partitionOwner(topic, group string, n uint32) (core.NodeID, error) {
	c := b.adminCluster.Load()
	if c == nil {
		return "", nil
	}
	snap := c.cl.Snapshot()
	q := snap.Queue(topic, group)
	if q == nil {
		if snap.Stream(topic) != nil {
			return "", core.Errorf(core.ErrBadRequest, "%s is a stream: its records are read with a stream subscription", topic)
		}
		return "", core.Errorf(core.ErrNotFound, "queue %s is not declared", queueKey(topic, group))
	}
	if int(n) >= len(q.Parts) {
		return "", core.Errorf(core.ErrBadRequest, "queue %s has %d partitions; there is no partition %d", queueKey(topic, group), len(q.Parts), n)
	}
	p := q.Parts[n]
	switch {
	case !p.Placed():
		return "", core.Errorf(core.ErrUnavailable, "%s partition %d is not placed yet", queueKey(topic, group), n)
	case p.Node == c.self.ID:
		return "", nil
	case !snap.Live(p.Node):
		return "", core.Errorf(core.ErrUnavailable, "the owner of %s partition %d, node %s, is down", queueKey(topic, group), n, p.Node)
	}
	return p.Node, nil
}

// listMessages is GET /admin/api/messages.
func (b *Broker) listMessages(ctx context.Context, q messagesQuery) (messagesAnswer, error) {
	owner, err := b.partitionOwner(q.Topic, q.Group, q.Partition)
	if err != nil {
		return messagesAnswer{}, err
	}
	if owner == "" {
		return b.listLocal(q)
	}
	var out messagesAnswer
	if err := b.askNode(ctx, b.adminCluster.Load(), owner, actionMessagesList, q, &out); err != nil {
		return messagesAnswer{}, err
	}
	out.Owner = owner
	return out, nil
}

// removeRequest settles ready or delayed messages of one partition
// (NODE_ADMIN messages.remove).
type removeRequest struct {
	Topic     string   `json:"topic"`
	Group     string   `json:"group,omitempty"`
	Partition uint32   `json:"partition"`
	Offsets   []uint64 `json:"offsets"`
}

type removeAnswer struct {
	Removed []uint64 `json:"removed"`
}

// appendRequest publishes copies to one queue partition (NODE_ADMIN
// queues.append).
type appendRequest struct {
	Topic     string       `json:"topic"`
	Group     string       `json:"group,omitempty"`
	Partition uint32       `json:"partition"`
	Messages  []apiMessage `json:"messages"`
	// DeadLetter: the messages are dead-letter copies another broker made;
	// they keep their stroma.dlq.* headers and receive time.
	DeadLetter bool `json:"dead_letter,omitempty"`
}

// appendLocal publishes the messages to a partition this broker serves
// and waits until each is confirmed (the partition's durability policy,
// replication included), returning their offsets. In a cluster it takes
// the path dead letters take: the partition is loaded and marked written
// before the first confirm (docs/cluster.md#replication).
func (b *Broker) appendLocal(ctx context.Context, req appendRequest) ([]uint64, error) {
	p, err := b.localQueuePartition(req.Topic, req.Group, req.Partition)
	if err != nil {
		return nil, err
	}
	if c := b.adminCluster.Load(); c != nil {
		sp, _ := c.cl.Snapshot().Partition(core.PartitionRef{Topic: req.Topic, Group: req.Group, Partition: req.Partition})
		if err := c.router.MarkWritten(sp); err != nil {
			return nil, err
		}
	}
	type result struct {
		i   int
		off uint64
		err error
	}
	results := make(chan result, len(req.Messages))
	now := time.Now().UnixMilli()
	for i, m := range req.Messages {
		msg := &queue.Message{ContentType: wire.ContentType{Tag: wire.ContentTag(m.ContentTag), Custom: m.ContentCustom},
			Published: m.Published, Received: now, Payload: m.Payload}
		for _, h := range m.Headers {
			msg.Headers = append(msg.Headers, wire.Header{Key: h.Key, Value: h.Value})
		}
		done := func(off uint64, err error) { results <- result{i, off, err} }
		var err error
		if req.DeadLetter {
			msg.Received = m.Received
			err = p.AppendDeadLetter(msg, done)
		} else {
			err = p.Publish(msg, done)
		}
		if err != nil {
			return nil, err
		}
	}
	offs := make([]uint64, len(req.Messages))
	for range req.Messages {
		select {
		case r := <-results:
			if r.err != nil {
				return nil, r.err
			}
			offs[r.i] = r.off
		case <-ctx.Done():
			return nil, core.Errorf(core.ErrUnavailable, "copies not confirmed in time: %v", ctx.Err())
		}
	}
	return offs, nil
}

// removeLocal settles ready or delayed messages of a partition this
// broker serves and returns the ones it removed.
func (b *Broker) removeLocal(topic, group string, n uint32, offsets []uint64) ([]uint64, error) {
	p, err := b.localQueuePartition(topic, group, n)
	if err != nil {
		return nil, err
	}
	return p.Remove(offsets)
}

// runOn runs a node admin action on owner ("" = here) through the same
// entry point a peer's NODE_ADMIN reaches.
func (b *Broker) runOn(ctx context.Context, owner core.NodeID, action string, args, out any) error {
	if owner == "" {
		raw, err := json.Marshal(args)
		if err != nil {
			return err
		}
		res, err := b.nodeAdmin(ctx, "", action, raw)
		if err != nil {
			return err
		}
		return json.Unmarshal(res, out)
	}
	return b.askNode(ctx, b.adminCluster.Load(), owner, action, args, out)
}

type replayed struct {
	Partition       uint32 `json:"partition"`
	Offset          uint64 `json:"offset"`
	Target          string `json:"target"`
	TargetPartition uint32 `json:"target_partition"`
	TargetOffset    uint64 `json:"target_offset"`
	Settled         bool   `json:"settled,omitempty"`
}

type skipped struct {
	Partition uint32 `json:"partition"`
	Offset    uint64 `json:"offset"`
	Reason    string `json:"reason"`
}

type replayAnswer struct {
	ReplayedCount int        `json:"replayed_count"`
	SkippedCount  int        `json:"skipped_count"`
	Replayed      []replayed `json:"replayed"`
	Skipped       []skipped  `json:"skipped"`
	// Truncated: more messages were replayed or skipped than listed.
	Truncated bool `json:"truncated,omitempty"`
	// More: an "all" replay stopped at its limit; run it again.
	More bool `json:"more,omitempty"`
}

func (a *replayAnswer) skip(p uint32, off uint64, reason string) {
	a.SkippedCount++
	if len(a.Skipped) < replayReportedEntries {
		a.Skipped = append(a.Skipped, skipped{p, off, reason})
	} else {
		a.Truncated = true
	}
}

func (a *replayAnswer) done(r replayed) {
	a.ReplayedCount++
	if len(a.Replayed) < replayReportedEntries {
		a.Replayed = append(a.Replayed, r)
	} else {
		a.Truncated = true
	}
}

// validate checks a replay request against the DLQ's partition count.
func validateReplay(r *admin.ReplayRequest, partitions uint32) error {
	switch {
	case r.All && len(r.Offsets) > 0:
		return core.Errorf(core.ErrBadRequest, "give offsets or all, not both")
	case !r.All && len(r.Offsets) == 0:
		return core.Errorf(core.ErrBadRequest, "give offsets (at most %d) or all: true", replayMaxOffsets)
	case len(r.Offsets) > replayMaxOffsets:
		return core.Errorf(core.ErrBadRequest, "at most %d offsets per replay (got %d); use all: true for everything", replayMaxOffsets, len(r.Offsets))
	case len(r.Offsets) > 0 && r.Partition == nil && partitions > 1:
		return core.Errorf(core.ErrBadRequest, "the DLQ has %d partitions: offsets need a partition", partitions)
	case r.Partition != nil && *r.Partition >= partitions:
		return core.Errorf(core.ErrBadRequest, "the DLQ has %d partitions; there is no partition %d", partitions, *r.Partition)
	}
	return nil
}

// queuePartitionCount is a declared queue's partition count.
func (b *Broker) queuePartitionCount(topic, group string) (uint32, error) {
	if c := b.adminCluster.Load(); c != nil {
		if q := c.cl.Snapshot().Queue(topic, group); q != nil {
			return uint32(len(q.Parts)), nil
		}
	} else if qm := b.readyQueues(); qm != nil {
		if q, ok := qm.QueueInfo(queueKey(topic, group)); ok {
			return q.PartitionCount, nil
		}
	} else {
		return 0, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
	}
	return 0, core.Errorf(core.ErrNotFound, "queue %s is not declared", queueKey(topic, group))
}

// replayDLQ copies dead letters back to the queues they came from (the
// stroma.dlq.source_* headers): payload, content type and user headers,
// without the system headers. The copies go round-robin over the origin
// queue's partitions, each confirmed by its owner before it counts; the
// dead letter stays unless settle asks to remove it (then only after its
// copy is confirmed: a failure in between leaves a duplicate, never a
// loss). Messages without source metadata, settled ones, or whose origin
// queue is gone are skipped with the reason.
func (b *Broker) replayDLQ(ctx context.Context, req admin.ReplayRequest, user string) (replayAnswer, error) {
	ans := replayAnswer{Replayed: []replayed{}, Skipped: []skipped{}}
	if req.DLQTopic == "" {
		return ans, core.Errorf(core.ErrBadRequest, "dlq_topic is required")
	}
	count, err := b.queuePartitionCount(req.DLQTopic, req.DLQGroup)
	if err != nil {
		return ans, err
	}
	if err := validateReplay(&req, count); err != nil {
		return ans, err
	}
	parts := []uint32{}
	if req.Partition != nil {
		parts = append(parts, *req.Partition)
	} else {
		for i := range count {
			parts = append(parts, i)
		}
	}
	rr := map[string]uint32{} // round-robin position per origin queue
	budget := replayAllMaxMessages
	for _, part := range parts {
		owner, err := b.partitionOwner(req.DLQTopic, req.DLQGroup, part)
		if err != nil {
			return ans, err
		}
		var from uint64
		for {
			q := messagesQuery{Topic: req.DLQTopic, Group: req.DLQGroup, Partition: part, PayloadLimit: int(b.cfg.Broker.MaxMessageBytes) + 1}
			if req.All {
				q.From, q.Limit = from, min(replayAllPage, budget)
				q.States = []string{queue.StateReady, queue.StateDelayed, queue.StateInflight}
			} else {
				lo, hi := req.Offsets[0], req.Offsets[0]
				for _, o := range req.Offsets {
					lo, hi = min(lo, o), max(hi, o)
				}
				q.From, q.Limit, q.IncludeSettled = lo, int(min(hi-lo+1, messagesMaxLimit)), true
			}
			var page messagesAnswer
			if err := b.runOn(ctx, owner, actionMessagesList, q, &page); err != nil {
				return ans, err
			}
			msgs := page.Messages
			if !req.All {
				byOff := map[uint64]apiMessage{}
				for _, m := range msgs {
					byOff[m.Offset] = m
				}
				msgs = msgs[:0]
				for _, o := range req.Offsets {
					m, ok := byOff[o]
					switch {
					case !ok:
						ans.skip(part, o, "missing")
					case m.State == queue.StateSettled:
						ans.skip(part, o, "inactive (settled)")
					default:
						msgs = append(msgs, m)
					}
				}
			}
			if err := b.replayPage(ctx, req, user, part, owner, msgs, rr, &ans); err != nil {
				return ans, err
			}
			budget -= len(page.Messages)
			if !req.All || len(page.Messages) == 0 || page.Next <= from {
				break
			}
			if budget <= 0 {
				ans.More = true
				break
			}
			from = page.Next
		}
	}
	b.log.Info("dead letters replayed", "dlq", queueKey(req.DLQTopic, req.DLQGroup).String(),
		"replayed", ans.ReplayedCount, "skipped", ans.SkippedCount, "settle", req.Settle, "admin_user", user)
	return ans, nil
}

// replayPage copies one page of dead letters of DLQ partition part (on
// owner) to their origins.
func (b *Broker) replayPage(ctx context.Context, req admin.ReplayRequest, user string, part uint32, owner core.NodeID,
	msgs []apiMessage, rr map[string]uint32, ans *replayAnswer) error {
	type batch struct {
		topic, group string
		partition    uint32
		owner        core.NodeID
		src          []apiMessage
		bytes        int
	}
	open := map[string]*batch{} // the batch being filled per origin partition
	var order []*batch
	for _, m := range msgs {
		if m.DLQ == nil {
			ans.skip(part, m.Offset, "no source metadata")
			continue
		}
		if m.PayloadSize > len(m.Payload) {
			ans.skip(part, m.Offset, "payload larger than broker.max_message_bytes")
			continue
		}
		n, err := b.queuePartitionCount(m.DLQ.SourceTopic, m.DLQ.SourceGroup)
		if err != nil {
			ans.skip(part, m.Offset, "origin queue: "+err.Error())
			continue
		}
		qk := m.DLQ.SourceTopic + "\x00" + m.DLQ.SourceGroup
		tp := rr[qk] % n
		rr[qk]++
		towner, err := b.partitionOwner(m.DLQ.SourceTopic, m.DLQ.SourceGroup, tp)
		if err != nil {
			ans.skip(part, m.Offset, "origin partition: "+err.Error())
			continue
		}
		key := qk + "\x00" + strconv.FormatUint(uint64(tp), 10)
		bt := open[key]
		if bt == nil || bt.bytes+len(m.Payload) > nodeAdminPayloadBudget { // none yet, or full
			bt = &batch{topic: m.DLQ.SourceTopic, group: m.DLQ.SourceGroup, partition: tp, owner: towner}
			open[key] = bt
			order = append(order, bt)
		}
		cp := m
		cp.Headers = nil
		for _, h := range m.Headers {
			if !strings.HasPrefix(h.Key, dlqHeaderPrefix) && !strings.HasPrefix(h.Key, "fibril.") && !strings.HasPrefix(h.Key, "stroma.") {
				cp.Headers = append(cp.Headers, h)
			}
		}
		bt.src = append(bt.src, cp)
		bt.bytes += len(cp.Payload)
	}
	for _, bt := range order {
		var offs []uint64
		err := b.runOn(ctx, bt.owner, actionQueueAppend, appendRequest{Topic: bt.topic, Group: bt.group, Partition: bt.partition, Messages: bt.src}, &offs)
		if err == nil && len(offs) != len(bt.src) {
			err = fmt.Errorf("the origin's owner confirmed %d of %d copies", len(offs), len(bt.src))
		}
		if err != nil {
			for _, m := range bt.src {
				ans.skip(part, m.Offset, "copy failed: "+err.Error())
			}
			continue
		}
		settled := map[uint64]bool{}
		if req.Settle {
			src := make([]uint64, len(bt.src))
			for i, m := range bt.src {
				src[i] = m.Offset
			}
			var rm removeAnswer
			err := b.runOn(ctx, owner, actionMessagesRemove, removeRequest{Topic: req.DLQTopic, Group: req.DLQGroup, Partition: part, Offsets: src}, &rm)
			if err != nil {
				b.log.Warn("dead-letter replay: copies confirmed, removal from the DLQ failed (they stay, and were copied)",
					"dlq", req.DLQTopic, "partition", part, "err", err, "admin_user", user)
			}
			for _, o := range rm.Removed {
				settled[o] = true
			}
		}
		target := queueKey(bt.topic, bt.group).String()
		for i, m := range bt.src {
			ans.done(replayed{Partition: part, Offset: m.Offset, Target: target, TargetPartition: bt.partition, TargetOffset: offs[i], Settled: settled[m.Offset]})
		}
	}
	return nil
}

func (q queueAdmin) Messages(ctx context.Context, m admin.MessagesQuery) (any, error) {
	return q.b.listMessages(ctx, messagesQuery{Topic: m.Topic, Group: m.Group, Partition: m.Partition, From: m.From,
		Limit: m.Limit, IncludeSettled: m.IncludeSettled, PayloadLimit: m.PayloadLimit, States: m.States})
}

func (q queueAdmin) Replay(ctx context.Context, req admin.ReplayRequest, user string) (any, error) {
	return q.b.replayDLQ(ctx, req, user)
}

// remoteDeadLetterConcurrency bounds the dead-letter copies this broker
// sends to other brokers at once; more wait for a slot.
const remoteDeadLetterConcurrency = 32

// remoteDeadLetter is queue.Options.RemoteDeadLetter: a dead letter whose
// target queue has no partition on this broker goes to the owner of one
// of them, round-robin, over NODE_ADMIN (queues.append with DeadLetter);
// done reports whether that owner confirmed it. It returns at once.
func (b *Broker) remoteDeadLetter(target queue.Key, msg *queue.Message, done func(ok bool)) {
	m := apiMessage{BrowsedMessage: queue.BrowsedMessage{Published: msg.Published, Received: msg.Received, Payload: msg.Payload},
		ContentTag: uint8(msg.ContentType.Tag), ContentCustom: msg.ContentType.Custom}
	for _, h := range msg.Headers {
		m.Headers = append(m.Headers, apiHeader{h.Key, h.Value})
	}
	go func() {
		b.remoteDLQ <- struct{}{}
		defer func() { <-b.remoteDLQ }()
		err := b.sendDeadLetter(target, m)
		if err != nil {
			b.log.Warn("dead letter not copied to its target's owner; it is tried again later", "target", target.String(), "err", err)
		}
		done(err == nil)
	}()
}

func (b *Broker) sendDeadLetter(target queue.Key, m apiMessage) error {
	c := b.adminCluster.Load()
	if c == nil {
		return core.Errorf(core.ErrUnavailable, "not in a cluster yet")
	}
	snap := c.cl.Snapshot()
	q := snap.Queue(target.Topic, target.Group.Value)
	if q == nil {
		return core.Errorf(core.ErrNotFound, "dead-letter target %s is not declared in this cluster", target)
	}
	var live []uint32
	for _, p := range q.Parts {
		if p.Placed() && snap.Live(p.Node) {
			live = append(live, p.Ref.Partition)
		}
	}
	if len(live) == 0 {
		return core.Errorf(core.ErrUnavailable, "no partition of dead-letter target %s has a live owner", target)
	}
	n := live[c.dlqRR.Add(1)%uint64(len(live))]
	owner := q.Parts[n].Node
	ctx, cancel := context.WithTimeout(context.Background(), nodeAdminTimeout)
	defer cancel()
	var offs []uint64
	req := appendRequest{Topic: target.Topic, Group: target.Group.Value, Partition: n, Messages: []apiMessage{m}, DeadLetter: true}
	if owner == c.self.ID { // placed here since DeadLetterPartition looked
		_, err := b.appendLocal(ctx, req)
		return err
	}
	return b.askNode(ctx, c, owner, actionQueueAppend, req, &offs)
}
