// Package bench is the Fibril driver behind `fibrilctl bench`: it plugs
// core/client into benchkit, which does all the measuring (the same code
// measures NATS JetStream in integration/bench/jsbench). What is here is
// only what is Fibril's: the queue declarations, the explicit partitions,
// PublishAsync with its callback, Subscription.Next and Delivery.Ack, and
// the client's counters.
package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Driver is the Fibril side of one benchkit.Run. Set its fields, then
// hand it to benchkit.Run once; it is not reusable.
type Driver struct {
	// Client holds the connection options (addresses, credentials, TLS).
	// Every producer and consumer dials its own Client, so each has its
	// own TCP connection.
	Client client.Options
	Topic  string
	Group  string
	// Queues: how many queues, named by benchkit.QueueNames (Topic itself
	// for one, else Topic-0 … Topic-(N-1)); ≤ 0 means 1.
	Queues     int
	Partitions int // declared with each queue; ≤ 0 means 1
	// Stream: declare Plexus streams instead of queues and read them with
	// SubscribeStream from the earliest record (every consumer receives
	// every record; run with Config.FanOut).
	Stream bool
	// Keys > 0: messages carry one of Keys keys and no partition, so the
	// client routes them by the queue's partition count at the time, and
	// consumers subscribe without naming partitions, so they follow the
	// count (S-126). What a run across a repartition needs; queues only.
	Keys int

	cfg       benchkit.Config
	queues    []benchQueue
	targets   []target // every partition of every queue, queue by queue (with Keys: one per queue)
	keys      [][]byte // with Keys: the keys, k0 … k(Keys-1)
	consumers int      // Consumer calls so far
	clients   []*client.Client
}

// benchQueue is one queue of the run and its partitions.
type benchQueue struct {
	topic string
	parts []uint32
}

// target is where a message goes: a partition of d.queues[queue].
type target struct {
	queue int
	part  uint32
}

var _ benchkit.Driver = (*Driver)(nil)

