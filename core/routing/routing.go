package routing

import (
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/wire"
)

// Action is what to do with a partition operation.
type Action int

const (
	// Serve: this broker owns the partition.
	Serve Action = iota
	// Redirect: answer REDIRECT (op 92) with Decision.Endpoints.
	Redirect
	// Refuse: answer ERROR with Decision.Err's code.
	Refuse
	// Forward: relay the operation to Decision.Partition's owner over an
	// upstream session (a public broker serving a private owner, or an
	// owner behind this broker's own shared address). Decision.Err holds
	// the 503 a broker answers while it cannot forward.
	Forward
)

// Decision is the answer for one partition operation.
type Decision struct {
	Action    Action
	Partition cluster.Partition
	// Endpoints are the client-facing endpoints of a Redirect.
	Endpoints []core.Endpoint
	// Version is the channel's partitioning version (REDIRECT body).
	Version uint64
	// Err wraps the sentinel whose code answers a Refuse.
	Err error
}

// Self is what the rule needs to know about this broker.
type Self struct {
	ID core.NodeID
	// Advertise is this broker's own client endpoint list; an owner whose
	// endpoints are all among these is not redirected to (it would loop).
	Advertise []core.Endpoint
	// Private brokers never forward (core/routing/README.md#handler-rule).
	Private bool
}

// errCannotForward answers a Forward on a broker without upstream sessions.
var errCannotForward = core.Errorf(core.ErrUnavailable, "the partition's owner is reached through forwarding, which this broker cannot do now; retry")

// Decide applies the handler rule to one partition (core/routing/README.md#handler-rule; docs/protocol.md#answers
// holds the answers), for an operation that did not already fail the
// fence. forwarded is true on a forwarded session (one hop: it never
// forwards again).
//
//   - not declared → 404;
//   - no owner yet → 503 on a broker that would forward (a public one,
//     not on a forwarded session), else 409 (S-117: the cluster is
//     converging);
//   - this broker owns it → Serve (the caller still answers 503 while
//     recovering or while its lease is not surely valid);
//   - the owner is dead → 503 (it holds the only copy, or it is about to
//     be re-placed; S-138);
//   - the owner's client endpoints are known and not all this broker's
//     own → Redirect to them;
//   - otherwise (a private owner, or an owner behind this broker's own
//     shared address): Forward on a broker that may forward; else Redirect
//     to the partition's gateway endpoints, or 409 when those are this
//     broker's own (never a redirect to itself).
func Decide(s *cluster.Snapshot, self Self, ref core.PartitionRef, forwarded bool) Decision {
	p, ok := s.Partition(ref)
	if !ok {
		if q := s.Queue(ref.Topic, ref.Group); q != nil {
			// Past the count: never there, or retired by a shrink.
			return Decision{Action: Refuse, Err: core.Errorf(core.ErrNotFound, "queue %s has %d partitions; partition %d does not exist (a repartition may have retired it)",
				queueName(ref), q.Info.PartitionCount, ref.Partition)}
		}
		return Decision{Action: Refuse, Err: core.Errorf(core.ErrNotFound, "%s is not declared in this cluster", describe(ref))}
	}
	d := Decision{Partition: p, Version: version(s, ref)}
	mayForward := !self.Private && !forwarded
	switch {
	case !p.Placed() && mayForward:
		d.Action, d.Err = Refuse, core.Errorf(core.ErrUnavailable, "partition %s has no owner in this broker's view yet; retry", ref)
	case !p.Placed():
		d.Action, d.Err = Refuse, core.Errorf(core.ErrConflict, "partition %s has no owner yet; the cluster is still converging, retry", ref)
	case p.Node == self.ID:
		d.Action = Serve
	case !s.Live(p.Node):
		d.Action = Refuse
		if p.Written {
			d.Err = core.Errorf(core.ErrUnavailable, "partition %s is unavailable: its owner %s is down and holds the only copy; retry", ref, p.Node)
		} else {
			d.Err = core.Errorf(core.ErrUnavailable, "partition %s is unavailable: its owner %s is down and it is being re-placed; retry", ref, p.Node)
		}
	default:
		if own := ownAdvertise(s, p.Node); len(own) > 0 && !allOwn(own, self.Advertise) {
			d.Action, d.Endpoints = Redirect, own
			return d
		}
		if mayForward {
			// A fixed error: Forward is the hot path of every forwarded
			// operation, and this answer is only used by a broker that
			// cannot forward at all.
			d.Action, d.Err = Forward, errCannotForward
			return d
		}
		if eps := ClientEndpoints(s, p); len(eps) > 0 && !allOwn(eps, self.Advertise) {
			d.Action, d.Endpoints = Redirect, eps
			return d
		}
		d.Action = Refuse
		d.Err = core.Errorf(core.ErrConflict, "partition %s is owned by %s and this broker does not forward; re-fetch the topology", ref, p.Node)
	}
	return d
}

