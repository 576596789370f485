package session

import (
	"context"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// Router is the coordinated mode's part in a session: where each partition
// operation goes, the catalog, and the topology. nil (Options.Router) is
// standalone mode: every partition is served here, queues are created on
// first use (S-21) and TOPOLOGY answers as S-113 says. core/routing's
// SessionRouter implements it over the cluster view.
type Router interface {
	// Route decides a PUBLISH / PUBLISH_DELAYED (publish, with the
	// request's partitioning version, fenced per docs/protocol.md#topology) or a
	// SUBSCRIBE for ref. A Serve answer has made sure the partition may be
	// written here: the node's lease is surely valid and the partition is
	// declared locally (and, for a publish, marked written, S-138).
	// Route is on the hot path of every publish: it must not allocate or
	// block in the common case (it may wait for the one coordination write
	// of a first-write mark, bounded by routeTimeout). forwarded is true
	// on a forwarded session (docs/protocol.md#extensions): one hop, it never forwards again.
	Route(ref core.PartitionRef, publish bool, version uint64, forwarded bool) Route
	// DeclareQueue and DeclareStream record a declaration cluster-wide
	// and return the cluster's decision.
	DeclareQueue(ctx context.Context, spec queue.QueueSpec) (queue.QueueInfo, error)
	DeclareStream(ctx context.Context, spec queue.StreamSpec) (queue.StreamInfo, error)
	// Topology answers TOPOLOGY (S-112, S-114).
	Topology(req wire.TopologyRequest) wire.Topology
	// Generation is the current topology generation; Changed is closed
	// when it may have moved.
	Generation() uint64
	Changed() <-chan struct{}
}

// Route is a Router's answer for one operation: serve it here, answer
// REDIRECT with Redirect, or answer ERROR with Err's code.
type Route struct {
	Serve    bool
	Redirect *wire.Redirect
	Err      error
	// Forward names the owner to relay the operation to over an upstream
	// session (core/forward); Err is then the answer when that cannot be
	// done (no Options.Upstreams).
	Forward core.NodeID
}

// routeTimeout bounds what a Route or a declaration may wait for (the
// first-write mark is one coordination write).
const routeTimeout = 5 * time.Second

// route asks the router about ref; standalone mode serves everything.
func (c *Conn) route(topic string, group wire.Option[string], partition uint32, publish bool, version uint64) Route {
	r := c.srv.opts.Router
	if r == nil {
		return Route{Serve: true}
	}
	return r.Route(partitionRef(topic, group, partition), publish, version, c.forwarded != nil)
}

// partitionRef names a partition from its wire fields: an absent group is
// "", as the engine keys queues.
func partitionRef(topic string, group wire.Option[string], partition uint32) core.PartitionRef {
	g := ""
	if group.Present {
		g = group.Value
	}
	return core.PartitionRef{Topic: topic, Group: g, Partition: partition}
}

// pushTopology is the live topology push (S-119, docs/protocol.md#topology): whenever
// the routing content changes — the router's generation moves only then —
// every attached, authenticated session gets one TOPOLOGY_UPDATE with the
// full topology. A session's "last pushed" starts at the generation of its
// connect, so the snapshot a client fetches itself is not pushed again.
// Bursts of changes are merged by a short pause.
func (s *Server) pushTopology(stop <-chan struct{}) {
	r := s.opts.Router
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		changed := r.Changed()
		select {
		case <-stop:
			return
		case <-changed:
			select {
			case <-stop:
				return
			case <-time.After(topologyPushPause):
			}
		case <-tick.C:
		}
		gen := r.Generation()
		var body *wire.TopologyUpdate
		for _, sess := range s.sessions.all() {
			if !sess.topologyStale(gen) {
				continue
			}
			if body == nil {
				body = &wire.TopologyUpdate{Topology: r.Topology(wire.TopologyRequest{})}
			}
			sess.notify(wire.OpTopologyUpdate, body)
			s.opts.Metrics.TopologyPushes.Inc()
		}
	}
}

// topologyPushPause merges a burst of cluster changes into one push.
const topologyPushPause = 50 * time.Millisecond

// topologyStale reports whether the session should get a push for gen,
// and records gen as pushed when so.
func (s *Session) topologyStale(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.dormant || s.principal == nil || s.pushedGen >= gen {
		return false
	}
	if s.principal.Node && s.forwarded == nil {
		// A peer's own connection (a replication stream, a probe): the
		// peer takes its view from coordination and discards the push.
		// A follower holds one such connection per partition it follows,
		// so pushing the whole topology to each would cost the owner
		// partitions² bytes per change.
		return false
	}
	s.pushedGen = gen
	return true
}

// seedTopology records the generation a connection starts from.
func (s *Session) seedTopology(r Router) {
	if r == nil {
		return
	}
	gen := r.Generation()
	s.mu.Lock()
	if gen > s.pushedGen {
		s.pushedGen = gen
	}
	s.mu.Unlock()
}
