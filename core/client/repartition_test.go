package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// These tests play a broker through a repartition (S-126, docs/repartition.md):
// a grow's new partitions appear in the topology, a shrink's retired ones
// end their subscriptions with owner_moved and are then gone from the
// topology and answer SUBSCRIBE with 404.

// autoBroker answers one fake connection in the background, as a broker
// would: TOPOLOGY with its current topology, SUBSCRIBE with SUBSCRIBE_OK
// (a fresh sub_id) for a partition it serves, else SUBSCRIBE_ERR 404.
// Every SUBSCRIBE and TOPOLOGY request is reported on its channels.
type autoBroker struct {
	fc     *fakeConn
	subs   chan *wire.Subscribe
	topoRq chan *wire.TopologyRequest

	mu      sync.Mutex
	topo    wire.Topology
	serves  func(topic string, p uint32) bool
	nextID  uint64
	subIDOf map[string]uint64 // "topic/partition" → the latest sub_id
}

func serveAuto(t *testing.T, fc *fakeConn, topo wire.Topology, serves func(string, uint32) bool) *autoBroker {
	ab := &autoBroker{fc: fc, subs: make(chan *wire.Subscribe, 64), topoRq: make(chan *wire.TopologyRequest, 64),
		topo: topo, serves: serves, nextID: 100, subIDOf: map[string]uint64{}}
	go ab.loop()
	return ab
}

func (ab *autoBroker) loop() {
	for {
		f, err := ab.fc.readRaw(time.Minute)
		if err != nil {
			return
		}
		switch f.hdr.Op {
		case wire.OpPing:
			ab.fc.send(wire.OpPong, f.hdr.RequestID, nil)
		case wire.OpTopology:
			ab.mu.Lock()
			topo := ab.topo
			ab.mu.Unlock()
			ab.fc.send(wire.OpTopologyOK, f.hdr.RequestID, &wire.TopologyOK{Topology: topo})
			ab.topoRq <- f.body.(*wire.TopologyRequest)
		case wire.OpSubscribe:
			s := f.body.(*wire.Subscribe)
			ab.mu.Lock()
			ok := ab.serves(s.Topic, s.Partition)
			ab.nextID++
			id := ab.nextID
			if ok {
				ab.subIDOf[subKey(s.Topic, s.Partition)] = id
			}
			ab.mu.Unlock()
			if ok {
				ab.fc.send(wire.OpSubscribeOK, f.hdr.RequestID, &wire.SubscribeOK{
					SubID: id, Topic: s.Topic, Partition: s.Partition, Group: s.Group, Prefetch: s.Prefetch})
			} else {
				ab.fc.send(wire.OpSubscribeErr, f.hdr.RequestID, &wire.ErrorBody{Code: wire.CodeNotFound, Message: "not declared in this cluster"})
			}
			ab.subs <- s
		}
	}
}

func subKey(topic string, p uint32) string { return fmt.Sprintf("%s/%d", topic, p) }

func (ab *autoBroker) subID(topic string, p uint32) uint64 {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return ab.subIDOf[subKey(topic, p)]
}

// deliverAndNext sends a DELIVER on the latest subscription of the
// partition and checks that Next hands it out.
func (ab *autoBroker) deliverAndNext(t *testing.T, sub *Subscription, topic string, p uint32, payload string) {
	t.Helper()
	sendDeliver(ab.fc, ab.subID(topic, p), topic, p, 1, payload)
	if d := next(t, sub); d.Partition != p || string(d.Payload) != payload {
		t.Fatalf("delivery %+v, want %q from partition %d", d, payload, p)
	}
}

// set changes what the broker serves: its topology and its partitions.
func (ab *autoBroker) set(topo wire.Topology, serves func(string, uint32) bool) {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	ab.topo = topo
	if serves != nil {
		ab.serves = serves
	}
}

// push sends the current topology as a TOPOLOGY_UPDATE.
func (ab *autoBroker) push() {
	ab.mu.Lock()
	topo := ab.topo
	ab.mu.Unlock()
	ab.fc.send(wire.OpTopologyUpdate, 0, &wire.TopologyUpdate{Topology: topo})
}

// expectSubscribes waits for SUBSCRIBEs of topic until the partitions in
// want all came (others of topic fail the test) and returns them.
func (ab *autoBroker) expectSubscribes(t *testing.T, topic string, want ...uint32) {
	t.Helper()
	got := map[uint32]bool{}
	deadline := time.After(stepTimeout)
	for len(got) < len(want) {
		select {
		case s := <-ab.subs:
			if s.Topic != topic || !slices.Contains(want, s.Partition) {
				t.Fatalf("SUBSCRIBE %q/%d, want %q partitions %v", s.Topic, s.Partition, topic, want)
			}
			got[s.Partition] = true
		case <-deadline:
			t.Fatalf("SUBSCRIBEs of %q: got %v, want %v", topic, got, want)
		}
	}
}

