package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// durableName is the durable pull consumer every bench consumer shares
// (competing consumers, as the members of one Fibril queue group).
const durableName = "jsbench"

// driver is the JetStream side of one benchkit.Run; benchkit measures.
// Set the exported fields, then hand it to benchkit.Run once.
type driver struct {
	URL        string
	Stream     string
	Subject    string
	Retention  string // limits | workqueue
	Replicas   int    // the stream's replicas (1 on a single server; up to the cluster's size)
	KeepStream bool   // leave the stream on the server at the end

	cfg     benchkit.Config
	rep     *benchkit.Reporter
	js      jetstream.JetStream // of the setup connection
	created bool                // the stream exists: Close deletes it
	conns   []*nats.Conn
	info    streamInfo

	consumers int // Consumer calls so far (fan-out: which durable consumer is next)
}

// streamInfo is what jsbench adds to benchkit's Result in its JSON.
type streamInfo struct {
	System        string `json:"system"` // "jetstream"
	ServerVersion string `json:"server_version"`
	Stream        string `json:"stream"`
	Storage       string `json:"storage"`
	Retention     string `json:"retention"`
	Replicas      int    `json:"replicas"`
	StreamLeader  string `json:"stream_leader,omitempty"` // the server that led the stream at the end (clustered)
	ConsumerKind  string `json:"consumer_kind,omitempty"`
	StreamMsgs    uint64 `json:"stream_msgs"` // messages in the stream at the end
}

// result is jsbench's JSON: the shared fields, then the JetStream ones.
type result struct {
	*benchkit.Result
	streamInfo
}

var _ benchkit.Driver = (*driver)(nil)

// connect opens one connection; every producer and consumer has its own,
// as in `fibrilctl bench`.
func (d *driver) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(d.URL,
		nats.Name("jsbench/"+name),
		nats.Timeout(10*time.Second),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			d.rep.ConsumeError("async", err)
		}),
	)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, nc)
	return nc, nil
}

