package broker

// The admin API's queues and streams (docs/admin.md#queues): what is
// declared, where each partition lives and what it holds, and the purge.
//
// Live numbers (depths, consumers, rates) exist only on a partition's
// owner, so the broker that answers asks each owner for its own
// partitions over the inter-broker transport (NODE_ADMIN,
// docs/protocol.md#node-admin) instead of reading a replicated view:
// publishing depths through coordination would cost a write per change,
// and the peer session reaches private owners that an operator's admin
// client cannot.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/peer"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// Node admin actions (NODE_ADMIN).
const (
	actionQueueStats = "queues.stats" // args {topic}: this node's open partitions (of topic)
	actionQueuePurge = "queues.purge" // args {topic, group}: purge this node's partitions of the queue
)

// localPartition is one partition's live numbers as its owner reports
// them, rates included.
type localPartition struct {
	Kind      string                      `json:"kind"`
	Topic     string                      `json:"topic"`
	Group     string                      `json:"group,omitempty"`
	Partition uint32                      `json:"partition"`
	Queue     *queue.PartitionStats       `json:"queue,omitempty"`
	Stream    *queue.StreamPartitionStats `json:"stream,omitempty"`
	// PublishRate and DeliverRate are per second, over the interval
	// between two reads at least rateWindow apart (0 on the first read).
	PublishRate float64 `json:"publish_rate"`
	DeliverRate float64 `json:"deliver_rate"`
	// Followers is the owner's view of its followers' copies.
	Followers []followerState `json:"followers,omitempty"`
}

// followerState is one follower as the owner sees it.
type followerState struct {
	Node       core.NodeID `json:"node"`
	Live       bool        `json:"live"`
	InSync     bool        `json:"in_sync"`
	LagRecords *uint64     `json:"lag_records,omitempty"` // once it reported durable progress
	LagBytes   *uint64     `json:"lag_bytes,omitempty"`
}

// rateWindow is the shortest interval a rate is computed over.
const rateWindow = time.Second

// rateBook turns the partitions' cumulative counters into rates: each
// read at least rateWindow after the last sample computes new rates and
// takes a new sample; reads in between see the last rates.
type rateBook struct {
	mu sync.Mutex
	m  map[rateKey]*rateSample
}

type rateKey struct {
	kind, topic, group string
	partition          uint32
}

type rateSample struct {
	at                 time.Time
	published, deliver uint64
	pubRate, delRate   float64
	seen               time.Time // last read (sweep drops the long unread)
}

// rateForget is how long a partition's sample is kept without being read
// (closed, moved away, deleted, or nobody looks).
const rateForget = 5 * time.Minute

func (rb *rateBook) rates(k rateKey, now time.Time, published, delivered uint64) (pub, del float64) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.m == nil {
		rb.m = map[rateKey]*rateSample{}
	}
	s := rb.m[k]
	if s == nil || published < s.published || delivered < s.deliver { // new, or reopened (counters restart)
		rb.m[k] = &rateSample{at: now, published: published, deliver: delivered, seen: now}
		return 0, 0
	}
	s.seen = now
	if dt := now.Sub(s.at); dt >= rateWindow {
		s.pubRate = float64(published-s.published) / dt.Seconds()
		s.delRate = float64(delivered-s.deliver) / dt.Seconds()
		s.at, s.published, s.deliver = now, published, delivered
	}
	return s.pubRate, s.delRate
}

// sweep drops the samples not read for rateForget, so the book does not
// grow with partitions that closed, moved away or were deleted.
func (rb *rateBook) sweep(now time.Time) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	for k, s := range rb.m {
		if now.Sub(s.seen) > rateForget {
			delete(rb.m, k)
		}
	}
}

