//go:build unix

package client

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// The tests of the caller's write of a lone frame ("Writes" in doc.go).
// They use plain loopback TCP connections (loopbackDial), where that
// write is allowed; the gated dialer of batch_test.go wraps the
// connection and so keeps every frame on the writer.

// waitWriterIdle waits until c's writer waits for frames.
func waitWriterIdle(t *testing.T, c *Conn) {
	t.Helper()
	testkit.Eventually(t, stepTimeout, "writer idle", func() bool {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return c.wwaiting && len(c.wbuf) == 0
	})
}

// liveConn is ep's connection, which the test needs up.
func liveConn(t *testing.T, ep *endpoint) *Conn {
	t.Helper()
	conn, _ := ep.live()
	if conn == nil {
		t.Fatal("no live connection")
	}
	return conn
}

// quietConnConfig is connConfig with heartbeats out of the way: a PING
// is a control frame, which its caller writes, and would be counted.
func quietConnConfig(tb testing.TB) ConnConfig {
	cfg := connConfig(tb)
	cfg.Heartbeat = time.Hour
	return cfg
}

// The only request awaiting an answer is written by its caller; one queued
// while another waits for its answer, and a fire-and-forget frame, are
// the writer's.
func TestLoneRequestWrittenByCaller(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, quietConnConfig(t))
	defer c.Close()
	if c.raw == nil {
		t.Fatal("a loopback TCP connection has no raw conn")
	}
	waitWriterIdle(t, c)
	w0 := c.stats.callerWrites.Load()
	first := make(chan error, 1)
	if err := c.Go(wire.OpTopology, &wire.TopologyRequest{}, func(_ Frame, err error) { first <- err }); err != nil {
		t.Fatal(err)
	}
	if got := c.stats.callerWrites.Load() - w0; got != 1 {
		t.Fatalf("lone request: %d caller writes, want 1", got)
	}
	topo := fc.expect(t, wire.OpTopology)

	waitWriterIdle(t, c)
	second := make(chan error, 1)
	if err := c.Go(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "q"}, func(_ Frame, err error) { second <- err }); err != nil {
		t.Fatal(err)
	}
	if got := c.stats.callerWrites.Load() - w0; got != 1 {
		t.Fatalf("a request beside one in flight was written by its caller (%d caller writes)", got)
	}
	decl := fc.expect(t, wire.OpDeclareQueue)
	fc.send(wire.OpTopologyOK, topo.hdr.RequestID, &wire.TopologyOK{})
	fc.send(wire.OpDeclareQueueOK, decl.hdr.RequestID, &wire.DeclareQueueOK{Status: "stored", PartitionCount: 1})
	if err := wait(t, first); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, second); err != nil {
		t.Fatal(err)
	}

	waitWriterIdle(t, c)
	if err := c.Send(wire.OpPublish, 0, &wire.Publish{Topic: "q", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if got := c.stats.callerWrites.Load() - w0; got != 1 {
		t.Fatalf("a fire-and-forget publish was written by its caller (%d caller writes)", got)
	}
	fc.expect(t, wire.OpPublish)
}

// The ACK of a delivery goes to the writer while the connection holds
// other unsettled deliveries (their ACKs may merge with it), and is
// written by the caller once it settles the last one held.
func TestAckOfTheLastHeldDeliveryWrittenByCaller(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Partitions: []uint32{0}, Prefetch: 4}, 1)
	sendDeliver(fc, 1, "q", 0, 1, "a")
	sendDeliver(fc, 1, "q", 0, 2, "b")
	d1, d2 := next(t, sub), next(t, sub)
	conn := liveConn(t, d1.ep)
	if n := conn.unsettled.Load(); n != 2 {
		t.Fatalf("unsettled %d, want 2", n)
	}
	ctx := context.Background()
	waitWriterIdle(t, conn)
	w0 := c.Stats().CallerWrites
	if err := d1.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().CallerWrites - w0; got != 0 {
		t.Fatalf("the ACK of one of two held deliveries was written by its caller")
	}
	if a := fc.expect(t, wire.OpAck).body.(*wire.Ack); len(a.Tags) != 1 || a.Tags[0] != 1 {
		t.Fatalf("first ACK tags %v", a.Tags)
	}
	waitWriterIdle(t, conn)
	if err := d2.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().CallerWrites - w0; got != 1 {
		t.Fatalf("the ACK of the last held delivery: %d caller writes, want 1", got)
	}
	if a := fc.expect(t, wire.OpAck).body.(*wire.Ack); len(a.Tags) != 1 || a.Tags[0] != 2 {
		t.Fatalf("second ACK tags %v", a.Tags)
	}
	if n := conn.unsettled.Load(); n != 0 {
		t.Fatalf("unsettled %d after both ACKs", n)
	}
}