// Setup creates one fresh stream for the run (file storage, --replicas
// replicas (1 by default), discard old, and no limit that could drop or
// refuse a message), and the durable consumer.
func (d *driver) Setup(ctx context.Context, cfg benchkit.Config, rep *benchkit.Reporter) error {
	d.cfg, d.rep = cfg, rep
	if d.Replicas < 1 {
		d.Replicas = 1
	}
	d.info = streamInfo{System: "jetstream", Storage: "file", Retention: d.Retention, Replicas: d.Replicas, Stream: d.Stream}
	nc, err := d.connect("setup")
	if err != nil {
		return fmt.Errorf("connect %s: %w", d.URL, err)
	}
	d.info.ServerVersion = "nats-server " + nc.ConnectedServerVersion()
	if d.js, err = jetstream.New(nc); err != nil {
		return err
	}
	retention := jetstream.LimitsPolicy
	if d.Retention == "workqueue" {
		retention = jetstream.WorkQueuePolicy
	}
	_, err = d.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              d.Stream,
		Subjects:          []string{d.Subject},
		Storage:           jetstream.FileStorage,
		Replicas:          d.Replicas,
		Retention:         retention,
		Discard:           jetstream.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        -1,
		MaxConsumers:      -1,
	})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", d.Stream, err)
	}
	d.created = true
	if cfg.Consumers == 0 {
		return nil
	}
	// A durable pull consumer with explicit acks. MaxAckPending is the
	// total of the consumers' prefetch, as a Fibril subscription's
	// prefetch bounds its unsettled deliveries.
	ack := jetstream.AckExplicitPolicy
	if cfg.AutoAck {
		ack = jetstream.AckNonePolicy
	}
	if cfg.FanOut {
		// Fan-out: a durable consumer of its own per bench consumer, each
		// reading every message, as Fibril stream subscriptions do.
		for i := range cfg.Consumers {
			if _, err = d.js.CreateOrUpdateConsumer(ctx, d.Stream, jetstream.ConsumerConfig{
				Durable:       consumerName(true, i),
				AckPolicy:     ack,
				AckWait:       30 * time.Second,
				MaxAckPending: cfg.Prefetch,
				DeliverPolicy: jetstream.DeliverAllPolicy,
			}); err != nil {
				return fmt.Errorf("create consumer %d: %w", i, err)
			}
		}
		d.info.ConsumerKind = fmt.Sprintf("fan-out: one durable pull consumer per bench consumer, Consume(PullMaxMessages=%d), MaxAckPending=%d, ack %s",
			cfg.Prefetch, cfg.Prefetch, ack)
		return nil
	}
	_, err = d.js.CreateOrUpdateConsumer(ctx, d.Stream, jetstream.ConsumerConfig{
		Durable:       durableName,
		AckPolicy:     ack,
		AckWait:       30 * time.Second,
		MaxAckPending: cfg.Prefetch * cfg.Consumers,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	d.info.ConsumerKind = fmt.Sprintf("durable pull, Consume(PullMaxMessages=%d), MaxAckPending=%d, ack %s",
		cfg.Prefetch, cfg.Prefetch*cfg.Consumers, ack)
	return nil
}

// Pipelined is false: a publish waits for its PubAck, and --window
// goroutines per producer each keep one in flight.
func (d *driver) Pipelined() bool { return false }

// Producer opens one publishing connection. Its PublishAsync bound is the
// window, so that the client's own bound never limits.
func (d *driver) Producer(_ context.Context, name string) (benchkit.Publisher, error) {
	nc, err := d.connect(name)
	if err != nil {
		return nil, err
	}
	pending := 1
	if d.cfg.Confirmed {
		pending = d.cfg.Window
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(pending),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	return &publisher{nc: nc, js: js, subject: d.Subject, confirmed: d.cfg.Confirmed}, nil
}

type publisher struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	subject   string
	confirmed bool
}

// Publish sends the payload and returns with its outcome: a JetStream
// publish and its PubAck, or without --confirmed a core NATS publish,
// done once buffered.
func (p *publisher) Publish(ctx context.Context, s *benchkit.Slot) {
	if !p.confirmed {
		s.Done(p.nc.Publish(p.subject, s.Payload))
		return
	}
	f, err := p.js.PublishAsync(p.subject, s.Payload)
	if err != nil {
		s.Done(err)
		return
	}
	select {
	case <-f.Ok():
		s.Done(nil)
	case err := <-f.Err():
		s.Done(err)
	case <-ctx.Done():
		s.Done(ctx.Err())
	}
}

// Consumer opens a connection and consumes the durable consumer into h;
// a jetstream.Msg is its own Acker.
func (d *driver) Consumer(ctx context.Context, name string, h *benchkit.Handler) (benchkit.Subscription, error) {
	nc, err := d.connect(name)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, d.Stream, consumerName(d.cfg.FanOut, d.consumers))
	d.consumers++
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { h.Deliver(m.Data(), m) },
		jetstream.PullMaxMessages(d.cfg.Prefetch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			h.ConsumeError("consume", err)
		}))
	if err != nil {
		return nil, err
	}
	return consumer{cc}, nil
}

type consumer struct{ cc jetstream.ConsumeContext }

// Close stops consuming and waits (at most 5 s) until the callback has
// returned for good.
func (c consumer) Close() {
	c.cc.Stop()
	select {
	case <-c.cc.Closed():
	case <-time.After(5 * time.Second):
	}
}

// Finish names the target and counts the messages left in the stream.
func (d *driver) Finish(res *benchkit.Result) {
	res.Addr, res.Topic, res.Queues, res.Partitions = d.URL, d.Subject, 1, 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := d.js.Stream(ctx, d.Stream); err == nil {
		if info, err := s.Info(ctx); err == nil {
			d.info.StreamMsgs = info.State.Msgs
			if info.Cluster != nil {
				d.info.StreamLeader = info.Cluster.Leader
			}
		}
	}
	i := &d.info
	res.Target = fmt.Sprintf("%s %s, stream %s (%s storage, %s retention, R%d)", i.ServerVersion, d.URL, i.Stream, i.Storage, i.Retention, i.Replicas)
	if i.StreamLeader != "" {
		res.Target += ", leader " + i.StreamLeader
	}
	res.CountsNote = fmt.Sprintf("  (stream holds %d)", i.StreamMsgs)
}

// Close deletes the stream (unless --keep-stream), then closes every
// connection.
func (d *driver) Close() {
	if d.created && !d.KeepStream {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := d.js.DeleteStream(ctx, d.Stream); err != nil {
			fmt.Fprintf(d.cfg.Log, "warning: delete stream %s: %v\n", d.Stream, err)
		}
		cancel()
	}
	for _, nc := range d.conns {
		nc.Close()
	}
}

// consumerName is the durable consumer bench consumer i reads: the shared
// one, or with fan-out its own.
func consumerName(fanOut bool, i int) string {
	if !fanOut {
		return durableName
	}
	return fmt.Sprintf("%s-%d", durableName, i)
}
