package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// The SDKs' key rule (S-32): FNV-1a-64 of the key mod N.
func TestPartitionChoiceFNV(t *testing.T) {
	table := []struct {
		key        string
		m3, m4, m8 uint32
	}{
		{"", 2, 1, 5}, {"a", 1, 0, 4}, {"order-42", 2, 0, 4}, {"partition-key", 2, 3, 3}, {"hello world", 1, 3, 7},
	}
	c := &Client{topo: newTopoCache()}
	p := c.Publisher("t", PublisherOptions{})
	for _, n := range []uint32{3, 4, 8} {
		c.topo.apply(&wire.Topology{Generation: uint64(n), Queues: []wire.QueueEntry{queueEntry("t", 0, n, 6)}}, true, wire.None[string](), wire.None[string]())
		for _, row := range table {
			want := map[uint32]uint32{3: row.m3, 4: row.m4, 8: row.m8}[n]
			got, version := p.choose(&Message{Key: []byte(row.key)})
			if got != want || version != 6 {
				t.Errorf("key %q mod %d: partition %d version %d, want %d version 6", row.key, n, got, version, want)
			}
		}
	}
	// No key: round-robin over 0..N-1.
	var seen []uint32
	for range 8 {
		p, _ := p.choose(&Message{})
		seen = append(seen, p)
	}
	for i, s := range seen {
		if s != uint32(i%8) {
			t.Fatalf("round-robin %v", seen)
		}
	}
	// Explicit partition wins; unknown count → 0.
	five := uint32(5)
	if got, _ := p.choose(&Message{Key: []byte("a"), Partition: &five}); got != 5 {
		t.Fatalf("explicit partition ignored: %d", got)
	}
	q := c.Publisher("unknown", PublisherOptions{})
	if got, v := q.choose(&Message{Key: []byte("a")}); got != 0 || v != 0 {
		t.Fatalf("unknown count: partition %d version %d", got, v)
	}
}

// A standalone broker lists no queues: publishes go to partition 0 over
// the bootstrap connection, carrying the key and version 0.
func TestPublishStandalone(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	ch, off := publishAsync(c.Publisher("orders", PublisherOptions{}), Message{
		Key: []byte("order-42"), ContentType: "application/json", Headers: map[string]string{"x": "1"},
		Payload: []byte("{}"), TTL: time.Minute,
	})
	f := fc.expect(t, wire.OpPublish)
	pb := f.body.(*wire.Publish)
	if pb.Partition != 0 || !pb.RequireConfirm || string(pb.PartitionKey.Value) != "order-42" || pb.PartitioningVersion != 0 ||
		pb.ContentType.Tag != wire.ContentJSON || pb.TTLMillis.Value != 60000 || len(pb.Headers) != 1 {
		t.Fatalf("PUBLISH = %+v", pb)
	}
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 41})
	if err := wait(t, ch); err != nil || *off != 41 {
		t.Fatalf("offset %d err %v", *off, err)
	}
	// Fire-and-forget: returns once written, nothing awaited.
	if err := c.Publisher("orders", PublisherOptions{Group: "g"}).Publish(context.Background(), Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	pb = fc.expect(t, wire.OpPublish).body.(*wire.Publish)
	if pb.RequireConfirm || pb.Group != wire.Some("g") {
		t.Fatalf("PUBLISH = %+v", pb)
	}
}

// Keyed publishes are routed to the cached owner with the cached
// partitioning version.
func TestPublishRoutesToOwner(t *testing.T) {
	boot := newFake(t, nil)
	owner := newFake(t, nil)
	topo := wire.Topology{Generation: 3, Queues: []wire.QueueEntry{
		queueEntry("t", 0, 4, 2, owner.endpoint()), queueEntry("t", 1, 4, 2, owner.endpoint()),
		queueEntry("t", 2, 4, 2, owner.endpoint()), queueEntry("t", 3, 4, 2),
	}}
	c, bfc := dialScripted(t, boot, testOptions(t, boot.addr), topo)
	pub := c.Publisher("t", PublisherOptions{})
	ch, _ := publishAsync(pub, Message{Key: []byte("hello world")}) // mod 4 = 3: owner unknown → bootstrap
	f := bfc.expect(t, wire.OpPublish)
	if pb := f.body.(*wire.Publish); pb.Partition != 3 || pb.PartitioningVersion != 2 {
		t.Fatalf("PUBLISH = %+v", pb)
	}
	bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	ch, _ = publishAsync(pub, Message{Key: []byte("a")}) // mod 4 = 0: owner
	ofc := owner.next(t)
	if h := ofc.acceptHello(t, identityA, wire.ResumeNew); h.Resume.Present {
		t.Fatal("first HELLO to a new endpoint carries a resume identity")
	}
	f = ofc.expect(t, wire.OpPublish)
	if pb := f.body.(*wire.Publish); pb.Partition != 0 || pb.PartitioningVersion != 2 {
		t.Fatalf("PUBLISH = %+v", pb)
	}
	ofc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
}