// A lone frame larger than the socket takes at once: the caller writes
// what fits and returns; the writer sends the rest, in order, before the
// frames queued after it.
func TestLoneFrameTheSocketCannotTakeWhole(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := openConn(t, fb, quietConnConfig(t))
	defer c.Close()
	tc := fc.nc.(*net.TCPConn)
	tc.SetReadBuffer(64 << 10) // keep the kernel's buffers small, so the frame cannot fit
	if cc, ok := c.nc.(*net.TCPConn); ok {
		cc.SetWriteBuffer(64 << 10)
	}
	waitWriterIdle(t, c)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	b0 := c.stats.bytesWritten.Load()
	w0 := c.stats.callerWrites.Load()
	done := make(chan error, 1)
	if err := c.Go(wire.OpPublish, &wire.Publish{Topic: "q", Payload: payload}, func(_ Frame, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if got := c.stats.callerWrites.Load() - w0; got != 1 {
		t.Fatalf("%d caller writes, want 1 (the part the socket took)", got)
	}
	// The writer counts its bytes once its Write returns, which needs the
	// fake to read: so far only the caller's part is counted.
	if part := c.stats.bytesWritten.Load() - b0; part >= uint64(len(payload)) {
		t.Fatal("the whole 16 MiB frame left in one non-blocking write; the test needs a socket that cannot take it")
	}
	if err := c.Send(wire.OpPublish, 0, &wire.Publish{Topic: "q", Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	fc.nc.SetReadDeadline(time.Now().Add(stepTimeout))
	f := fc.expect(t, wire.OpPublish)
	if p := f.body.(*wire.Publish); !bytes.Equal(p.Payload, payload) {
		t.Fatalf("the big frame arrived with %d bytes of payload, not the 16 MiB sent", len(p.Payload))
	}
	if p := fc.expect(t, wire.OpPublish).body.(*wire.Publish); string(p.Payload) != "after" {
		t.Fatalf("the next frame carried %q", p.Payload)
	}
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 7})
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
}

// Deliveries acked while more arrive: every tag is acked once, and the
// connection holds none unsettled at the end (under the race detector this
// also checks that a delivery is complete before Next can return it).
func TestAckWhileDeliveriesArrive(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	const n = 300
	sub := subscribeScripted(t, c, fc, "q", SubscribeOptions{Partitions: []uint32{0}, Prefetch: n}, 1)
	sent := async(func() error { // sendDeliver's id counter is shared: wait for it below
		for i := 1; i <= n; i++ {
			sendDeliver(fc, 1, "q", 0, uint64(i), "m")
		}
		return nil
	})
	ctx := context.Background()
	acks := async(func() error {
		for range n {
			d, err := sub.Next(ctx)
			if err != nil {
				return err
			}
			if err := d.Ack(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	seen := map[uint64]bool{}
	for len(seen) < n {
		for _, tag := range fc.expect(t, wire.OpAck).body.(*wire.Ack).Tags {
			if seen[tag] || tag < 1 || tag > n {
				t.Fatalf("tag %d acked twice or unknown", tag)
			}
			seen[tag] = true
		}
	}
	if err := wait(t, acks); err != nil {
		t.Fatal(err)
	}
	wait(t, sent)
	conn := liveConn(t, c.pool.boot)
	if u := conn.unsettled.Load(); u != 0 {
		t.Fatalf("%d deliveries unsettled after every ACK", u)
	}
}

// Deliveries dropped unsettled (buffered when their subscription closes)
// are uncounted: the connection's next lone ACK is written by its caller.
func TestDroppedDeliveriesAreUncounted(t *testing.T) {
	fb := newFake(t, nil)
	opts := testOptions(t, fb.addr)
	opts.Heartbeat = time.Hour
	c, fc := dialScripted(t, fb, opts, wire.Topology{})
	first := subscribeScripted(t, c, fc, "q", SubscribeOptions{Partitions: []uint32{0}, Prefetch: 4}, 1)
	for tag := uint64(1); tag <= 3; tag++ {
		sendDeliver(fc, 1, "q", 0, tag, "buffered")
	}
	d := next(t, first) // the other two stay buffered
	conn := liveConn(t, d.ep)
	testkit.Eventually(t, stepTimeout, "3 counted", func() bool { return conn.unsettled.Load() == 3 })
	first.Close()
	if n := conn.unsettled.Load(); n != 1 {
		t.Fatalf("unsettled %d after Close dropped two buffered deliveries, want 1 (the one handed out)", n)
	}
	second := subscribeScripted(t, c, fc, "q2", SubscribeOptions{Partitions: []uint32{0}, Prefetch: 4}, 2)
	sendDeliver(fc, 2, "q2", 0, 9, "x")
	d2 := next(t, second)
	if err := d.Ack(context.Background()); err != nil { // settles the first, still counted
		t.Fatal(err)
	}
	fc.expect(t, wire.OpAck)
	waitWriterIdle(t, conn)
	w0 := c.Stats().CallerWrites
	if err := d2.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().CallerWrites - w0; got != 1 {
		t.Fatalf("the ACK of the only delivery held: %d caller writes, want 1", got)
	}
	fc.expect(t, wire.OpAck)
}
