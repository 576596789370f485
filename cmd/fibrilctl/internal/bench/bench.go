// Package bench is the Fibril driver behind `fibrilctl bench`: it plugs
// core/client into benchkit, which does all the measuring (the same code
// measures NATS JetStream in integration/bench/jsbench). What is here is
// only what is Fibril's: the queue declaration, the explicit partitions,
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
)

// Driver is the Fibril side of one benchkit.Run. Set its fields, then
// hand it to benchkit.Run once; it is not reusable.
type Driver struct {
	// Client holds the connection options (addresses, credentials, TLS).
	// Every producer and consumer dials its own Client, so each has its
	// own TCP connection.
	Client     client.Options
	Topic      string
	Group      string
	Partitions int // declared with the queue; ≤ 0 means 1

	cfg     benchkit.Config
	parts   []uint32
	clients []*client.Client
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

// Setup declares the queue and fixes the partition list: a standalone
// broker lists no queue in TOPOLOGY, so messages and subscriptions always
// name their partitions.
func (d *Driver) Setup(ctx context.Context, cfg benchkit.Config, _ *benchkit.Reporter) error {
	d.cfg = cfg
	if d.Topic == "" {
		return errors.New("--topic is required")
	}
	if d.Partitions <= 0 {
		d.Partitions = 1
	}
	admin, err := d.dial(ctx, "setup")
	if err != nil {
		return err
	}
	n, err := admin.DeclareQueue(ctx, client.QueueSpec{Topic: d.Topic, Group: d.Group, Partitions: uint32(d.Partitions)})
	if err != nil {
		return fmt.Errorf("declare %s: %w", d.Topic, err)
	}
	if int(n) != d.Partitions && n > 0 {
		fmt.Fprintf(cfg.Log, "warning: queue %s already has %d partitions (asked for %d); using %d\n", d.Topic, n, d.Partitions, n)
		d.Partitions = int(n)
	}
	for i := range d.Partitions {
		d.parts = append(d.parts, uint32(i))
	}
	return nil
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
	return &publisher{d: d, pub: c.Publisher(d.Topic, client.PublisherOptions{Group: d.Group})}, nil
}

type publisher struct {
	d   *Driver
	pub *client.Publisher
}

// slotMsg is a slot's message and callback, made on its first publish
// and kept in Slot.Data, so that a publish allocates nothing.
type slotMsg struct {
	part uint32
	msg  client.Message
	cb   func(uint64, error)
}

// Publish sends message i of producer p to partition (i+p) mod N.
// Confirmed: PublishAsync, whose callback reports the outcome (one at a
// time per Client, as benchkit needs); in rtt mode PublishConfirmed, so
// that the confirm is not timed through the callback goroutine. Else a
// fire-and-forget Publish, done once the frame is queued.
func (p *publisher) Publish(ctx context.Context, s *benchkit.Slot) {
	m, _ := s.Data.(*slotMsg)
	if m == nil {
		m = &slotMsg{cb: func(_ uint64, err error) { s.Done(err) }}
		m.msg = client.Message{Partition: &m.part, Payload: s.Payload}
		s.Data = m
	}
	parts := p.d.parts
	m.part = parts[(s.Seq+uint64(s.Producer))%uint64(len(parts))]
	switch {
	case p.d.cfg.Mode == benchkit.ModeRTT:
		_, err := p.pub.PublishConfirmed(ctx, m.msg)
		s.Done(err)
	case p.d.cfg.Confirmed:
		if err := p.pub.PublishAsync(ctx, m.msg, m.cb); err != nil {
			s.Done(err) // refused: no callback will come
		}
	default:
		s.Done(p.pub.Publish(ctx, m.msg))
	}
}

// Consumer dials one client, subscribes it to every partition, and feeds
// its deliveries to h from one goroutine.
func (d *Driver) Consumer(ctx context.Context, name string, h *benchkit.Handler) (benchkit.Subscription, error) {
	c, err := d.dial(ctx, name)
	if err != nil {
		return nil, err
	}
	sub, err := c.Subscribe(ctx, d.Topic, client.SubscribeOptions{
		Group: d.Group, Partitions: d.parts, Prefetch: uint32(d.cfg.Prefetch), AutoAck: d.cfg.AutoAck,
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	cs := &consumer{sub: sub}
	cs.ack.ctx, cs.stop = context.WithCancel(context.Background())
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		cs.consume(h)
	}()
	return cs, nil
}

type consumer struct {
	sub  *client.Subscription
	stop context.CancelFunc
	wg   sync.WaitGroup
	ack  acker
}

// acker acks the delivery at hand; one per consumer, reused, so that an
// ack allocates nothing.
type acker struct {
	ctx context.Context
	d   *client.Delivery
}

func (a *acker) Ack() error { return a.d.Ack(a.ctx) }

func (cs *consumer) consume(h *benchkit.Handler) {
	ctx := cs.ack.ctx
	for {
		d, err := cs.sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, client.ErrClosed) {
				return
			}
			h.ConsumeError("consume", err)
			if cs.sub.Err() != nil {
				return // every partition ended for good
			}
			continue
		}
		cs.ack.d = d
		h.Deliver(d.Payload, &cs.ack)
	}
}

// Close stops the consuming goroutine and waits for it.
func (cs *consumer) Close() {
	cs.stop()
	cs.sub.Close()
	cs.wg.Wait()
}

// Finish names the target and adds the clients' counters: broker
// misbehaviour (only when nonzero) and write batching.
func (d *Driver) Finish(res *benchkit.Result) {
	res.Addr = strings.Join(d.Client.Addrs, ",")
	res.Topic, res.Group, res.Partitions = d.Topic, d.Group, d.Partitions
	res.Coalesce = true // core/client batches its writes
	res.Target = fmt.Sprintf("%s topic %s, %d partitions", res.Addr, d.Topic, d.Partitions)
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
