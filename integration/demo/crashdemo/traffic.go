package crashdemo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

const payloadPrefix = "crash-demo "

var errPrivateDial = errors.New("crashdemo: the client tried a private broker's address")

// dialGuard is the client's dialer: it lets the client reach the public
// broker's address only, refusing (and counting) any address of a private
// broker and any other address.
type dialGuard struct {
	public    string
	private   map[string]bool
	toPublic  atomic.Int64
	toPrivate atomic.Int64
	toOther   atomic.Int64
}

func (g *dialGuard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	switch {
	case g.private[addr]:
		g.toPrivate.Add(1)
		return nil, fmt.Errorf("%w: %s", errPrivateDial, addr)
	case addr != g.public:
		g.toOther.Add(1)
		return nil, fmt.Errorf("crashdemo: the client may only dial %s, not %s", g.public, addr)
	}
	g.toPublic.Add(1)
	return loopbackDial(ctx, network, addr)
}

// traffic is the demo's client at work: a producer publishing with
// confirms at a steady rate to the chosen partitions, and a consumer of
// those partitions acknowledging every delivery.
type traffic struct {
	cfg   *Config
	c     *client.Client
	led   *ledger
	topic string
	parts []uint32

	deadline                 time.Time // no loop runs past it, whatever happens
	stopProduce, stopConsume chan struct{}
	produced, consumed       chan struct{}
	inflight                 sync.WaitGroup
}

func newTraffic(cfg *Config, c *client.Client, led *ledger, topic string, parts []uint32, deadline time.Time) *traffic {
	return &traffic{
		cfg: cfg, c: c, led: led, topic: topic, parts: parts, deadline: deadline,
		stopProduce: make(chan struct{}), stopConsume: make(chan struct{}),
		produced: make(chan struct{}), consumed: make(chan struct{}),
	}
}

// payload is message seq's body: a recognisable prefix, the number, and
// padding up to size.
func payload(seq, size int) []byte {
	b := make([]byte, 0, size)
	b = append(b, payloadPrefix...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, ' ')
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

// seqOf reads the sequence number back from a payload (-1 when it is not
// one of the demo's).
func seqOf(p []byte) int {
	rest, ok := strings.CutPrefix(string(p), payloadPrefix)
	if !ok {
		return -1
	}
	num, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(num)
	if err != nil {
		return -1
	}
	return n
}

// produce publishes until stopProduce is closed, at most Rate per second
// and at most Window waiting for confirms; a publish that is due while the
// window is full is skipped, so nothing piles up during an outage and the
// rate never bursts to catch up.
func (tr *traffic) produce() {
	defer close(tr.produced)
	pub := tr.c.Publisher(tr.topic, client.PublisherOptions{})
	window := make(chan struct{}, tr.cfg.Window)
	interval := time.Second / time.Duration(tr.cfg.Rate)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	next := time.Now()
	// Bounded by count as well as by stopProduce: an hour at the rate.
	limit := tr.cfg.Rate * 3600
	for sent := 0; sent < limit; {
		select {
		case <-tr.stopProduce:
			return
		case <-tick.C:
		}
		now := time.Now()
		if now.After(tr.deadline) {
			return
		}
		if behind := now.Sub(next); behind > 50*time.Millisecond {
			tr.led.notSent(int(behind / interval))
			next = now
		}
		for !next.After(now) && sent < limit {
			next = next.Add(interval)
			select {
			case window <- struct{}{}:
			default:
				tr.led.notSent(1)
				continue
			}
			seq := tr.led.published()
			sent++
			p := tr.parts[seq%len(tr.parts)]
			ctx, cancel := context.WithTimeout(context.Background(), tr.cfg.PublishTimeout)
			tr.inflight.Add(1)
			done := func(_ uint64, err error) {
				cancel()
				tr.led.outcome(seq, err)
				<-window
				tr.inflight.Done()
			}
			if err := pub.PublishAsync(ctx, client.Message{Partition: &p, Payload: payload(seq, tr.cfg.PayloadBytes)}, done); err != nil {
				done(0, err)
			}
			select {
			case <-tr.stopProduce:
				return
			default:
			}
		}
	}
}

// consume takes deliveries from sub until stopConsume is closed,
// acknowledging each one. A subscription that ended for good (every
// partition closed with a terminal reason) is opened again.
func (tr *traffic) consume(sub *client.Subscription) {
	defer close(tr.consumed)
	defer func() { _ = sub.Close() }()
	// Bounded by count as well as by stopConsume.
	for i := 0; i < 100_000_000 && time.Now().Before(tr.deadline); i++ {
		select {
		case <-tr.stopConsume:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			tr.led.countErr(tr.led.consumeErrs, err)
			if sub.Err() != nil {
				_ = sub.Close()
				if s, err := tr.subscribe(); err == nil {
					sub = s
				}
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		tr.led.delivered(seqOf(d.Payload))
		actx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := d.Ack(actx); err != nil {
			tr.led.countErr(tr.led.ackErrs, err)
		}
		cancel()
	}
}

func (tr *traffic) subscribe() (*client.Subscription, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tr.c.Subscribe(ctx, tr.topic, client.SubscribeOptions{Partitions: tr.parts, Prefetch: 256})
}

// start subscribes, then starts the consumer and the producer.
func (tr *traffic) start() error {
	sub, err := tr.subscribe()
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	go tr.consume(sub)
	go tr.produce()
	return nil
}

// stopProducing stops the producer and waits (bounded) for the outcome of
// every publish it started.
func (tr *traffic) stopProducing(limit time.Duration) error {
	close(tr.stopProduce)
	<-tr.produced
	done := make(chan struct{})
	go func() { tr.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("publishes without an outcome %v after the producer stopped", limit)
	}
}

func (tr *traffic) stopConsuming() {
	close(tr.stopConsume)
	<-tr.consumed
}

// dialClient connects the demo's client: to the public broker only, as
// the application user, through g.
func dialClient(ctx context.Context, cfg *Config, g *dialGuard, log *slog.Logger) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return client.Dial(ctx, client.Options{
		Addrs:    []string{g.public},
		Username: cfg.username,
		Password: cfg.password,
		Dial:     g.dial,
		Logger:   log,
	})
}
