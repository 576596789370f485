package integration

// Client helpers: dialing through the guard, publishing, consuming and
// bounded waits.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// clientOpt adjusts client.Options before Dial.
type clientOpt func(*client.Options)

var clientSeq atomic.Int64

// newClient dials a client (as the built-in fibril/fibril loopback user)
// through the loopback guard. At cleanup it is closed and its counters of
// broker misbehaviour must be zero.
func newClient(t testing.TB, addr string, opts ...clientOpt) *client.Client {
	t.Helper()
	name := fmt.Sprintf("client#%d", clientSeq.Add(1))
	g := newGuard(t)
	o := client.Options{
		Addrs:    []string{addr},
		Username: "fibril",
		Password: "fibril",
		Dial:     g.dial,
		Logger:   testLogger(t, name),
	}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c, err := client.Dial(ctx, o)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", name, addr, err)
	}
	t.Cleanup(func() {
		c.Close()
		checkStats(t, name, c.Stats())
	})
	return c
}

// checkStats fails t when the client saw the broker break the protocol.
func checkStats(t testing.TB, name string, s client.Stats) {
	t.Helper()
	if s.PrefetchViolations != 0 || s.ProtocolViolations != 0 || s.UncorrelatedErrors != 0 || s.UnknownSubDeliveries != 0 {
		t.Errorf("%s: broker misbehaviour seen by the client: %+v", name, s)
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func u32(v uint32) *uint32 { return &v }

// publish publishes one confirmed message and returns its offset.
func publish(t testing.TB, c *client.Client, topic string, m client.Message) uint64 {
	t.Helper()
	off, err := c.Publisher(topic, client.PublisherOptions{}).PublishConfirmed(ctxT(t, opTimeout), m)
	if err != nil {
		t.Fatalf("publish to %s: %v", topic, err)
	}
	return off
}

// subscribe opens a manual-ack subscription.
func subscribe(t testing.TB, c *client.Client, topic string, opts client.SubscribeOptions) *client.Subscription {
	t.Helper()
	s, err := c.Subscribe(ctxT(t, opTimeout), topic, opts)
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	return s
}

// next waits (bounded) for the next delivery.
func next(t testing.TB, s *client.Subscription, within time.Duration) *client.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	d, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("%s: no delivery within %v: %v", s.Topic(), within, err)
	}
	return d
}

// expectNone asserts that nothing is delivered during d.
func expectNone(t testing.TB, s *client.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if dl, err := s.Next(ctx); err == nil {
		t.Fatalf("%s: unexpected delivery offset %d payload %q (retries %d)", s.Topic(), dl.Offset, dl.Payload, dl.Retries)
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: subscription failed while expecting silence: %v", s.Topic(), err)
	}
}

func ack(t testing.TB, d *client.Delivery) {
	t.Helper()
	if err := d.Ack(ctxT(t, opTimeout)); err != nil {
		t.Fatalf("ack offset %d: %v", d.Offset, err)
	}
}

// barrier makes one request/reply round trip on the client's (single,
// standalone) connection. The broker handles a connection's frames in
// order, so every ACK/NACK written before it has been read once it
// returns.
func barrier(t testing.TB, c *client.Client) {
	t.Helper()
	if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatalf("barrier (TOPOLOGY): %v", err)
	}
}