// localPartitions reports the partitions this broker has open (of topic,
// or all when topic is "").
func (b *Broker) localPartitions(topic string) []localPartition {
	qm := b.readyQueues()
	if qm == nil {
		return nil
	}
	now := time.Now()
	c := b.adminCluster.Load()
	var snap *cluster.Snapshot
	if c != nil {
		snap = c.cl.Snapshot()
	}
	stats := qm.LocalStats(topic)
	out := make([]localPartition, 0, len(stats))
	for _, s := range stats {
		lp := localPartition{Kind: s.Kind.String(), Topic: s.Topic, Group: s.Group.Value, Partition: s.Partition, Queue: s.Queue, Stream: s.Stream}
		var pub, del uint64
		if s.Queue != nil {
			pub, del = s.Queue.Published, s.Queue.Delivered
		} else {
			pub, del = s.Stream.Published, s.Stream.Delivered
		}
		lp.PublishRate, lp.DeliverRate = b.rates.rates(rateKey{lp.Kind, lp.Topic, lp.Group, lp.Partition}, now, pub, del)
		if snap != nil {
			ref := core.PartitionRef{Topic: s.Topic, Group: s.Group.Value, Partition: s.Partition}
			if p, ok := snap.Partition(ref); ok && p.Node == c.self.ID {
				for _, f := range p.Followers {
					fs := followerState{Node: f, Live: snap.Live(f), InSync: slices.Contains(p.InSync, f)}
					if _, lag, ok := c.lag(ref, f); ok {
						fs.LagRecords, fs.LagBytes = &lag.records, &lag.bytes
					}
					lp.Followers = append(lp.Followers, fs)
				}
			}
		}
		out = append(out, lp)
	}
	if topic == "" {
		b.rates.sweep(now)
	}
	return out
}

// readyQueues is the queue manager once the broker serves (nil while it
// recovers: the admin listener starts first).
func (b *Broker) readyQueues() *queue.Manager {
	return b.adminQueues.Load()
}