// REDIRECT: update the cache, dial the endpoint, re-send; at most
// MaxRedirects per operation.
func TestRedirects(t *testing.T) {
	a := newFake(t, nil)
	b := newFake(t, nil)
	c, afc := dialScripted(t, a, testOptions(t, a.addr), wire.Topology{})
	pub := c.Publisher("t", PublisherOptions{})
	ch, off := publishAsync(pub, Message{Payload: []byte("x")})
	f := afc.expect(t, wire.OpPublish)
	afc.send(wire.OpRedirect, f.hdr.RequestID, &wire.Redirect{Topic: "t", Owners: []wire.AdvertisedAddress{b.endpoint()}, PartitioningVersion: 4})
	// The newer partitioning version triggers a topology refresh first.
	afc.answerTopology(t, wire.Topology{})
	bfc := b.next(t)
	bfc.acceptHello(t, identityA, wire.ResumeNew)
	f = bfc.expect(t, wire.OpPublish)
	if pb := f.body.(*wire.Publish); pb.PartitioningVersion != 4 {
		t.Fatalf("re-sent PUBLISH carries version %d, want 4", pb.PartitioningVersion)
	}
	bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 7})
	if err := wait(t, ch); err != nil || *off != 7 {
		t.Fatalf("off %d err %v", *off, err)
	}
	if got := c.topo.owner(routeKey{topic: "t"}); got != b.addr {
		t.Fatalf("cached owner %q, want %q", got, b.addr)
	}
	if n := c.Stats().Fenced; n != 1 {
		t.Fatalf("Stats().Fenced = %d after one REDIRECT with a newer version, want 1", n)
	}

	// B keeps redirecting to itself: 3 redirects are followed, the 4th fails.
	ch, _ = publishAsync(pub, Message{})
	for i := 0; i < 4; i++ {
		f = bfc.expect(t, wire.OpPublish)
		bfc.send(wire.OpRedirect, f.hdr.RequestID, &wire.Redirect{Topic: "t", Owners: []wire.AdvertisedAddress{b.endpoint()}, PartitioningVersion: 4})
	}
	err := wait(t, ch)
	if !errors.Is(err, ErrTooManyRedirects) || !Retryable(err) {
		t.Fatalf("err = %v", err)
	}
	// An empty endpoint list sends the retry to the bootstrap.
	ch, _ = publishAsync(pub, Message{})
	f = bfc.expect(t, wire.OpPublish)
	bfc.send(wire.OpRedirect, f.hdr.RequestID, &wire.Redirect{Topic: "t", PartitioningVersion: 4})
	f = afc.expect(t, wire.OpPublish)
	afc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	// Redirects at the version already known are owner moves, not fences.
	if n := c.Stats().Fenced; n != 1 {
		t.Fatalf("Stats().Fenced = %d, want still 1", n)
	}
}

