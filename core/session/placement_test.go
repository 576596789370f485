package session

import (
	"context"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// placingRouter is a Router whose declarations are placed only when the
// test says so (release), as a cluster's placement controller would.
type placingRouter struct {
	waiting chan string   // the topic of each AwaitPlacement that started
	release chan struct{} // closed: every partition is placed
	ended   chan error    // ctx.Err() of each AwaitPlacement that gave up on ctx
}

func newPlacingRouter() *placingRouter {
	return &placingRouter{waiting: make(chan string, 8), release: make(chan struct{}), ended: make(chan error, 8)}
}

func (r *placingRouter) Route(core.PartitionRef, bool, uint64, bool) Route { return Route{Serve: true} }

func (r *placingRouter) DeclareQueue(_ context.Context, spec queue.QueueSpec) (queue.QueueInfo, error) {
	n := uint32(1)
	if spec.PartitionCount.Present {
		n = spec.PartitionCount.Value
	}
	return queue.QueueInfo{Key: spec.Key, PartitionCount: n}, nil
}

func (r *placingRouter) DeclareStream(_ context.Context, spec queue.StreamSpec) (queue.StreamInfo, error) {
	return queue.StreamInfo{StreamSpec: spec, PartitionCount: 1}, nil
}

func (r *placingRouter) Topology(wire.TopologyRequest) wire.Topology { return wire.Topology{} }
func (r *placingRouter) Generation() uint64                          { return 0 }
func (r *placingRouter) Changed() <-chan struct{}                    { return nil }

func (r *placingRouter) AwaitPlacement(ctx context.Context, topic, _ string, _ bool) {
	r.waiting <- topic
	select {
	case <-r.release:
	case <-ctx.Done():
		r.ended <- ctx.Err()
	}
}

// A declaration's answer waits for placement without holding up the
// reader: while DECLARE_QUEUE waits, a PING and a second request on the
// same connection are answered; DECLARE_QUEUE_OK follows once the
// partitions are placed, with what was stored.
func TestDeclareAnswerWaitsForPlacementOffTheReader(t *testing.T) {
	r := newPlacingRouter()
	e := newEnv(t, func(o *Options) { o.Router = r })
	c := e.dial()
	c.login()
	declID := c.Send(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "orders", PartitionCount: wire.Some(uint32(3))})
	select {
	case topic := <-r.waiting:
		if topic != "orders" {
			t.Fatalf("placement awaited for %q", topic)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the declaration did not wait for placement")
	}
	pingID := c.Send(wire.OpPing, nil)
	c.Expect(wire.OpPong, pingID)
	topoID := c.Send(wire.OpTopology, &wire.TopologyRequest{})
	c.Expect(wire.OpTopologyOK, topoID)
	close(r.release)
	ok := c.Expect(wire.OpDeclareQueueOK, declID).(*wire.DeclareQueueOK)
	if ok.Status != "stored" || ok.PartitionCount != 3 {
		t.Fatalf("DECLARE_QUEUE_OK = %+v", ok)
	}
}

// A connection that ends while its declaration waits for placement stops
// the wait: nothing is left running for an answer nobody reads.
func TestDeclareWaitEndsWithTheConnection(t *testing.T) {
	r := newPlacingRouter()
	e := newEnv(t, func(o *Options) { o.Router = r })
	c := e.dial()
	c.login()
	c.Send(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "orders"})
	select {
	case <-r.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the declaration did not wait for placement")
	}
	c.nc.Close()
	select {
	case err := <-r.ended:
		if err == nil {
			t.Fatal("the wait ended without a reason")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the placement wait outlived its connection")
	}
}
