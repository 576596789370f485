//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// The --broker mode: the same measure against a Fibril broker, spoken to
// with the least client there is — a goroutine per connection that writes
// a frame and reads the answer, no writer goroutine, no request table, no
// callbacks. Beside the floor and `fibrilctl bench --mode rtt` (the Go
// client), it tells the broker's part of the round trip from the client
// library's.

// wireConn is one handshaken connection to the broker.
type wireConn struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte // the frame being written
	rb  []byte // read buffer
}

func dialBroker(cfg *options, name string) (*wireConn, error) {
	nc, err := net.DialTimeout("tcp", cfg.broker, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &wireConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), rb: make([]byte, 64<<10)}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.call(wire.OpHello, 1, &wire.Hello{ClientName: name, ClientVersion: "rttfloor", ProtocolVersion: wire.ProtocolVersion}, wire.OpHelloOK); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.call(wire.OpAuth, 2, &wire.Auth{Username: cfg.user, Password: cfg.password}, wire.OpAuthOK); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// call writes one request and reads until its answer.
func (c *wireConn) call(op wire.Op, id uint64, body wire.Encoder, want wire.Op) error {
	if err := c.write(op, id, body); err != nil {
		return err
	}
	h, _, err := c.next(want)
	if err == nil && h.RequestID != id {
		err = fmt.Errorf("%v answered request %d, want %d", h.Op, h.RequestID, id)
	}
	return err
}

func (c *wireConn) write(op wire.Op, id uint64, body wire.Encoder) error {
	c.buf = wire.AppendFrame(c.buf[:0], op, id, body)
	_, err := c.nc.Write(c.buf)
	return err
}

// next reads frames until one of op, answering PINGs; an ERROR or any
// other answer is an error.
func (c *wireConn) next(op wire.Op) (wire.FrameHeader, []byte, error) {
	for {
		h, body, err := wire.ReadFrame(c.br, c.rb, 64<<20)
		if err != nil {
			return h, nil, err
		}
		switch h.Op {
		case op:
			return h, body, nil
		case wire.OpPing:
			if err := c.write(wire.OpPong, h.RequestID, nil); err != nil {
				return h, nil, err
			}
		case wire.OpError, wire.OpHelloErr, wire.OpAuthErr:
			var e wire.ErrorBody
			if derr := e.Decode(body); derr != nil {
				return h, nil, fmt.Errorf("%v (undecodable: %v)", h.Op, derr)
			}
			return h, nil, fmt.Errorf("%v %d: %s", h.Op, e.Code, e.Message)
		default:
			return h, nil, fmt.Errorf("unexpected %v while waiting for %v", h.Op, op)
		}
	}
}

// brokerProducer publishes with confirm, one at a time.
type brokerProducer struct {
	c   *wireConn
	pub wire.Publish
	id  uint64
}

func (p *brokerProducer) send(seq uint64) error {
	p.id++
	return p.c.write(wire.OpPublish, p.id, &p.pub)
}

func (p *brokerProducer) confirm() error {
	h, _, err := p.c.next(wire.OpPublishOK)
	if err == nil && h.RequestID != p.id {
		err = fmt.Errorf("PUBLISH_OK for request %d, want %d", h.RequestID, p.id)
	}
	return err
}

func (p *brokerProducer) finish() (serverStats, error) { return serverStats{}, nil }

// runBroker measures cfg.broker: a fresh one-partition queue, a producer
// connection and, with cfg.deliver, a consumer connection subscribed with
// manual acks that acks each delivery at once.
func runBroker(cfg *options) (*Result, error) {
	topic := fmt.Sprintf("rttfloor-%d-%d", os.Getpid(), time.Now().UnixNano())
	pc, err := dialBroker(cfg, "rttfloor-producer")
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	defer pc.nc.Close()
	p := &brokerProducer{c: pc, id: 10, pub: wire.Publish{Topic: topic, RequireConfirm: true, Payload: make([]byte, cfg.size)}}
	// The first publish creates the queue; with a consumer, its delivery
	// shows that the subscription is live before the measure starts.
	if err := p.send(0); err != nil {
		return nil, err
	}
	if err := p.confirm(); err != nil {
		return nil, fmt.Errorf("first publish: %w", err)
	}
	acked := make(chan [2]int64, 1)
	if cfg.deliver {
		cc, err := dialBroker(cfg, "rttfloor-consumer")
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		defer cc.nc.Close()
		if err := cc.call(wire.OpSubscribe, 3, &wire.Subscribe{Topic: topic, Prefetch: 16, AutoAck: cfg.autoAck}, wire.OpSubscribeOK); err != nil {
			return nil, fmt.Errorf("subscribe: %w", err)
		}
		go consumeBroker(cc, topic, acked, cfg.autoAck)
		select {
		case _, ok := <-acked:
			if !ok {
				return nil, errors.New("consumer connection ended")
			}
		case <-time.After(10 * time.Second):
			return nil, errors.New("the first message was not delivered within 10 s")
		}
	}
	res, err := measure(p, acked, cfg.n, cfg.d, cfg.deliver)
	if res != nil {
		res.Mode = "broker"
	}
	return res, err
}

// consumeBroker acks each DELIVER at once and reports when it was read
// and when its ACK was written.
func consumeBroker(c *wireConn, topic string, acked chan<- [2]int64, autoAck bool) {
	defer close(acked)
	var d wire.Deliver
	ack := wire.Ack{Topic: topic, Tags: make([]uint64, 1)}
	for {
		h, body, err := c.next(wire.OpDeliver)
		if err != nil {
			return
		}
		got := benchkit.Now()
		if err := d.Decode(body); err != nil {
			return
		}
		if !autoAck {
			ack.Partition, ack.Tags[0] = d.Partition, d.DeliveryTag
			if err := c.write(wire.OpAck, h.RequestID, &ack); err != nil {
				return
			}
		}
		acked <- [2]int64{got, benchkit.Now()}
	}
}
