package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Replies are matched by opcode, then request id, in any order (docs/protocol.md#request-ids).
func TestConnOutOfOrderReplies(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	ctx := context.Background()
	type res struct {
		f   Frame
		err error
	}
	topo := make(chan res, 1)
	decl := make(chan res, 1)
	go func() {
		f, err := c.Do(ctx, wire.OpTopology, &wire.TopologyRequest{})
		topo <- res{f, err}
	}()
	first := fc.expect(t, wire.OpTopology)
	go func() {
		f, err := c.Do(ctx, wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "q"})
		decl <- res{f, err}
	}()
	second := fc.expect(t, wire.OpDeclareQueue)
	if second.hdr.RequestID != first.hdr.RequestID+1 {
		t.Fatalf("ids %d then %d", first.hdr.RequestID, second.hdr.RequestID)
	}
	// A broker push with a numerically equal id must not be taken for a reply.
	fc.send(wire.OpPing, first.hdr.RequestID, nil)
	if p := fc.expectRaw(t, wire.OpPong); p.hdr.RequestID != first.hdr.RequestID {
		t.Fatalf("PONG id %d", p.hdr.RequestID)
	}
	fc.send(wire.OpDeclareQueueOK, second.hdr.RequestID, &wire.DeclareQueueOK{Status: "stored", PartitionCount: 3})
	fc.send(wire.OpTopologyOK, first.hdr.RequestID, &wire.TopologyOK{Topology: wire.Topology{Generation: 9}})
	d := <-decl
	if d.err != nil || d.f.Op != wire.OpDeclareQueueOK {
		t.Fatalf("declare: %+v", d)
	}
	r := <-topo
	var ok wire.TopologyOK
	if r.err != nil || r.f.Decode(&ok) != nil || ok.Generation != 9 {
		t.Fatalf("topology: %+v", r)
	}
}

// A reply op that cannot answer the request is a protocol error for that
// request; the connection stays usable.
func TestConnWrongReplyOp(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	ch := async(func() error {
		_, err := c.Do(context.Background(), wire.OpTopology, &wire.TopologyRequest{})
		return err
	})
	f := fc.expect(t, wire.OpTopology)
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 1})
	if err := wait(t, ch); !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// An ERROR answering no pending request drops the connection (docs/protocol.md#request-ids); a
// stray non-ERROR reply is only counted.
func TestConnUncorrelatedError(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	fc.send(wire.OpPublishOK, 500, &wire.PublishOK{Offset: 1})
	fc.send(wire.OpRedirect, 501, &wire.Redirect{Topic: "t"})
	fc.sendError(999, 400, "nobody asked")
	fc.expectEOF(t)
	<-c.Done()
	if !errors.Is(c.Err(), ErrConnectionLost) {
		t.Fatalf("err = %v", c.Err())
	}
	if n := c.stats.unmatchedReplies.Load(); n != 2 {
		t.Fatalf("unmatched replies = %d, want 2", n)
	}
	if n := c.stats.uncorrelatedErrors.Load(); n != 1 {
		t.Fatalf("uncorrelated errors = %d", n)
	}
}

