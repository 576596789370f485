package cluster

import (
	"iter"
	"slices"
	"strconv"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// Assignment is the stored ownership of one partition (assign/… keys).
// Epoch rises whenever Node or Followers change (S-134). Written is set by
// the owner, under its epoch, before the partition's first append: from
// then on only this node holds the partition's log and the controller
// never moves it (S-138: a dead owner's written partitions wait for it);
// every later rewrite of the record carries the mark over. Followers are
// the other nodes that hold (once replication runs) a copy of the
// partition, distinct from Node and from each other, in the order the
// controller chose them (S-133).
type Assignment struct {
	Node      core.NodeID   `json:"node"`
	Epoch     uint64        `json:"epoch"`
	Written   bool          `json:"written,omitempty"`
	Followers []core.NodeID `json:"followers,omitempty"`
	// InSync is the in-sync set the owner recorded under this epoch: the
	// nodes whose durable copies its replica-gated confirms count, every
	// confirmed record being durable on at least Acks of them
	// (docs/ARCHITECTURE.md#replication). Only the owner changes them;
	// the controller carries them over when it changes the followers.
	InSync []core.NodeID `json:"in_sync,omitempty"`
	Acks   int           `json:"acks,omitempty"`
}

// Owner is the assignment as the shared core type.
func (a Assignment) Owner() core.Owner { return core.Owner{Node: a.Node, Epoch: a.Epoch} }

// Replicas lists the nodes that hold the partition: the owner first, then
// the followers. Empty while unassigned.
func (a Assignment) Replicas() []core.NodeID {
	if a.Node == "" {
		return nil
	}
	return append([]core.NodeID{a.Node}, a.Followers...)
}

// HasFollower reports whether id is one of the partition's followers.
func (a Assignment) HasFollower(id core.NodeID) bool { return slices.Contains(a.Followers, id) }

// Partition is one queue or stream partition in a snapshot.
type Partition struct {
	Ref core.PartitionRef
	Assignment
	// Version is the assign key's version (for compare-and-set); 0 means
	// the partition is not placed yet.
	Version uint64
}

// Placed reports whether the partition has an owner.
func (p Partition) Placed() bool { return p.Version != 0 && p.Node != "" }

// OwnedBy reports whether the partition is placed on node.
func (p Partition) OwnedBy(node core.NodeID) bool { return p.Placed() && p.Node == node }

// Queue is a declared queue and its partitions.
type Queue struct {
	Info queue.QueueInfo
	// Parts are the queue's partitions: Info.PartitionCount of them, or
	// while a repartition is in progress both layouts' (Repartition.Width).
	Parts []Partition
	// Repartition is the partition count change in progress, if any
	// (repartition.go).
	Repartition *Repartition
	fp          uint64 // routing fingerprint of this queue (Generation)
}

// Owned yields, in order, the partitions of q that node owns.
func (q *Queue) Owned(node core.NodeID) iter.Seq[Partition] {
	return func(yield func(Partition) bool) {
		for _, p := range q.Parts {
			if p.OwnedBy(node) && !yield(p) {
				return
			}
		}
	}
}

// Stream is a declared stream and its partitions.
type Stream struct {
	Info  queue.StreamInfo
	Parts []Partition
	fp    uint64
}

// Member is a node that joined the cluster at some point.
type Member struct {
	// Info is the live record (with current labels) while the node is
	// live, else what it registered last.
	Info core.NodeInfo
	Live bool
}

// Snapshot is one immutable view of the cluster: members and liveness,
// the catalog and every partition's assignment. core/cluster rebuilds it
// from the Coordinator's watch and publishes it through an atomic pointer;
// the hot path reads it without locks. Never modify one.
type Snapshot struct {
	// Index is the coordination index the snapshot reflects.
	Index uint64
	// Generation is the topology generation (docs/protocol.md#topology): the index at
	// which the routing content last changed. Heartbeats and other
	// changes that leave routing alone do not move it (S-131).
	Generation uint64
	// Members by node id; MemberIDs sorted.
	Members   map[core.NodeID]*Member
	MemberIDs []core.NodeID
	// Gateways are the live, non-draining public members with client
	// endpoints, sorted: the candidates that serve privately owned
	// partitions to clients (core/routing/README.md#gateway-set, chosen
	// by rendezvous).
	Gateways []core.NodeID
	// Queues sorted by topic then group; Streams by topic.
	Queues  []*Queue
	Streams []*Stream

	queues  map[queueID]*Queue
	streams map[string]*Stream
	// cohorts are the recorded exclusive consumer group plans (cohorts.go).
	cohorts map[CohortRef]*CohortPlan
	// Tombstones are the deletions in progress (tombstone.go), by key in
	// deleted; their queues and streams are in neither Queues nor Streams.
	Tombstones []*Tombstone
	deleted    map[string]*Tombstone
	// routing is the fingerprint of the routing content (Generation).
	routing uint64
}

type queueID struct{ topic, group string }

// Queue returns a declared queue (group "" is the default group).
func (s *Snapshot) Queue(topic, group string) *Queue { return s.queues[queueID{topic, group}] }

// Stream returns a declared stream.
func (s *Snapshot) Stream(topic string) *Stream { return s.streams[topic] }

// Partition returns a queue partition (or a stream partition when no
// queue has that topic). ok is false when it is not declared.
func (s *Snapshot) Partition(ref core.PartitionRef) (Partition, bool) {
	if q := s.queues[queueID{ref.Topic, ref.Group}]; q != nil {
		if int(ref.Partition) < len(q.Parts) {
			return q.Parts[ref.Partition], true
		}
		return Partition{}, false
	}
	if ref.Group == "" {
		if st := s.streams[ref.Topic]; st != nil && int(ref.Partition) < len(st.Parts) {
			return st.Parts[ref.Partition], true
		}
	}
	return Partition{}, false
}

// Live reports whether node id holds a live lease.
func (s *Snapshot) Live(id core.NodeID) bool {
	m := s.Members[id]
	return m != nil && m.Live
}

// LiveNodes lists live members in id order.
func (s *Snapshot) LiveNodes() []*Member {
	var out []*Member
	for _, id := range s.MemberIDs {
		if m := s.Members[id]; m.Live {
			out = append(out, m)
		}
	}
	return out
}

// AdoptionFloor is the cluster adoption floor (S-120): the lowest
// adoption level published by live nodes; ok is false when none has.
func (s *Snapshot) AdoptionFloor() (floor uint64, ok bool) {
	for _, id := range s.MemberIDs {
		m := s.Members[id]
		if !m.Live {
			continue
		}
		v, err := strconv.ParseUint(m.Info.Labels[core.LabelAdoption], 10, 64)
		if err != nil {
			continue
		}
		if !ok || v < floor {
			floor, ok = v, true
		}
	}
	return floor, ok
}

// AllPartitions calls f for every queue partition, then every stream
// partition, in order.
func (s *Snapshot) AllPartitions(f func(Partition)) {
	for _, q := range s.Queues {
		for _, p := range q.Parts {
			f(p)
		}
	}
	for _, st := range s.Streams {
		for _, p := range st.Parts {
			f(p)
		}
	}
}