// Fence applies the partitioning-version fence (docs/protocol.md#topology, S-118) to a
// PUBLISH / PUBLISH_DELAYED carrying version: when the channel's version
// is newer and the owner resolves, it returns a Redirect to the owner with
// the newer version — even to this broker's own address. ok is false when
// the publish passes the fence.
func Fence(s *cluster.Snapshot, ref core.PartitionRef, published uint64) (Decision, bool) {
	v := version(s, ref)
	if published >= v {
		return Decision{}, false
	}
	p, ok := s.Partition(ref)
	if !ok || !p.Placed() || !s.Live(p.Node) {
		return Decision{}, false
	}
	eps := ClientEndpoints(s, p)
	if len(eps) == 0 {
		return Decision{}, false
	}
	return Decision{Action: Redirect, Partition: p, Endpoints: eps, Version: v}, true
}

// ClientEndpoints is the one function that builds a client-facing
// endpoint list, for partition p: a live public owner's advertised list;
// for a live private owner, the list of the partition's gateway — the
// public broker Rendezvous picks among the snapshot's gateways, so every
// broker names the same one (core/routing/README.md#gateway-set); else none (an empty
// list sends a client to its bootstrap broker, S-115). A private broker's
// address is never returned: only TopologyEndpoints adds one, tagged, and
// only when the operator exposes them.
func ClientEndpoints(s *cluster.Snapshot, p cluster.Partition) []core.Endpoint {
	if !p.Placed() {
		return nil
	}
	m := s.Members[p.Node]
	if m == nil || !m.Live {
		return nil
	}
	if m.Info.Visibility() != core.Private {
		return m.Info.Advertise()
	}
	gw := Rendezvous(p.Ref, s.Gateways)
	if gw == "" {
		return nil
	}
	return s.Members[gw].Info.Advertise()
}

// TopologyEndpoints is a partition's endpoint list in a topology answer
// (and only there; core/routing/README.md#private-endpoints):
// ClientEndpoints, followed — when exposePrivate is set
// (routing.expose_private_endpoints), the owner is a live private broker
// that publishes its client addresses (core.LabelPrivateAdvertise) and the
// partition has gateway endpoints — by the owner's own addresses, each
// tagged core.TagPrivate. Gateway endpoints always come first, so an SDK
// that dials the first entry keeps using the gateway; an entry with no
// gateway gets no private addresses either.
func TopologyEndpoints(s *cluster.Snapshot, p cluster.Partition, exposePrivate bool) []core.Endpoint {
	eps := ClientEndpoints(s, p)
	if !exposePrivate || len(eps) == 0 {
		return eps
	}
	m := s.Members[p.Node] // live: ClientEndpoints answered
	if m.Info.Visibility() != core.Private {
		return eps
	}
	own, err := core.ParseEndpoints(m.Info.Labels[core.LabelPrivateAdvertise])
	if err != nil || len(own) == 0 {
		return eps
	}
	out := make([]core.Endpoint, 0, len(eps)+len(own))
	out = append(out, eps...)
	for _, e := range own {
		out = append(out, core.Endpoint{Host: e.Host, Port: e.Port, Tags: []string{core.TagPrivate}})
	}
	return out
}