// The broker's PING gets a PONG with the same id; the client PINGs on its
// own every heartbeat and is kept alive by the answers.
func TestConnPingPong(t *testing.T) {
	fb := newFake(t, nil)
	cfg := connConfig(t)
	cfg.Heartbeat = 100 * time.Millisecond // 3× must absorb scheduling stalls under -race
	c, fc := openConn(t, fb, cfg)
	fc.send(wire.OpPing, 77, nil)
	pings := 0
	for pings < 4 {
		f, err := fc.readRaw(stepTimeout)
		if err != nil {
			t.Fatalf("%v (client: %v)", err, c.Err())
		}
		switch f.hdr.Op {
		case wire.OpPong:
			if f.hdr.RequestID != 77 {
				t.Fatalf("PONG id %d, want 77", f.hdr.RequestID)
			}
		case wire.OpPing:
			pings++
			if f.hdr.RequestID < firstRequestID {
				t.Fatalf("client PING id %d reuses a handshake id", f.hdr.RequestID)
			}
			fc.send(wire.OpPong, f.hdr.RequestID, nil)
		default:
			t.Fatalf("unexpected %v", f.hdr.Op)
		}
	}
	// Four intervals passed with answers: beyond 3×, still alive.
	if c.Err() != nil {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// Nothing received for 3× the heartbeat: the connection is dead.
func TestConnHeartbeatTimeout(t *testing.T) {
	fb := newFake(t, nil)
	cfg := connConfig(t)
	cfg.Heartbeat = 20 * time.Millisecond
	start := time.Now() // the client's idle clock starts after this
	c, _ := openConn(t, fb, cfg)
	select {
	case <-c.Done():
	case <-time.After(stepTimeout):
		t.Fatal("connection not declared dead")
	}
	if !errors.Is(c.Err(), ErrHeartbeatTimeout) {
		t.Fatalf("err = %v", c.Err())
	}
	if el := time.Since(start); el < 3*cfg.Heartbeat {
		t.Fatalf("declared dead after %v, before 3 intervals", el)
	}
}

// A request in flight when the socket dies has an unknown outcome.
func TestConnInFlightLost(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	ch := async(func() error {
		_, err := c.Do(context.Background(), wire.OpPublish, &wire.Publish{Topic: "t", RequireConfirm: true})
		return err
	})
	fc.expect(t, wire.OpPublish)
	fc.close()
	err := wait(t, ch)
	var ou *OutcomeUnknownError
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &ou) || ou.Op != wire.OpPublish {
		t.Fatalf("err = %v", err)
	}
	// A request on the dead connection was never written: retryable.
	_, err = c.Do(context.Background(), wire.OpTopology, &wire.TopologyRequest{})
	if !isNotWritten(err) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("err = %v", err)
	}
}

// A caller giving up leaves the request registered: the late reply is not
// an uncorrelated frame and does not kill the connection.
func TestConnAbandonedRequestLateReply(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	ctx, cancel := context.WithCancel(context.Background())
	ch := async(func() error { _, err := c.Do(ctx, wire.OpTopology, &wire.TopologyRequest{}); return err })
	f := fc.expect(t, wire.OpTopology)
	cancel()
	if err := wait(t, ch); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("err = %v", err)
	}
	fc.sendError(f.hdr.RequestID, 500, "late")
	ch = async(func() error {
		_, err := c.Do(context.Background(), wire.OpTopology, &wire.TopologyRequest{})
		return err
	})
	f = fc.expect(t, wire.OpTopology)
	fc.send(wire.OpTopologyOK, f.hdr.RequestID, &wire.TopologyOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
}

// Unknown opcodes are ignored (docs/protocol.md#malformed).
func TestConnIgnoresUnknownOps(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, connConfig(t))
	fc.nc.Write(wire.AppendFrameHeader(nil, wire.FrameHeader{Version: 1, Op: 150, RequestID: 1}))
	fc.send(wire.OpPing, 5, nil)
	fc.expectRaw(t, wire.OpPong)
	if c.stats.ignoredFrames.Load() != 1 || c.Err() != nil {
		t.Fatalf("ignored=%d err=%v", c.stats.ignoredFrames.Load(), c.Err())
	}
}

// A recycled publish carries no channel into the pool: a channel belongs
// to the testing/synctest bubble it was made in, and the next user of the
// op may be in another bubble (a fatal error, found by core/sim).
func TestRecycledPublishHoldsNoChannel(t *testing.T) {
	op := &pubOp{wait: make(chan pubResult, 1)}
	op.h = op
	op.recycle()
	if op.wait != nil {
		t.Fatal("a recycled pubOp keeps its result channel")
	}
}
