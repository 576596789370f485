package client_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// exampleBroker is a minimal standalone broker for the examples: one
// in-memory queue per topic (partition 0), prefetch honoured, listening on
// 127.0.0.1 only.
type exampleBroker struct {
	ln net.Listener
	mu sync.Mutex
	q  map[string]*exampleQueue
}

type exampleQueue struct {
	msgs     [][]byte
	next     uint64 // next offset
	sub      *exampleConn
	subID    uint64
	prefetch uint32
	inflight uint32
	tag      uint64
}

type exampleConn struct {
	nc  net.Conn
	wmu sync.Mutex
}

func (c *exampleConn) send(op wire.Op, id uint64, body wire.Encoder) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.Write(wire.AppendFrame(nil, op, id, body))
}

func startExampleBroker() (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	b := &exampleBroker{ln: ln, q: make(map[string]*exampleQueue)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(&exampleConn{nc: nc})
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }
}

func (b *exampleBroker) queue(topic string) *exampleQueue {
	q := b.q[topic]
	if q == nil {
		q = &exampleQueue{}
		b.q[topic] = q
	}
	return q
}

// pump delivers while the subscriber has room (b.mu held).
func (q *exampleQueue) pump(topic string) {
	for q.sub != nil && q.inflight < max(1, q.prefetch) && len(q.msgs) > 0 {
		q.tag++
		q.inflight++
		q.sub.send(wire.OpDeliver, q.tag, &wire.Deliver{SubID: q.subID, Topic: topic, Offset: q.next - uint64(len(q.msgs)),
			DeliveryTag: q.tag, PublishReceived: uint64(time.Now().UnixMilli()), Payload: q.msgs[0]})
		q.msgs = q.msgs[1:]
	}
}

func (b *exampleBroker) serve(c *exampleConn) {
	defer c.nc.Close()
	br := bufio.NewReader(c.nc)
	for {
		h, raw, err := wire.ReadFrame(br, nil, math.MaxUint32)
		if err != nil {
			return
		}
		if h.Op == wire.OpPing {
			c.send(wire.OpPong, h.RequestID, nil)
			continue
		}
		body, err := wire.DecodeBody(h.Op, raw)
		if err != nil {
			c.send(wire.OpError, h.RequestID, &wire.ErrorBody{Code: 400, Message: err.Error()})
			continue
		}
		b.mu.Lock()
		switch m := body.(type) {
		case *wire.Hello:
			c.send(wire.OpHelloOK, h.RequestID, &wire.HelloOK{ProtocolVersion: 1, ServerName: "example", Compliance: wire.Compliance})
		case *wire.TopologyRequest:
			c.send(wire.OpTopologyOK, h.RequestID, &wire.TopologyOK{}) // standalone: no queue entries
		case *wire.DeclareQueue:
			b.queue(m.Topic)
			c.send(wire.OpDeclareQueueOK, h.RequestID, &wire.DeclareQueueOK{Status: "stored", PartitionCount: 1})
		case *wire.Publish:
			q := b.queue(m.Topic)
			q.msgs = append(q.msgs, append([]byte(nil), m.Payload...))
			q.next++
			if m.RequireConfirm {
				c.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: q.next - 1})
			}
			q.pump(m.Topic)
		case *wire.Subscribe:
			q := b.queue(m.Topic)
			q.sub, q.subID, q.prefetch = c, 1, m.Prefetch
			c.send(wire.OpSubscribeOK, h.RequestID, &wire.SubscribeOK{SubID: 1, Topic: m.Topic, Partition: m.Partition, Group: m.Group, Prefetch: m.Prefetch})
			q.pump(m.Topic)
		case *wire.Ack:
			q := b.queue(m.Topic)
			q.inflight -= uint32(len(m.Tags))
			q.pump(m.Topic)
		}
		b.mu.Unlock()
	}
}

// loopbackOnly refuses to dial anything but the loopback interface.
func loopbackOnly(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		panic("example dialed a non-loopback address: " + addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// Publish a message with confirmation, then consume and acknowledge it.
func Example() {
	addr, stop := startExampleBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, client.Options{Addrs: []string{addr}, Dial: loopbackOnly})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	n, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders"})
	if err != nil {
		fmt.Println("declare:", err)
		return
	}
	pub := c.Publisher("orders", client.PublisherOptions{})
	for _, body := range []string{"first", "second"} {
		off, err := pub.PublishConfirmed(ctx, client.Message{Key: []byte("order-42"), Payload: []byte(body)})
		if err != nil {
			fmt.Println("publish:", err)
			return
		}
		fmt.Printf("stored %q at offset %d\n", body, off)
	}

	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		fmt.Println("subscribe:", err)
		return
	}
	defer sub.Close()
	for range 2 {
		d, err := sub.Next(ctx)
		if err != nil {
			fmt.Println("next:", err)
			return
		}
		fmt.Printf("got %q from partition %d\n", d.Payload, d.Partition)
		if err := d.Ack(ctx); err != nil {
			fmt.Println("ack:", err)
			return
		}
	}
	fmt.Println("partitions:", n, "prefetch violations:", c.Stats().PrefetchViolations)
	// Output:
	// stored "first" at offset 0
	// stored "second" at offset 1
	// got "first" from partition 0
	// got "second" from partition 0
	// partitions: 1 prefetch violations: 0
}

// Errors carry the wire code and match the core sentinels; Retryable gives
// the advice of docs/protocol.md#answers.
func ExampleError() {
	err := error(&client.Error{Op: wire.OpPublish, Code: wire.CodeUnavailable, Message: "recovering"})
	fmt.Println(err, client.Retryable(err))
	// Output: fibril: PUBLISH: 503 recovering true
}

// Consume with a channel and settle according to the outcome.
func ExampleSubscription_C() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{"127.0.0.1:9876"}})
	if err != nil {
		return
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		return
	}
	for d := range sub.C() {
		if process(d.Payload) {
			d.Ack(ctx)
		} else if d.Retries < 3 {
			d.Retry(ctx, 5*time.Second)
		} else {
			d.Fail(ctx)
		}
	}
	fmt.Println("subscription ended:", sub.Err())
}

func process([]byte) bool { return true }

// Keep a window of confirmed publishes in flight from one goroutine: the
// callback gives the slot back. Each slot owns its payload, which the
// client may re-send until the callback has run.
func ExamplePublisher_PublishAsync() {
	addr, stop := startExampleBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{addr}, Dial: loopbackOnly})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	pub := c.Publisher("events", client.PublisherOptions{})

	const window = 4
	type slot struct{ payload []byte }
	free := make(chan *slot, window)
	for range window {
		free <- &slot{payload: make([]byte, 16)}
	}
	var mu sync.Mutex
	var confirmed, failed int
	for i := range 100 {
		s := <-free // waits while window publishes are in flight
		copy(s.payload, fmt.Sprintf("event %d", i))
		err := pub.PublishAsync(ctx, client.Message{Payload: s.payload}, func(off uint64, err error) {
			mu.Lock()
			if err != nil {
				failed++
			} else {
				confirmed++
			}
			mu.Unlock()
			free <- s
		})
		if err != nil { // refused: nothing was sent and no callback will run
			fmt.Println("publish:", err)
			free <- s
		}
	}
	for range window { // wait for the last callbacks
		<-free
	}
	fmt.Println("confirmed:", confirmed, "failed:", failed)
	// Output: confirmed: 100 failed: 0
}