// expectNoSubscribe fails the test when a SUBSCRIBE arrives within d.
func (ab *autoBroker) expectNoSubscribe(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case s := <-ab.subs:
		t.Fatalf("unexpected SUBSCRIBE %q/%d", s.Topic, s.Partition)
	case <-time.After(d):
	}
}

// queueTopo is a topology listing partitions listed of each queue, with
// the given partition count and partitioning version.
func queueTopo(gen uint64, queues map[string][3]uint32) wire.Topology {
	topo := wire.Topology{Generation: gen}
	for topic, q := range queues {
		listed, count, version := q[0], q[1], uint64(q[2])
		for p := range listed {
			topo.Queues = append(topo.Queues, queueEntry(topic, p, count, version))
		}
	}
	return topo
}

func below(n uint32) func(string, uint32) bool {
	return func(_ string, p uint32) bool { return p < n }
}

func sortedParts(s *Subscription) []uint32 {
	p := s.Partitions()
	slices.Sort(p)
	return p
}

func subscribeAsync(t *testing.T, c *Client, topic string, opts SubscribeOptions) func() *Subscription {
	var sub *Subscription
	ch := async(func() error {
		var err error
		sub, err = c.Subscribe(context.Background(), topic, opts)
		return err
	})
	return func() *Subscription {
		t.Helper()
		if err := wait(t, ch); err != nil {
			t.Fatalf("Subscribe %q: %v", topic, err)
		}
		t.Cleanup(func() { sub.Close() })
		return sub
	}
}

// quiet checks that Next has nothing to say for a while: no delivery and,
// above all, no error.
func quiet(t *testing.T, s *Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if d, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, %v; want nothing (deadline)", d, err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
}

// A subscription to every partition follows a grow that a TOPOLOGY_UPDATE
// announces: it subscribes the new partitions and delivers from them. One
// with explicit partitions keeps them.
func TestSubscriptionFollowsGrowPush(t *testing.T) {
	fb := newFake(t, nil)
	topo := queueTopo(1, map[string][3]uint32{"q": {2, 2, 1}, "r": {2, 2, 1}})
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), topo)
	ab := serveAuto(t, fc, topo, below(2))
	wq := subscribeAsync(t, c, "q", SubscribeOptions{})
	ab.expectSubscribes(t, "q", 0, 1)
	sub := wq()
	wr := subscribeAsync(t, c, "r", SubscribeOptions{Partitions: []uint32{0, 1}})
	ab.expectSubscribes(t, "r", 0, 1)
	explicit := wr()

	ab.set(queueTopo(2, map[string][3]uint32{"q": {4, 4, 2}, "r": {4, 4, 2}}), below(4))
	ab.push()
	ab.expectSubscribes(t, "q", 2, 3)
	ab.expectNoSubscribe(t, 200*time.Millisecond)
	if got := sortedParts(sub); !slices.Equal(got, []uint32{0, 1, 2, 3}) {
		t.Fatalf("partitions %v after the grow", got)
	}
	if got := explicit.Partitions(); !slices.Equal(got, []uint32{0, 1}) {
		t.Fatalf("explicit partitions %v after the grow", got)
	}
	ab.deliverAndNext(t, sub, "q", 3, "new")
}

// Without any push, the periodic refresh (Options.TopologyRefresh) finds
// the grow.
func TestSubscriptionFollowsGrowPeriodicRefresh(t *testing.T) {
	fb := newFake(t, nil)
	topo := queueTopo(1, map[string][3]uint32{"q": {2, 2, 1}})
	opts := testOptions(t, fb.addr)
	opts.TopologyRefresh = 20 * time.Millisecond
	c, fc := dialScripted(t, fb, opts, topo)
	ab := serveAuto(t, fc, topo, below(2))
	w := subscribeAsync(t, c, "q", SubscribeOptions{})
	ab.expectSubscribes(t, "q", 0, 1)
	sub := w()
	select {
	case rq := <-ab.topoRq:
		if v, _ := rq.Topic.Get(); v != "q" {
			t.Fatalf("periodic TOPOLOGY for %q, want the subscribed queue", v)
		}
	case <-time.After(stepTimeout):
		t.Fatal("no periodic TOPOLOGY")
	}
	ab.set(queueTopo(2, map[string][3]uint32{"q": {4, 4, 2}}), below(4))
	ab.expectSubscribes(t, "q", 2, 3)
	testkit.Eventually(t, stepTimeout, "4 partitions", func() bool { return len(sub.Partitions()) == 4 })
}