func (d *Driver) dial(ctx context.Context, name string) (*client.Client, error) {
	opts := d.Client
	if opts.ClientName == "" {
		opts.ClientName = "fibrilctl-bench/" + name
	}
	c, err := client.Dial(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	d.clients = append(d.clients, c)
	return c, nil
}

// Setup declares the queues and fixes their partition lists: a
// standalone broker lists no queue in TOPOLOGY, so messages and
// subscriptions always name their partitions.
func (d *Driver) Setup(ctx context.Context, cfg benchkit.Config, _ *benchkit.Reporter) error {
	d.cfg = cfg
	if d.Topic == "" {
		return errors.New("--topic is required")
	}
	if d.Keys > 0 && d.Stream {
		return errors.New("--keys is for queues: a stream's consumers name their partitions")
	}
	for i := range d.Keys {
		d.keys = append(d.keys, fmt.Appendf(nil, "k%d", i))
	}
	d.Queues, d.Partitions = max(d.Queues, 1), max(d.Partitions, 1)
	admin, err := d.dial(ctx, "setup")
	if err != nil {
		return err
	}
	same := true
	for qi, topic := range benchkit.QueueNames(d.Topic, d.Queues) {
		n, err := d.declare(ctx, admin, topic)
		if err != nil {
			return err
		}
		q := benchQueue{topic: topic}
		for i := range n {
			q.parts = append(q.parts, uint32(i))
			if d.Keys == 0 {
				d.targets = append(d.targets, target{queue: qi, part: uint32(i)})
			}
		}
		if d.Keys > 0 {
			d.targets = append(d.targets, target{queue: qi})
		}
		d.queues = append(d.queues, q)
		same = same && n == len(d.queues[0].parts)
	}
	if same {
		d.Partitions = len(d.queues[0].parts)
	}
	return nil
}

// declare declares one queue with --partitions and returns its partition
// count. A queue that already exists with another count refuses it: a
// standalone broker answers 409 (for example to a queue a publish
// auto-created with one partition, S-21), a cluster answers with the
// count it has. Either way the queue is used as it is, with a warning.
func (d *Driver) declare(ctx context.Context, admin *client.Client, topic string) (int, error) {
	if d.Stream {
		n, err := admin.DeclareStream(ctx, client.StreamSpec{Topic: topic, Partitions: uint32(d.Partitions)})
		if err != nil {
			return 0, fmt.Errorf("declare stream %s: %w", topic, err)
		}
		if int(n) != d.Partitions {
			fmt.Fprintf(d.cfg.Log, "warning: stream %s already has %d partitions (asked for %d); using %d\n", topic, n, d.Partitions, n)
		}
		return int(n), nil
	}
	spec := client.QueueSpec{Topic: topic, Group: d.Group, Partitions: uint32(d.Partitions)}
	n, err := admin.DeclareQueue(ctx, spec)
	if be := (*client.Error)(nil); errors.As(err, &be) && be.Code == wire.CodeConflict {
		spec.Partitions = 0 // no count: an existing queue keeps its own
		n, err = admin.DeclareQueue(ctx, spec)
	}
	if err != nil {
		return 0, fmt.Errorf("declare %s: %w", topic, err)
	}
	if n == 0 {
		return d.Partitions, nil
	}
	if int(n) != d.Partitions {
		fmt.Fprintf(d.cfg.Log, "warning: queue %s already has %d partitions (asked for %d); using %d\n", topic, n, d.Partitions, n)
	}
	return int(n), nil
}

// Pipelined: one goroutine per producer keeps --window PublishAsync calls
// in flight, each slot handed back by the confirm callback.
func (d *Driver) Pipelined() bool { return true }

// Producer dials one publishing client.
func (d *Driver) Producer(ctx context.Context, name string) (benchkit.Publisher, error) {
	c, err := d.dial(ctx, name)
	if err != nil {
		return nil, err
	}
	pubs := make([]*client.Publisher, len(d.queues))
	for i, q := range d.queues {
		pubs[i] = c.Publisher(q.topic, client.PublisherOptions{Group: d.Group})
	}
	return &publisher{d: d, c: c, pubs: pubs}, nil
}

type publisher struct {
	d    *Driver
	c    *client.Client
	pubs []*client.Publisher // one per queue, on the producer's client
}

// slotMsg is a slot's message and callback, made on its first publish
// and kept in Slot.Data, so that a publish allocates nothing.
type slotMsg struct {
	part   uint32
	msg    client.Message
	cb     func(uint64, error)
	fences uint64 // the client's Stats().Fenced when the publish was made
}

// Publish sends message i of producer p to target (i+p) mod N of the N
// partitions of all the queues (benchkit.TargetIndex). Confirmed: PublishAsync, whose callback reports the outcome (one at a
// time per Client, as benchkit needs); in rtt mode PublishConfirmed, so
// that the confirm is not timed through the callback goroutine. Else a
// fire-and-forget Publish, done once the frame is queued.
func (p *publisher) Publish(ctx context.Context, s *benchkit.Slot) {
	m, _ := s.Data.(*slotMsg)
	if m == nil {
		m = &slotMsg{}
		m.cb = func(_ uint64, err error) {
			// The client met a fence while this publish was in flight: it
			// is one of those re-routed, or waited beside them.
			s.Fenced = p.c.Stats().Fenced != m.fences
			s.Done(err)
		}
		m.msg = client.Message{Partition: &m.part, Payload: s.Payload}
		if p.d.Keys > 0 {
			m.msg.Partition = nil
		}
		s.Data = m
	}
	t := p.d.targets[benchkit.TargetIndex(s.Producer, s.Seq, len(p.d.targets))]
	m.part = t.part
	if p.d.Keys > 0 {
		m.msg.Key = p.d.keys[(s.Seq+uint64(s.Producer))%uint64(p.d.Keys)]
	}
	pub := p.pubs[t.queue]
	switch {
	case p.d.cfg.Mode == benchkit.ModeRTT:
		_, err := pub.PublishConfirmed(ctx, m.msg)
		s.Done(err)
	case p.d.cfg.Confirmed:
		m.fences = p.c.Stats().Fenced
		if err := pub.PublishAsync(ctx, m.msg, m.cb); err != nil {
			s.Done(err) // refused: no callback will come
		}
	default:
		s.Done(pub.Publish(ctx, m.msg))
	}
}

// Consumer dials one client and subscribes it to every partition of its
// queues (benchkit.ConsumerQueues: all of them when there is one), one
// goroutine per queue feeding h, one delivery at a time.
func (d *Driver) Consumer(ctx context.Context, name string, h *benchkit.Handler) (benchkit.Subscription, error) {
	idx := d.consumers
	d.consumers++
	c, err := d.dial(ctx, name)
	if err != nil {
		return nil, err
	}
	cs := &consumer{}
	cs.ctx, cs.stop = context.WithCancel(context.Background())
	for _, qi := range benchkit.ConsumerQueues(idx, max(d.cfg.Consumers, 1), len(d.queues)) {
		q := d.queues[qi]
		var sub *client.Subscription
		if d.Stream {
			sub, err = c.SubscribeStream(ctx, q.topic, client.StreamOptions{
				Partitions: q.parts, Start: client.StartEarliest(), Prefetch: uint32(d.cfg.Prefetch), AutoAck: d.cfg.AutoAck,
			})
		} else {
			parts := q.parts
			if d.Keys > 0 {
				parts = nil // every partition, also those a repartition adds
			}
			sub, err = c.Subscribe(ctx, q.topic, client.SubscribeOptions{
				Group: d.Group, Partitions: parts, Prefetch: uint32(d.cfg.Prefetch), AutoAck: d.cfg.AutoAck,
			})
		}
		if err != nil {
			cs.Close()
			return nil, fmt.Errorf("subscribe %s: %w", q.topic, err)
		}
		cs.subs = append(cs.subs, sub)
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			cs.consume(sub, h)
		}()
	}
	return cs, nil
}