// nodeAdmin serves a peer's NODE_ADMIN.
// from is the asking node ("" when this broker runs an action for its
// own admin API).
func (b *Broker) nodeAdmin(ctx context.Context, from, action string, args []byte) ([]byte, error) {
	decode := func(v any) error {
		if err := json.Unmarshal(args, v); err != nil {
			return core.Errorf(core.ErrBadRequest, "%s: malformed arguments: %v", action, err)
		}
		return nil
	}
	var out any
	var err error
	switch action {
	case actionQueueStats, actionQueuePurge:
		var req struct {
			Topic string `json:"topic"`
			Group string `json:"group"`
			User  string `json:"user"`
		}
		if err := decode(&req); err != nil {
			return nil, err
		}
		if action == actionQueueStats {
			out = b.localPartitions(req.Topic)
			break
		}
		user := req.User
		if from != "" {
			user = fmt.Sprintf("%s via node %s", req.User, from)
		}
		out, err = b.purgeLocal(req.Topic, req.Group, user)
	case actionMessagesList:
		var q messagesQuery
		if err := decode(&q); err != nil {
			return nil, err
		}
		out, err = b.listLocal(q)
	case actionMessagesRemove:
		var req removeRequest
		if err := decode(&req); err != nil {
			return nil, err
		}
		var removed []uint64
		removed, err = b.removeLocal(req.Topic, req.Group, req.Partition, req.Offsets)
		out = removeAnswer{Removed: removed}
	case actionQueueAppend:
		var req appendRequest
		if err := decode(&req); err != nil {
			return nil, err
		}
		out, err = b.appendLocal(ctx, req)
	default:
		return nil, core.Errorf(core.ErrBadRequest, "unknown node admin action %q", action)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// nodeAdminTimeout bounds one NODE_ADMIN round trip: an owner that does
// not answer within it is reported as unreachable, not waited for.
const nodeAdminTimeout = 10 * time.Second

// askNode runs a NODE_ADMIN action on a peer and decodes its result into
// out. The peer session is kept for the next request (nodeConns).
func (b *Broker) askNode(ctx context.Context, c *coordinated, node core.NodeID, action string, args, out any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	conn, err := b.nodeConns.get(ctx, b, c, node)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, nodeAdminTimeout)
	defer cancel()
	f, err := conn.Do(ctx, wire.OpNodeAdmin, &wire.NodeAdmin{Action: action, Args: raw})
	if err != nil {
		b.nodeConns.drop(node, conn)
		return core.Errorf(core.ErrUnavailable, "node %s: %v", node, err)
	}
	switch f.Op {
	case wire.OpNodeAdminOK:
		var ok wire.NodeAdminOK
		if err := ok.Decode(f.Body); err != nil {
			return fmt.Errorf("node %s: malformed NODE_ADMIN_OK: %w", node, err)
		}
		return json.Unmarshal(ok.Result, out)
	case wire.OpError:
		var eb wire.ErrorBody
		_ = eb.Decode(f.Body)
		sentinel := core.Sentinel(eb.Code)
		if sentinel == nil {
			sentinel = core.ErrInternal
		}
		return fmt.Errorf("node %s: %w", node, core.Errorf(sentinel, "%s", eb.Message))
	}
	return fmt.Errorf("node %s answered NODE_ADMIN with %s", node, f.Op)
}

// nodeConnPool keeps one @node session per peer for NODE_ADMIN, so a
// dashboard polling every second, or a stream of dead letters to another
// broker's DLQ partition, does not open a stream and log in each time.
// A session that ended is replaced on the next request.
type nodeConnPool struct {
	mu    sync.Mutex
	conns map[core.NodeID]*client.Conn
}

// nodeAdminHeartbeat keeps a pooled session alive while it is idle.
const nodeAdminHeartbeat = 5 * time.Second

func (p *nodeConnPool) get(ctx context.Context, b *Broker, c *coordinated, node core.NodeID) (*client.Conn, error) {
	p.mu.Lock()
	conn := p.conns[node]
	p.mu.Unlock()
	if conn != nil {
		select {
		case <-conn.Done():
			p.drop(node, conn)
		default:
			return conn, nil
		}
	}
	m := c.cl.Snapshot().Members[node]
	if m == nil || !m.Live {
		return nil, core.Errorf(core.ErrUnavailable, "node %s is not live", node)
	}
	if b.links == nil {
		return nil, core.Errorf(core.ErrUnavailable, "no inter-broker transport")
	}
	timeout := time.Duration(b.settings.Current().Routing.UpstreamConnectTimeoutMS) * time.Millisecond
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	link, err := b.links.Get(dctx, core.Peer{ID: node, Addr: m.Info.PeerAddr})
	if err != nil {
		return nil, core.Errorf(core.ErrUnavailable, "reach node %s: %v", node, err)
	}
	conn, _, err = peer.Login{Self: c.self.ID, Secret: string(b.secret)}.Dial(dctx, link, nodeAdminHeartbeat, nil)
	if err != nil {
		return nil, core.Errorf(core.ErrUnavailable, "log in to node %s: %v", node, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[core.NodeID]*client.Conn{}
	}
	if old := p.conns[node]; old != nil { // another request dialled meanwhile: keep one
		_ = conn.Close()
		return old, nil
	}
	p.conns[node] = conn
	return conn, nil
}

// drop forgets conn (when it is still node's) and closes it.
func (p *nodeConnPool) drop(node core.NodeID, conn *client.Conn) {
	p.mu.Lock()
	if p.conns[node] == conn {
		delete(p.conns, node)
	}
	p.mu.Unlock()
	_ = conn.Close()
}

// closeAll ends every pooled session (shutdown).
func (p *nodeConnPool) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// queueView is one queue or stream in the API's answer.
type queueView struct {
	Kind           string `json:"kind"`
	Topic          string `json:"topic"`
	Group          string `json:"group,omitempty"`
	PartitionCount uint32 `json:"partition_count"`
	// Queues.
	DLQ          *dlqView `json:"dlq,omitempty"`
	MaxRetries   *uint32  `json:"max_retries,omitempty"`
	DefaultTTLMS *uint64  `json:"default_ttl_ms,omitempty"`
	// Limit is the queue's limit as this broker's engine applies it
	// (limits.queues; absent: none).
	Limit *limitView `json:"limit,omitempty"`
	// Streams.
	Durability string         `json:"durability,omitempty"`
	Retention  *retentionView `json:"retention,omitempty"`

	Totals     totalsView      `json:"totals"`
	Partitions []partitionView `json:"partitions"`
}

type limitView struct {
	MaxMessagesPerPartition uint64 `json:"max_messages_per_partition"`
	Overflow                string `json:"overflow"`
}

type dlqView struct {
	Policy string `json:"policy"` // discard | broker_dlq | named
	Topic  string `json:"topic,omitempty"`
	Group  string `json:"group,omitempty"`
}

type retentionView struct {
	MaxAgeMS   *uint64 `json:"max_age_ms,omitempty"`
	MaxBytes   *uint64 `json:"max_bytes,omitempty"`
	MaxRecords *uint64 `json:"max_records,omitempty"`
}

// totalsView sums the partitions that reported.
type totalsView struct {
	Ready        uint64  `json:"ready"`
	Inflight     uint64  `json:"inflight"`
	Delayed      uint64  `json:"delayed"`
	DeadLettered uint64  `json:"dead_lettered"`
	Records      uint64  `json:"records"` // streams: retained records
	Consumers    int     `json:"consumers"`
	Bytes        int64   `json:"bytes"`
	PublishRate  float64 `json:"publish_rate"`
	DeliverRate  float64 `json:"deliver_rate"`
	// Unreported counts partitions without numbers (see their
	// "unavailable"): the totals leave them out.
	Unreported int `json:"unreported"`
}

// Reasons a partition has no numbers that mean it holds nothing.
const (
	unavailableNotPlaced = "not placed yet"
	unavailableNotLoaded = "not loaded on its owner"
)

type partitionView struct {
	Partition uint32      `json:"partition"`
	Owner     core.NodeID `json:"owner,omitempty"`
	OwnerLive bool        `json:"owner_live"`
	// Unavailable says why there are no numbers: the owner is down, not
	// placed, unreachable, or has not loaded the partition.
	Unavailable string `json:"unavailable,omitempty"`
	*localPartition
}

// queuesView is GET /admin/api/queues (kind "" = queues and streams,
// "stream" = streams only) and, with topic set, one topic's entries.
func (b *Broker) queuesView(ctx context.Context, kind, topic, group string, oneQueue bool) (any, error) {
	views, err := b.collectViews(ctx, kind, topic, group, oneQueue)
	if err != nil {
		return nil, err
	}
	return map[string]any{"queues": views}, nil
}

// collectViews is queuesView's list, sorted by topic then group.
func (b *Broker) collectViews(ctx context.Context, kind, topic, group string, oneQueue bool) ([]queueView, error) {
	var views []queueView
	c := b.adminCluster.Load()
	if c == nil {
		qm := b.readyQueues()
		if qm == nil {
			return nil, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
		}
		for _, q := range qm.Queues() {
			views = append(views, queueEntry(q))
		}
		for _, s := range qm.Streams() {
			views = append(views, streamEntry(s))
		}
	} else {
		snap := c.cl.Snapshot()
		for _, q := range snap.Queues {
			v := queueEntry(q.Info)
			for _, p := range q.Parts {
				v.Partitions[p.Ref.Partition].Owner = p.Node
			}
			views = append(views, v)
		}
		for _, s := range snap.Streams {
			v := streamEntry(s.Info)
			for _, p := range s.Parts {
				v.Partitions[p.Ref.Partition].Owner = p.Node
			}
			views = append(views, v)
		}
	}
	views = filterViews(views, kind, topic, group, oneQueue)
	if qm := b.readyQueues(); qm != nil {
		for i := range views {
			if l, ok := qm.LimitOf(queueKey(views[i].Topic, views[i].Group)); ok && views[i].Kind == "queue" {
				views[i].Limit = &limitView{MaxMessagesPerPartition: l.MaxMessages, Overflow: l.Overflow.String()}
			}
		}
	}
	if oneQueue && len(views) == 0 {
		what := "queue or stream " + topic
		if group != "" {
			what = fmt.Sprintf("queue %s (group %s)", topic, group)
		}
		return nil, core.Errorf(core.ErrNotFound, "%s is not declared", what)
	}
	b.fillStats(ctx, c, views, topic)
	sort.Slice(views, func(i, j int) bool {
		if views[i].Topic != views[j].Topic {
			return views[i].Topic < views[j].Topic
		}
		return views[i].Group < views[j].Group
	})
	return views, nil
}

func filterViews(views []queueView, kind, topic, group string, oneQueue bool) []queueView {
	out := views[:0]
	for _, v := range views {
		if kind != "" && v.Kind != kind {
			continue
		}
		if topic != "" && v.Topic != topic {
			continue
		}
		if oneQueue && group != "" && v.Group != group {
			continue
		}
		out = append(out, v)
	}
	return out
}

func queueEntry(q queue.QueueInfo) queueView {
	v := queueView{Kind: "queue", Topic: q.Topic, Group: q.Group.Value, PartitionCount: q.PartitionCount,
		MaxRetries: &q.MaxRetries, Partitions: make([]partitionView, q.PartitionCount)}
	if d, ok := q.DLQ.Get(); ok {
		v.DLQ = &dlqView{Policy: d.Kind.String(), Topic: d.Topic, Group: d.Group.Value}
	}
	if ttl, ok := q.DefaultTTLMillis.Get(); ok {
		v.DefaultTTLMS = &ttl
	}
	for i := range v.Partitions {
		v.Partitions[i].Partition = uint32(i)
	}
	return v
}

func streamEntry(s queue.StreamInfo) queueView {
	v := queueView{Kind: "stream", Topic: s.Topic, PartitionCount: s.PartitionCount, Durability: durabilityName(s.Durability),
		Retention: &retentionView{}, Partitions: make([]partitionView, s.PartitionCount)}
	if x, ok := s.Retention.MaxAgeMillis.Get(); ok {
		v.Retention.MaxAgeMS = &x
	}
	if x, ok := s.Retention.MaxBytes.Get(); ok {
		v.Retention.MaxBytes = &x
	}
	if x, ok := s.Retention.MaxRecords.Get(); ok {
		v.Retention.MaxRecords = &x
	}
	for i := range v.Partitions {
		v.Partitions[i].Partition = uint32(i)
	}
	return v
}

func durabilityName(d wire.Durability) string {
	switch d {
	case wire.DurabilityEphemeral:
		return "ephemeral"
	case wire.DurabilitySpeculative:
		return "speculative"
	}
	return "durable"
}

// fillStats puts every owner's numbers into views: this broker's own
// partitions directly, every other live owner's with one NODE_ADMIN each
// (in parallel).
func (b *Broker) fillStats(ctx context.Context, c *coordinated, views []queueView, topic string) {
	type slot struct{ v, p int }
	where := map[rateKey]slot{}
	owners := map[core.NodeID]bool{}
	var snap *cluster.Snapshot
	var self core.NodeID
	if c != nil {
		snap, self = c.cl.Snapshot(), c.self.ID
	}
	for i := range views {
		for j := range views[i].Partitions {
			pv := &views[i].Partitions[j]
			where[rateKey{views[i].Kind, views[i].Topic, views[i].Group, pv.Partition}] = slot{i, j}
			switch {
			case c == nil:
				pv.OwnerLive = true
			case pv.Owner == "":
				pv.Unavailable = unavailableNotPlaced
			case !snap.Live(pv.Owner):
				pv.Unavailable = "owner " + string(pv.Owner) + " is down"
			default:
				pv.OwnerLive = true
				owners[pv.Owner] = true
			}
		}
	}
	put := func(lps []localPartition) {
		for i := range lps {
			lp := &lps[i]
			if s, ok := where[rateKey{lp.Kind, lp.Topic, lp.Group, lp.Partition}]; ok {
				views[s.v].Partitions[s.p].localPartition = lp
			}
		}
	}
	if c == nil || owners[self] {
		put(b.localPartitions(topic))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := map[core.NodeID]error{}
	for node := range owners {
		if node == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lps []localPartition
			err := b.askNode(ctx, c, node, actionQueueStats, map[string]string{"topic": topic}, &lps)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[node] = err
				return
			}
			put(lps)
		}()
	}
	wg.Wait()
	for i := range views {
		t := &views[i].Totals
		for j := range views[i].Partitions {
			pv := &views[i].Partitions[j]
			if pv.localPartition == nil {
				if pv.Unavailable == "" {
					if err := failed[pv.Owner]; err != nil {
						pv.Unavailable = err.Error()
					} else {
						pv.Unavailable = unavailableNotLoaded
					}
				}
				t.Unreported++
				continue
			}
			t.PublishRate += pv.PublishRate
			t.DeliverRate += pv.DeliverRate
			if q := pv.Queue; q != nil {
				t.Ready += q.Ready
				t.Inflight += q.Inflight
				t.Delayed += q.Delayed
				t.DeadLettered += q.DeadLettered
				t.Consumers += len(q.Consumers)
				t.Bytes += q.Bytes
			}
			if s := pv.Stream; s != nil {
				t.Records += s.Next - s.First
				t.Consumers += s.Subscribers
				t.Bytes += s.Bytes
			}
		}
	}
}

// purgeQueue is POST /admin/api/queues/purge: every partition of the
// queue is purged by its owner (this broker, or a peer over NODE_ADMIN).
// The answer counts the purged messages per partition; a partition
// whose owner could not be reached is listed with the error, and the
// rest are still purged.
func (b *Broker) purgeQueue(ctx context.Context, topic, group, user string) (any, error) {
	type partResult struct {
		Partition uint32      `json:"partition"`
		Owner     core.NodeID `json:"owner,omitempty"`
		Purged    uint64      `json:"purged"`
		Error     string      `json:"error,omitempty"`
	}
	c := b.adminCluster.Load()
	if c == nil {
		qm := b.readyQueues()
		if qm == nil {
			return nil, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
		}
		if k, ok := qm.Kind(topic); ok && k == queue.KindStream {
			return nil, core.Errorf(core.ErrBadRequest, "%s is a stream: a stream is not purged (its retention drops records)", topic)
		}
		if !qm.HasQueue(queueKey(topic, group)) {
			return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", queueKey(topic, group))
		}
		counts, err := b.purgeLocal(topic, group, user)
		if err != nil {
			return nil, err
		}
		var out []partResult
		var total uint64
		for p, n := range counts {
			out = append(out, partResult{Partition: p, Purged: n})
			total += n
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
		return map[string]any{"topic": topic, "group": group, "purged": total, "partitions": out}, nil
	}
	snap := c.cl.Snapshot()
	q := snap.Queue(topic, group)
	if q == nil {
		if snap.Stream(topic) != nil {
			return nil, core.Errorf(core.ErrBadRequest, "%s is a stream: a stream is not purged (its retention drops records)", topic)
		}
		return nil, core.Errorf(core.ErrNotFound, "queue %s is not declared", queueKey(topic, group))
	}
	byOwner := map[core.NodeID][]uint32{}
	out := make([]partResult, len(q.Parts))
	for i, p := range q.Parts {
		out[i] = partResult{Partition: p.Ref.Partition, Owner: p.Node}
		switch {
		case p.Node == "":
			out[i].Error = "not placed yet (nothing to purge)"
		case !snap.Live(p.Node):
			out[i].Error = "owner is down: not purged"
		default:
			byOwner[p.Node] = append(byOwner[p.Node], p.Ref.Partition)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, parts := range byOwner {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var counts map[uint32]uint64
			var err error
			if node == c.self.ID {
				counts, err = b.purgeLocal(topic, group, user)
			} else {
				err = b.askNode(ctx, c, node, actionQueuePurge, map[string]string{"topic": topic, "group": group, "user": user}, &counts)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range parts {
				if err != nil {
					out[p].Error = err.Error()
					continue
				}
				out[p].Purged = counts[p]
			}
		}()
	}
	wg.Wait()
	var total uint64
	failed := 0
	for _, r := range out {
		total += r.Purged
		if r.Error != "" && r.Owner != "" {
			failed++
		}
	}
	return map[string]any{"topic": topic, "group": group, "purged": total, "partitions": out, "failed_partitions": failed}, nil
}

// purgeLocal purges the queue's partitions this broker has open (in a
// cluster: the ones it owns) and logs it for the audit trail.
func (b *Broker) purgeLocal(topic, group, user string) (map[uint32]uint64, error) {
	qm := b.readyQueues()
	if qm == nil {
		return nil, core.Errorf(core.ErrUnavailable, "the broker is still recovering")
	}
	key := queueKey(topic, group)
	owned := func(uint32) bool { return true }
	if c := b.adminCluster.Load(); c != nil {
		if !qm.HasQueue(key) {
			return map[uint32]uint64{}, nil // declared in the catalog, nothing loaded here
		}
		// Only the owner's copy is purged; followers get the settlements
		// through replication.
		snap := c.cl.Snapshot()
		owned = func(n uint32) bool {
			p, ok := snap.Partition(core.PartitionRef{Topic: topic, Group: group, Partition: n})
			return ok && p.Node == c.self.ID
		}
	}
	counts, err := qm.PurgeQueue(key, owned)
	var total uint64
	for _, n := range counts {
		total += n
	}
	b.log.Info("queue purged", "queue", key.String(), "purged", total, "partitions", len(counts), "admin_user", user, "err", err)
	return counts, err
}

// queueAdmin is the broker as admin.QueueAdmin.
type queueAdmin struct{ b *Broker }

func (q queueAdmin) List(ctx context.Context, kind, topic, group string) (any, error) {
	return q.b.queuesView(ctx, kind, topic, group, topic != "")
}

func (q queueAdmin) Purge(ctx context.Context, topic, group, user string) (any, error) {
	return q.b.purgeQueue(ctx, topic, group, user)
}

func (q queueAdmin) Delete(ctx context.Context, kind, topic, group string, force bool, user string) (any, error) {
	return q.b.deleteTopic(ctx, kind, topic, group, force, user)
}

func (q queueAdmin) Repartition(ctx context.Context, topic, group string, count uint32, user string) (any, error) {
	return q.b.repartition(ctx, topic, group, count, user)
}