// A shrink's retired partitions end quietly in a subscription to every
// partition: one because the refreshed topology no longer lists it, the
// other because its re-subscribe answers 404 (a broker whose view still
// lists it). The others keep delivering; a later grow brings them back.
func TestSubscriptionRetiredPartitionsEndQuietly(t *testing.T) {
	fb := newFake(t, nil)
	topo := queueTopo(1, map[string][3]uint32{"q": {4, 4, 1}})
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), topo)
	ab := serveAuto(t, fc, topo, below(4))
	w := subscribeAsync(t, c, "q", SubscribeOptions{})
	ab.expectSubscribes(t, "q", 0, 1, 2, 3)
	sub := w()

	// Finalized 4 → 2: the topology still lists 3 (a stale view), not 2.
	shrunk := queueTopo(2, map[string][3]uint32{"q": {2, 2, 2}})
	shrunk.Queues = append(shrunk.Queues, queueEntry("q", 3, 2, 2))
	ab.set(shrunk, below(2))
	for _, p := range []uint32{2, 3} {
		fc.send(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: ab.subID("q", p), Code: wire.ReasonOwnerMoved,
			Message: "partition retired: queue q now has 2 partitions"})
	}
	testkit.Eventually(t, stepTimeout, "partitions 0 and 1", func() bool { return slices.Equal(sortedParts(sub), []uint32{0, 1}) })
	ab.deliverAndNext(t, sub, "q", 0, "still")
	quiet(t, sub)

	// Grown again 2 → 4: partitions 2 and 3 come back.
	ab.set(queueTopo(3, map[string][3]uint32{"q": {4, 4, 3}}), below(4))
	ab.push()
	ab.expectSubscribes(t, "q", 2, 3)
	testkit.Eventually(t, stepTimeout, "partitions 0 to 3", func() bool { return slices.Equal(sortedParts(sub), []uint32{0, 1, 2, 3}) })
	ab.deliverAndNext(t, sub, "q", 2, "back")
}

// A subscription that named a retired partition hears about it: that
// partition ends with ErrPartitionRetired (not topic_deleted, and no
// retrying); the other keeps delivering.
func TestSubscriptionExplicitRetiredPartitionErrors(t *testing.T) {
	fb := newFake(t, nil)
	topo := queueTopo(1, map[string][3]uint32{"q": {4, 4, 1}})
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), topo)
	ab := serveAuto(t, fc, topo, below(4))
	w := subscribeAsync(t, c, "q", SubscribeOptions{Partitions: []uint32{0, 3}})
	ab.expectSubscribes(t, "q", 0, 3)
	sub := w()
	ab.set(queueTopo(2, map[string][3]uint32{"q": {2, 2, 2}}), below(2))
	fc.send(wire.OpSubscriptionClosed, 0, &wire.SubscriptionClosed{SubID: ab.subID("q", 3), Code: wire.ReasonOwnerMoved, Message: "partition retired"})
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	_, err := sub.Next(ctx)
	var sc *SubscriptionClosedError
	if !errors.Is(err, ErrPartitionRetired) || !errors.As(err, &sc) || sc.Partition != 3 || sc.Reason == wire.ReasonTopicDeleted {
		t.Fatalf("Next = %v, want partition 3 retired", err)
	}
	ab.deliverAndNext(t, sub, "q", 0, "p0")
	if err := sub.Err(); err != nil {
		t.Fatalf("Err = %v while partition 0 lives", err)
	}
}

// A Subscribe to every partition from a stale cache (it still has the
// count before a shrink) leaves out the partitions that answer 404 and
// that the refreshed topology retired, instead of failing.
func TestSubscribeSkipsRetiredPartitions(t *testing.T) {
	fb := newFake(t, nil)
	topo := queueTopo(1, map[string][3]uint32{"q": {4, 4, 1}})
	c, fc := dialScripted(t, fb, testOptions(t, fb.addr), topo)
	ab := serveAuto(t, fc, queueTopo(2, map[string][3]uint32{"q": {2, 2, 2}}), below(2))
	w := subscribeAsync(t, c, "q", SubscribeOptions{})
	sub := w()
	if got := sortedParts(sub); !slices.Equal(got, []uint32{0, 1}) {
		t.Fatalf("partitions %v, want [0 1]", got)
	}
	ab.deliverAndNext(t, sub, "q", 1, "p1")
	quiet(t, sub)
}