type consumer struct {
	subs []*client.Subscription
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	mu   sync.Mutex // one h.Deliver at a time (benchkit.Handler)
}

// acker acks the delivery at hand; one per consumer, reused, so that an
// ack allocates nothing.
type acker struct {
	ctx context.Context
	d   *client.Delivery
}

func (a *acker) Ack() error { return a.d.Ack(a.ctx) }

// consume feeds the deliveries of one queue's subscription to h.
func (cs *consumer) consume(sub *client.Subscription, h *benchkit.Handler) {
	ctx := cs.ctx
	ack := &acker{ctx: ctx}
	for {
		d, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, client.ErrClosed) {
				return
			}
			h.ConsumeError("consume", err)
			if sub.Err() != nil {
				return // every partition ended for good
			}
			continue
		}
		ack.d = d
		cs.mu.Lock()
		h.Deliver(d.Payload, ack)
		cs.mu.Unlock()
	}
}

// Close stops the consuming goroutines and waits for them.
func (cs *consumer) Close() {
	cs.stop()
	for _, sub := range cs.subs {
		sub.Close()
	}
	cs.wg.Wait()
}

// Finish names the target and adds the clients' counters: broker
// misbehaviour (only when nonzero) and write batching.
func (d *Driver) Finish(res *benchkit.Result) {
	res.Addr = strings.Join(d.Client.Addrs, ",")
	res.Topic, res.Group, res.Queues, res.Partitions = d.Topic, d.Group, d.Queues, d.Partitions
	res.Coalesce = true // core/client batches its writes
	res.Target = fmt.Sprintf("%s topic %s, %d partitions", res.Addr, d.Topic, d.Partitions)
	if n := len(d.queues); n > 1 {
		res.Target = fmt.Sprintf("%s topics %s … %s (%d queues), %d partitions in all",
			res.Addr, d.queues[0].topic, d.queues[n-1].topic, n, len(d.targets))
	}
	stats := map[string]uint64{}
	add := func(k string, v uint64) {
		if v > 0 {
			stats[k] += v
		}
	}
	for _, c := range d.clients {
		s := c.Stats()
		add("prefetch_violations", s.PrefetchViolations)
		add("protocol_violations", s.ProtocolViolations)
		add("uncorrelated_errors", s.UncorrelatedErrors)
		add("unmatched_replies", s.UnmatchedReplies)
		add("unknown_sub_deliveries", s.UnknownSubDeliveries)
		add("dropped_deliveries", s.DroppedDeliveries)
		add("stale_settles", s.StaleSettles)
		add("reconnects", s.Reconnects)
		add("fenced", s.Fenced)
		add("acks_merged", s.AcksMerged)
		// Write batching inside the client: frames asked for (each merged
		// ACK counted), the write(2) calls that carried them, and bytes.
		stats["coalesced_frames"] += s.FramesQueued + s.AcksMerged
		stats["coalesced_syscalls"] += s.WriteCalls
		stats["coalesced_bytes"] += s.BytesWritten
	}
	if len(stats) > 0 {
		res.ClientStats = stats
	}
}

// Close closes every client the driver dialed.
func (d *Driver) Close() {
	for _, c := range d.clients {
		c.Close()
	}
}