// ownAdvertise is the client list a live owner advertises itself (none
// for a private one).
func ownAdvertise(s *cluster.Snapshot, owner core.NodeID) []core.Endpoint {
	m := s.Members[owner]
	if m == nil || !m.Live || m.Info.Visibility() == core.Private {
		return nil
	}
	return m.Info.Advertise()
}

// Wire converts endpoints to their wire form.
func Wire(eps []core.Endpoint) []wire.AdvertisedAddress {
	if len(eps) == 0 {
		return nil
	}
	out := make([]wire.AdvertisedAddress, len(eps))
	for i, e := range eps {
		out[i] = wire.AdvertisedAddress{Host: e.Host, Port: e.Port, Tags: e.Tags}
	}
	return out
}

// RedirectBody builds the REDIRECT (op 92) body for d.
func RedirectBody(d Decision) *wire.Redirect {
	r := &wire.Redirect{Topic: d.Partition.Ref.Topic, Partition: d.Partition.Ref.Partition,
		Owners: Wire(d.Endpoints), PartitioningVersion: d.Version}
	if d.Partition.Ref.Group != "" {
		r.Group = wire.Some(d.Partition.Ref.Group)
	}
	return r
}

func allOwn(eps, own []core.Endpoint) bool {
	for _, e := range eps {
		found := false
		for _, o := range own {
			if e.Equal(o) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func version(s *cluster.Snapshot, ref core.PartitionRef) uint64 {
	if q := s.Queue(ref.Topic, ref.Group); q != nil {
		return q.Info.PartitioningVersion
	}
	return 0
}

func describe(ref core.PartitionRef) string {
	if ref.Group != "" {
		return "queue " + ref.Topic + "/" + ref.Group
	}
	return "queue or stream " + ref.Topic
}

// Topology builds the TOPOLOGY answer (S-112, S-114; docs/protocol.md#topology): every
// declared queue and stream partition, narrowed by the request's filters,
// with the partition's client endpoints (TopologyEndpoints: the owner's, or
// for a private owner its gateway's, then with exposePrivate the private
// owner's own, tagged private; empty while unplaced or while the owner is
// dead), the partition count on every entry and the snapshot's generation.
func Topology(s *cluster.Snapshot, req wire.TopologyRequest, exposePrivate bool) wire.Topology {
	t := wire.Topology{Generation: s.Generation}
	topic, hasTopic := req.Topic.Get()
	group, hasGroup := req.Group.Get()
	for _, q := range s.Queues {
		if hasTopic && q.Info.Topic != topic || hasTopic && hasGroup && q.Info.Group.Value != normGroup(group) {
			continue
		}
		for _, p := range q.Parts {
			t.Queues = append(t.Queues, wire.QueueEntry{Topic: q.Info.Topic, Partition: p.Ref.Partition, Group: q.Info.Group,
				Owners: Wire(TopologyEndpoints(s, p, exposePrivate)), PartitioningVersion: q.Info.PartitioningVersion, PartitionCount: q.Info.PartitionCount})
		}
	}
	for _, st := range s.Streams {
		if hasTopic && st.Info.Topic != topic {
			continue
		}
		for _, p := range st.Parts {
			t.Streams = append(t.Streams, wire.StreamEntry{Topic: st.Info.Topic, Partition: p.Ref.Partition,
				Owners: Wire(TopologyEndpoints(s, p, exposePrivate)), PartitionCount: st.Info.PartitionCount})
		}
	}
	return t
}

// normGroup maps the literal "default" and "" to the absent group (S-17).
func normGroup(g string) string {
	if g == "default" {
		return ""
	}
	return g
}

func queueName(ref core.PartitionRef) string {
	if ref.Group != "" {
		return ref.Topic + "/" + ref.Group
	}
	return ref.Topic
}
