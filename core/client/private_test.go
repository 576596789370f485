package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// tagged is ep tagged private, as a topology entry lists a private owner's
// own endpoint with routing.expose_private_endpoints on
// (docs/protocol.md#endpoints).
func tagged(ep wire.AdvertisedAddress) wire.AdvertisedAddress {
	ep.Tags = []string{core.TagPrivate}
	return ep
}

// dialLog counts the client's dials per address, through loopbackDial.
type dialLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dialLog) wrap(tb testing.TB) func(ctx context.Context, network, addr string) (net.Conn, error) {
	next := loopbackDial(tb)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.mu.Lock()
		if d.n == nil {
			d.n = map[string]int{}
		}
		d.n[addr]++
		d.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (d *dialLog) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[addr]
}

// closedAddr is a loopback endpoint nothing listens on: dialing it is
// refused.
func closedAddr(t *testing.T) wire.AdvertisedAddress {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().(*net.TCPAddr)
	ln.Close()
	return wire.AdvertisedAddress{Host: "127.0.0.1", Port: uint16(a.Port)}
}

// publishVia publishes a confirmed message to partition p and answers it
// on fc, the connection it must arrive on.
func publishVia(t *testing.T, pub *Publisher, fc *fakeConn, p uint32) {
	t.Helper()
	ch := async(func() error {
		_, err := pub.PublishConfirmed(context.Background(), Message{Partition: &p, Payload: []byte("x")})
		return err
	})
	f := fc.expect(t, wire.OpPublish)
	if pb := f.body.(*wire.Publish); pb.Partition != p {
		t.Fatalf("PUBLISH for partition %d, want %d", pb.Partition, p)
	}
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
}

// Without Options.PreferPrivateEndpoints the client never dials an
// endpoint tagged private: an entry's first untagged endpoint is its
// owner (the gateway, listed first by the broker, and also when a tagged
// one comes first), and an entry with tagged endpoints only goes to the
// bootstrap.
func TestPrivateEndpointsIgnoredByDefault(t *testing.T) {
	boot := newFake(t, nil)
	gw := newFake(t, nil)
	priv := closedAddr(t)
	var dials dialLog
	opts := testOptions(t, boot.addr)
	opts.Dial = dials.wrap(t)
	topo := wire.Topology{Generation: 1, Queues: []wire.QueueEntry{
		queueEntry("t", 0, 3, 0, gw.endpoint(), tagged(priv)),
		queueEntry("t", 1, 3, 0, tagged(priv), gw.endpoint()),
		queueEntry("t", 2, 3, 0, tagged(priv)),
	}}
	c, bfc := dialScripted(t, boot, opts, topo)
	pub := c.Publisher("t", PublisherOptions{})
	ch := async(func() error {
		p := uint32(0)
		_, err := pub.PublishConfirmed(context.Background(), Message{Partition: &p})
		return err
	})
	gfc := gw.next(t)
	gfc.acceptHello(t, identityA, wire.ResumeNew)
	f := gfc.expect(t, wire.OpPublish)
	gfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	publishVia(t, pub, gfc, 1)
	publishVia(t, pub, bfc, 2)
	if n := dials.count(priv.String()); n != 0 {
		t.Fatalf("the client dialled the private endpoint %d times", n)
	}
}

// With Options.PreferPrivateEndpoints a partition whose entry lists an
// endpoint tagged private goes there directly. When that connection dies
// the client does not reconnect to it: the next publish and the
// subscription go through the gateway (the entry's untagged endpoint).
func TestPreferPrivateEndpointsFallsBackWhenTheConnectionDies(t *testing.T) {
	boot := newFake(t, nil)
	gw := newFake(t, nil)
	priv := newFake(t, nil)
	var dials dialLog
	opts := testOptions(t, boot.addr)
	opts.Dial = dials.wrap(t)
	opts.PreferPrivateEndpoints = true
	topo := wire.Topology{Generation: 1, Queues: []wire.QueueEntry{
		queueEntry("t", 0, 1, 0, gw.endpoint(), tagged(priv.endpoint())),
	}}
	c, _ := dialScripted(t, boot, opts, topo)
	pub := c.Publisher("t", PublisherOptions{})
	ch := async(func() error {
		p := uint32(0)
		_, err := pub.PublishConfirmed(context.Background(), Message{Partition: &p})
		return err
	})
	pfc := priv.next(t)
	pfc.acceptHello(t, identityA, wire.ResumeNew)
	f := pfc.expect(t, wire.OpPublish)
	pfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	sub := subscribeScripted(t, c, pfc, "t", SubscribeOptions{Partitions: []uint32{0}}, 7)
	pfc.close() // the private node goes away
	gfc := gw.next(t)
	gfc.acceptHello(t, identityA, wire.ResumeNew)
	answerSubscribe(t, gfc, 9)
	sendDeliver(gfc, 9, "t", 0, 1, "through the gateway")
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	d, err := sub.Next(ctx)
	if err != nil || string(d.Payload) != "through the gateway" {
		t.Fatalf("Next = %v, %v", d, err)
	}
	publishVia(t, pub, gfc, 0)
	if n := dials.count(priv.addr); n != 1 {
		t.Fatalf("the private endpoint was dialled %d times, want once (no reconnect after it died)", n)
	}
}

// With Options.PreferPrivateEndpoints a private endpoint that does not
// answer costs one failed dial: the operation goes to the gateway at once,
// later ones too without dialling it again, until PrivateRetryAfter has
// passed.
func TestPreferPrivateEndpointsFallsBackWhenTheDialFails(t *testing.T) {
	boot := newFake(t, nil)
	gw := newFake(t, nil)
	priv := closedAddr(t)
	var dials dialLog
	opts := testOptions(t, boot.addr)
	opts.Dial = dials.wrap(t)
	opts.PreferPrivateEndpoints = true
	opts.PrivateRetryAfter = 300 * time.Millisecond
	topo := wire.Topology{Generation: 1, Queues: []wire.QueueEntry{
		queueEntry("t", 0, 1, 0, gw.endpoint(), tagged(priv)),
	}}
	c, _ := dialScripted(t, boot, opts, topo)
	pub := c.Publisher("t", PublisherOptions{})
	ch := async(func() error {
		p := uint32(0)
		_, err := pub.PublishConfirmed(context.Background(), Message{Partition: &p})
		return err
	})
	gfc := gw.next(t)
	gfc.acceptHello(t, identityA, wire.ResumeNew)
	f := gfc.expect(t, wire.OpPublish)
	gfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	publishVia(t, pub, gfc, 0)
	if n := dials.count(priv.String()); n != 1 {
		t.Fatalf("the private endpoint was dialled %d times, want once", n)
	}
	// Once PrivateRetryAfter has passed, the private endpoint is tried
	// again (and, still refusing, the publish goes through the gateway).
	time.Sleep(opts.PrivateRetryAfter)
	publishVia(t, pub, gfc, 0)
	testkit.Eventually(t, stepTimeout, "a second dial of the private endpoint", func() bool { return dials.count(priv.String()) == 2 })
}