// 503 and 409 are re-sent within the deadline (409 after a topology
// refresh); 504 is never re-sent.
func TestResendRules(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	pub := c.Publisher("t", PublisherOptions{})

	ch, off := publishAsync(pub, Message{})
	f := fc.expect(t, wire.OpPublish)
	fc.sendError(f.hdr.RequestID, 503, "recovering")
	f = fc.expect(t, wire.OpPublish)
	fc.sendError(f.hdr.RequestID, 409, "not owner")
	fc.answerTopology(t, wire.Topology{})
	f = fc.expect(t, wire.OpPublish)
	fc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{Offset: 3})
	if err := wait(t, ch); err != nil || *off != 3 {
		t.Fatalf("off %d err %v", *off, err)
	}

	// 504: outcome unknown, returned as is, never replayed.
	ch, _ = publishAsync(pub, Message{})
	f = fc.expect(t, wire.OpPublish)
	fc.sendError(f.hdr.RequestID, 504, "owner did not answer")
	err := wait(t, ch)
	var be *Error
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, core.ErrOutcomeUnknown) || !errors.As(err, &be) ||
		be.Code != 504 || be.Op != wire.OpPublish || !be.Retryable() {
		t.Fatalf("err = %v", err)
	}
	// The next frame is the next operation, not a replay.
	tch := async(func() error { _, err := c.Topology(context.Background(), ""); return err })
	fc.answerTopology(t, wire.Topology{})
	if err := wait(t, tch); err != nil {
		t.Fatal(err)
	}

	// 503 until the deadline: the last error is returned.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ch = async(func() error { _, err := pub.PublishConfirmed(ctx, Message{}); return err })
	sends := 0
	var err503 error
	for done := false; !done; {
		select {
		case err503 = <-ch:
			done = true
			continue
		default:
		}
		fr, err := fc.readRaw(20 * time.Millisecond)
		if err != nil {
			continue // read timeout: look at ch again
		}
		if fr.hdr.Op != wire.OpPublish {
			t.Fatalf("got %v", fr.hdr.Op)
		}
		sends++
		fc.sendError(fr.hdr.RequestID, 503, "busy")
	}
	// The deadline ends either a backoff (the last 503 is returned) or an
	// attempt in flight (its outcome is unknown); both are correct.
	inFlight := errors.Is(err503, ErrOutcomeUnknown) && errors.Is(err503, context.DeadlineExceeded)
	if !(errors.Is(err503, core.ErrUnavailable) || inFlight) || sends < 2 {
		t.Fatalf("err = %v after %d sends", err503, sends)
	}

	// Other codes are returned at once; declares do not retry 409.
	dch := async(func() error { _, err := c.DeclareQueue(context.Background(), QueueSpec{Topic: "t"}); return err })
	f = fc.expect(t, wire.OpDeclareQueue)
	fc.sendError(f.hdr.RequestID, 409, "conflicting partition count")
	if err := wait(t, dch); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("err = %v", err)
	}
	ch, _ = publishAsync(pub, Message{})
	f = fc.expect(t, wire.OpPublish)
	fc.sendError(f.hdr.RequestID, 400, "reserved header")
	if err := wait(t, ch); !errors.Is(err, core.ErrBadRequest) || Retryable(err) {
		t.Fatalf("err = %v", err)
	}
}

// A confirmed publish in flight when the socket dies: ErrOutcomeUnknown,
// and the publish is not replayed on the new connection.
func TestInFlightPublishNotReplayed(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	ch, _ := publishAsync(c.Publisher("t", PublisherOptions{}), Message{})
	fc.expect(t, wire.OpPublish)
	fc.close()
	if err := wait(t, ch); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("err = %v", err)
	}
	// The bootstrap reconnects on its own, resuming the session.
	fc2 := fb.next(t)
	if h := fc2.acceptHello(t, identityA, wire.ResumeResumed); !h.Resume.Present || h.Resume.Value != identityA {
		t.Fatalf("HELLO resume = %+v", h.Resume)
	}
	tch := async(func() error { _, err := c.Topology(context.Background(), "t"); return err })
	if req := fc2.answerTopology(t, wire.Topology{}); req.Topic != wire.Some("t") {
		t.Fatalf("TOPOLOGY = %+v", req)
	}
	if err := wait(t, tch); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, stepTimeout, "reconnect counted", func() bool { return c.Stats().Reconnects == 1 })
}

