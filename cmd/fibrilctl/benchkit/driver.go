package benchkit

import "context"

// Driver connects Run to the system under test. Run calls its methods
// from one goroutine, in this order: Setup; Consumer for each consumer,
// then Producer for each producer; Finish once the run is over; Close
// last (also when an earlier step failed). Every producer and consumer
// has its own connection, as a separate client would.
type Driver interface {
	// Setup connects and prepares the system for a run of cfg (validated:
	// --mode rtt has set its one producer and one consumer), for example
	// declares the queue or creates the stream. Errors that come later,
	// outside of a call (a connection's asynchronous errors), go to rep.
	Setup(ctx context.Context, cfg Config, rep *Reporter) error

	// Consumer opens one consumer and starts handing each of its
	// deliveries to h.Deliver, one at a time; its errors go to
	// h.ConsumeError. name ("consumer-3", "rtt-consumer") is for the
	// connection's name.
	Consumer(ctx context.Context, name string, h *Handler) (Subscription, error)

	// Producer opens one producer ("producer-3", "rtt-producer").
	Producer(ctx context.Context, name string) (Publisher, error)

	// Pipelined reports how confirmed publishes are kept in flight. True:
	// Publish returns before the outcome (Done is called later, from a
	// goroutine of the client), and one goroutine per producer keeps
	// --window Slots in flight. False: Publish blocks until the outcome,
	// and Run starts --window goroutines per producer, each with one Slot.
	// Without --confirmed there is one goroutine with one Slot either way.
	Pipelined() bool

	// Finish names the system in res (Addr, Topic, Group, Queues,
	// Partitions, Coalesce, ClientStats, Target, CountsNote) once the
	// measurements are in, and reads whatever the driver reports besides.
	Finish(res *Result)

	// Close releases all the driver opened (and removes what it created
	// for the run only, if it was asked to).
	Close()
}

// Publisher publishes the messages of one producer.
type Publisher interface {
	// Publish sends s.Payload, message s.Seq of producer s.Producer, and
	// calls s.Done exactly once: with nil once the system accepted it
	// (confirmed, or handed to the connection without --confirmed), or
	// with the error. It may call Done before it returns. The Done calls
	// of one goroutine's publishes never run concurrently with each other
	// (a client that runs its callbacks one at a time does that). The
	// payload must not be used after Done. In rtt mode Run waits for Done
	// right after each Publish, so a driver may publish synchronously.
	Publish(ctx context.Context, s *Slot)
}

// Subscription is one consumer started by Driver.Consumer.
type Subscription interface {
	// Close stops the deliveries. When it returns, no Handler call of
	// this consumer is running and none will come.
	Close()
}

// Acker settles one delivery (an explicit ack).
type Acker interface {
	Ack() error
}

// Slot is one publish in flight. Run allocates the slots once, so that
// publishing allocates nothing per message.
type Slot struct {
	// Payload is the message: the stamp, then filler. The driver's until
	// Done.
	Payload []byte
	// Seq is the message's sequence number in its producer, from 0, and
	// Producer the producer's index.
	Seq      uint64
	Producer uint32
	// Data is the driver's, kept with the slot across its publishes (to
	// keep per-publish state without allocating).
	Data any
	// Fenced is for the driver to set before Done when this publish met a
	// repartition fence on its way (the system sent it back to be routed
	// by a newer partition count). Run records the confirm latencies of
	// those publishes apart as well (Result.FenceN …): the pause a
	// producer sees at the fence. Run clears it when the slot comes back.
	Fenced bool

	stamp  int64
	sentAt int64      // --rate only: when the publish was actually made
	w      *worker    // throughput mode
	rtt    chan error // rtt mode
}

// Done reports the outcome of the slot's publish; see Publisher.
func (s *Slot) Done(err error) {
	if s.rtt != nil {
		s.rtt <- err
		return
	}
	s.w.done(s, err)
}

// Reporter takes the errors a driver sees outside of a call.
type Reporter struct{ r *run }

// ConsumeError counts an error on the consuming side (consume_errors):
// what names it in the error samples ("consume", "async").
func (rep *Reporter) ConsumeError(what string, err error) {
	rep.r.consErrs.Add(1)
	rep.r.noteErr(what, err)
}

// Handler takes the deliveries of one consumer.
type Handler struct {
	Reporter
	consumer int           // its index (fan-out: each consumer's own delivered set)
	e2e      *Histogram    // throughput mode
	e2eAct   *Histogram    // throughput mode with --rate: from the actual send
	events   chan rttEvent // rtt mode
}

// Deliver accounts for one delivery: checks it against the tracker,
// records its publish→deliver latency, and, unless --auto-ack, acks it
// with ack. The calls of one Handler must not run concurrently.
func (h *Handler) Deliver(payload []byte, ack Acker) {
	r := h.r
	t := Now()
	s, first := r.onDelivery(h.consumer, payload, t, h.e2e, h.e2eAct)
	if !r.cfg.AutoAck {
		if err := ack.Ack(); err != nil && !r.consClosing.Load() {
			r.ackErrs.Add(1)
			r.noteErr("ack", err)
		}
	}
	if first && h.events != nil {
		select {
		case h.events <- rttEvent{seq: s.Seq, received: t, acked: Now()}:
		default: // the publisher gave up on it long ago
		}
	}
}
