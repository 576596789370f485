package client

import (
	"context"
	"net"
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

// dialPrivate dials a client of a fake bootstrap broker whose topology
// is entries, counting its dials; prefer sets PreferPrivateEndpoints and
// retry PrivateRetryAfter (0: the default).
func dialPrivate(t *testing.T, prefer bool, retry time.Duration, entries ...wire.QueueEntry) (*Client, *fakeConn, *testkit.DialLog) {
	t.Helper()
	boot := newFake(t, nil)
	dials := &testkit.DialLog{Next: loopbackDial(t)}
	opts := testOptions(t, boot.addr)
	opts.Dial = dials.Dial
	opts.PreferPrivateEndpoints, opts.PrivateRetryAfter = prefer, retry
	c, bfc := dialScripted(t, boot, opts, wire.Topology{Generation: 1, Queues: entries})
	return c, bfc, dials
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

// publishDialling publishes a confirmed message to partition p, which must
// arrive on a new connection to fb, and returns that connection.
func publishDialling(t *testing.T, pub *Publisher, fb *fakeBroker, p uint32) *fakeConn {
	t.Helper()
	ch := async(func() error {
		_, err := pub.PublishConfirmed(context.Background(), Message{Partition: &p, Payload: []byte("x")})
		return err
	})
	fc := fb.next(t)
	fc.acceptHello(t, identityA, wire.ResumeNew)
	f := fc.expect(t, wire.OpPublish)
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	return fc
}

// Without Options.PreferPrivateEndpoints the client never dials an
// endpoint tagged private: an entry's first untagged endpoint is its
// owner (the gateway, listed first by the broker, and also when a tagged
// one comes first), and an entry with tagged endpoints only goes to the
// bootstrap.
func TestPrivateEndpointsIgnoredByDefault(t *testing.T) {
	gw := newFake(t, nil)
	priv := closedAddr(t)
	c, bfc, dials := dialPrivate(t, false, 0,
		queueEntry("t", 0, 3, 0, gw.endpoint(), tagged(priv)),
		queueEntry("t", 1, 3, 0, tagged(priv), gw.endpoint()),
		queueEntry("t", 2, 3, 0, tagged(priv)))
	pub := c.Publisher("t", PublisherOptions{})
	gfc := publishDialling(t, pub, gw, 0)
	publishVia(t, pub, gfc, 1)
	publishVia(t, pub, bfc, 2)
	if n := dials.Count(priv.String()); n != 0 {
		t.Fatalf("the client dialled the private endpoint %d times", n)
	}
}

// With Options.PreferPrivateEndpoints a partition whose entry lists an
// endpoint tagged private goes there directly. When that connection dies
// the client does not reconnect to it: the next publish and the
// subscription go through the gateway (the entry's untagged endpoint).
func TestPreferPrivateEndpointsFallsBackWhenTheConnectionDies(t *testing.T) {
	gw := newFake(t, nil)
	priv := newFake(t, nil)
	c, _, dials := dialPrivate(t, true, 0, queueEntry("t", 0, 1, 0, gw.endpoint(), tagged(priv.endpoint())))
	pub := c.Publisher("t", PublisherOptions{})
	pfc := publishDialling(t, pub, priv, 0)
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
	if n := dials.Count(priv.addr); n != 1 {
		t.Fatalf("the private endpoint was dialled %d times, want once (no reconnect after it died)", n)
	}
}

// With Options.PreferPrivateEndpoints a private endpoint that does not
// answer costs one failed dial: the operation goes to the gateway at once,
// later ones too without dialling it again, until PrivateRetryAfter has
// passed.
func TestPreferPrivateEndpointsFallsBackWhenTheDialFails(t *testing.T) {
	gw := newFake(t, nil)
	priv := closedAddr(t)
	const retry = 300 * time.Millisecond
	c, _, dials := dialPrivate(t, true, retry, queueEntry("t", 0, 1, 0, gw.endpoint(), tagged(priv)))
	pub := c.Publisher("t", PublisherOptions{})
	gfc := publishDialling(t, pub, gw, 0)
	publishVia(t, pub, gfc, 0)
	if n := dials.Count(priv.String()); n != 1 {
		t.Fatalf("the private endpoint was dialled %d times, want once", n)
	}
	// Once PrivateRetryAfter has passed, the private endpoint is tried
	// again (and, still refusing, the publish goes through the gateway).
	time.Sleep(retry)
	publishVia(t, pub, gfc, 0)
	testkit.Eventually(t, stepTimeout, "a second dial of the private endpoint", func() bool { return dials.Count(priv.String()) == 2 })
}