// An uncorrelated ERROR drops the connection; the client reconnects with
// its resume identity.
func TestUncorrelatedErrorReconnects(t *testing.T) {
	fb := newFake(t, nil)
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	fc.sendError(12345, 500, "stray")
	fc.expectEOF(t)
	fc2 := fb.next(t)
	if h := fc2.acceptHello(t, identityA, wire.ResumeResumed); h.Resume.Value != identityA {
		t.Fatalf("resume identity %+v", h.Resume)
	}
	if s := c.Stats(); s.UncorrelatedErrors != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Silence for 3 heartbeats: dead, reconnect.
func TestHeartbeatTimeoutReconnects(t *testing.T) {
	fb := newFake(t, nil)
	opts := testOptions(t, fb.addr)
	opts.Heartbeat = 20 * time.Millisecond
	c, fc := dialScripted(t, fb, opts, wire.Topology{})
	_ = fc // never answers the PINGs
	fc2 := fb.next(t)
	fc2.acceptHello(t, identityA, wire.ResumeResumed)
	testkit.Eventually(t, stepTimeout, "reconnect", func() bool { return c.Stats().Reconnects >= 1 })
}

// A new identity from the broker replaces the stored one; the next HELLO
// presents the latest.
func TestResumeIdentityUpdated(t *testing.T) {
	fb := newFake(t, nil)
	_, fc := dialScripted(t, fb, testOptions(t, fb.addr), wire.Topology{})
	fc.close()
	idB := wire.ResumeIdentity{OwnerID: uuidOf(1), ClientID: uuidOf(5), ResumeToken: uuidOf(6)}
	fc2 := fb.next(t)
	fc2.acceptHello(t, idB, wire.ResumeNotFound)
	fc2.close()
	fc3 := fb.next(t)
	if h := fc3.acceptHello(t, idB, wire.ResumeResumed); h.Resume.Value != idB {
		t.Fatalf("HELLO resume = %+v, want %+v", h.Resume.Value, idB)
	}
}

// TOPOLOGY_UPDATE is applied and acked with the same id and the cache's
// generation; older snapshots are ignored but still acked.
func TestTopologyUpdateAck(t *testing.T) {
	boot := newFake(t, nil)
	b := newFake(t, nil)
	c, fc := dialScripted(t, boot, testOptions(t, boot.addr), wire.Topology{Generation: 2})
	fc.send(wire.OpTopologyUpdate, 41, &wire.TopologyUpdate{Topology: wire.Topology{Generation: 7,
		Queues: []wire.QueueEntry{queueEntry("t", 0, 2, 1, b.endpoint()), queueEntry("t", 1, 2, 1)}}})
	f := fc.expect(t, wire.OpTopologyUpdateAck)
	if f.hdr.RequestID != 41 || f.body.(*wire.TopologyUpdateAck).Generation != 7 {
		t.Fatalf("ack id %d body %+v", f.hdr.RequestID, f.body)
	}
	fc.send(wire.OpTopologyUpdate, 42, &wire.TopologyUpdate{Topology: wire.Topology{Generation: 5}})
	f = fc.expect(t, wire.OpTopologyUpdateAck)
	if f.hdr.RequestID != 42 || f.body.(*wire.TopologyUpdateAck).Generation != 7 {
		t.Fatalf("ack id %d body %+v", f.hdr.RequestID, f.body)
	}
	if n, v, ok := c.topo.count("t", wire.None[string]()); !ok || n != 2 || v != 1 {
		t.Fatalf("count %d version %d known %v", n, v, ok)
	}
	if c.topo.owner(routeKey{topic: "t"}) != b.addr {
		t.Fatal("owner not cached")
	}

	// Connect to B, then a snapshot in which B owns nothing closes it.
	ch, _ := publishAsync(c.Publisher("t", PublisherOptions{}), Message{Partition: new(uint32)})
	bfc := b.next(t)
	bfc.acceptHello(t, identityA, wire.ResumeNew)
	f = bfc.expect(t, wire.OpPublish)
	bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	fc.send(wire.OpTopologyUpdate, 43, &wire.TopologyUpdate{Topology: wire.Topology{Generation: 8,
		Queues: []wire.QueueEntry{queueEntry("t", 0, 2, 1), queueEntry("t", 1, 2, 1)}}})
	fc.expect(t, wire.OpTopologyUpdateAck)
	bfc.expectEOF(t)
}

func TestErrorMatching(t *testing.T) {
	e := &Error{Op: wire.OpSubscribe, Code: 409, Message: "already subscribed"}
	if !errors.Is(e, core.ErrConflict) || errors.Is(e, core.ErrInternal) || !e.Retryable() {
		t.Fatal("409 matching")
	}
	if e.Error() != "fibril: SUBSCRIBE: 409 already subscribed" {
		t.Fatal(e.Error())
	}
	if errors.Is(&Error{Code: 500}, errors.New("x")) {
		t.Fatal("matched a foreign error")
	}
	for _, code := range []uint16{1, 400, 401, 403, 404, 426} {
		if (&Error{Code: code}).Retryable() {
			t.Errorf("code %d retryable", code)
		}
	}
	if !Retryable(&OutcomeUnknownError{Op: wire.OpPublish, Cause: ErrConnectionLost}) || Retryable(protocolErrorf("x")) {
		t.Fatal("Retryable")
	}
}

// Every publish in flight meets the same fence, and one TOPOLOGY request
// serves them all: a publish fenced after the first one's refresh routes
// again by what it taught the cache ("after"), and one fenced while that
// refresh is in flight waits for it ("during"); neither makes a request
// of its own.
func TestFenceRefreshesOnce(t *testing.T) {
	for _, during := range []bool{false, true} {
		t.Run(map[bool]string{false: "after", true: "during"}[during], func(t *testing.T) {
			boot := newFake(t, nil)
			c, bfc := dialScripted(t, boot, testOptions(t, boot.addr),
				wire.Topology{Generation: 1, Queues: []wire.QueueEntry{queueEntry("t", 0, 1, 1)}})
			bfc.standing = nil // every TOPOLOGY request is answered below, or fails expect
			pub := c.Publisher("t", PublisherOptions{})
			ch1, _ := publishAsync(pub, Message{Key: []byte("a")})
			f1 := bfc.expect(t, wire.OpPublish)
			ch2, _ := publishAsync(pub, Message{Key: []byte("b")})
			f2 := bfc.expect(t, wire.OpPublish)
			fence := func(f frame) {
				bfc.send(wire.OpRedirect, f.hdr.RequestID, &wire.Redirect{Topic: "t", PartitioningVersion: 2})
			}
			refresh := func() {
				bfc.answerTopology(t, wire.Topology{Generation: 2, Queues: []wire.QueueEntry{queueEntry("t", 0, 2, 2), queueEntry("t", 1, 2, 2)}})
			}
			resent := func() {
				t.Helper()
				f := bfc.expect(t, wire.OpPublish) // a second TOPOLOGY request fails here
				if pb := f.body.(*wire.Publish); pb.PartitioningVersion != 2 {
					t.Fatalf("re-sent PUBLISH carries version %d, want 2", pb.PartitioningVersion)
				}
				bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
			}
			fence(f1)
			if during {
				fence(f2)
				refresh()
				resent()
				resent()
			} else {
				refresh()
				resent()
				fence(f2)
				resent()
			}
			for _, ch := range []<-chan error{ch1, ch2} {
				if err := wait(t, ch); err != nil {
					t.Fatal(err)
				}
			}
			if n := c.Stats().Fenced; n != 2 {
				t.Fatalf("Stats().Fenced = %d, want 2", n)
			}
		})
	}
}

// A client that publishes to a queue connects to a partition's owner as
// soon as the topology lists it, before any publish needs it: a
// repartition lists its new partitions (placed, beyond the count) before
// the cutover fences producers to them, and the connect and login then
// stay out of the fenced publishes' pause (warm.go).
func TestOwnersDialedAheadOfNeed(t *testing.T) {
	boot := newFake(t, nil)
	b := newFake(t, nil)
	c, fc := dialScripted(t, boot, testOptions(t, boot.addr),
		wire.Topology{Generation: 2, Queues: []wire.QueueEntry{queueEntry("t", 0, 1, 1)}})
	c.Publisher("t", PublisherOptions{})
	// Partition 1 placed on B, the count still 1 (a grow before its cutover).
	fc.send(wire.OpTopologyUpdate, 41, &wire.TopologyUpdate{Topology: wire.Topology{Generation: 3,
		Queues: []wire.QueueEntry{queueEntry("t", 0, 1, 1), queueEntry("t", 1, 1, 1, b.endpoint())}}})
	fc.expect(t, wire.OpTopologyUpdateAck)
	bfc := b.next(t) // fails unless the client dials B by itself
	bfc.acceptHello(t, identityA, wire.ResumeNew)

	// The first publish routed to partition 1 uses that connection.
	one := uint32(1)
	ch, _ := publishAsync(c.Publisher("t", PublisherOptions{}), Message{Partition: &one})
	f := bfc.expect(t, wire.OpPublish)
	bfc.send(wire.OpPublishOK, f.hdr.RequestID, &wire.PublishOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
}
