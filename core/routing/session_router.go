package routing

import (
	"context"
	"errors"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/wire"
)

// SessionRouter is the coordinated mode's session.Router: it applies the
// fence and Decide to the cluster view of every operation, makes sure a
// partition this broker serves may be written here (lease, local channel,
// first-write mark), and records declarations cluster-wide.
type SessionRouter struct {
	Cluster *cluster.Cluster
	Self    Self
	// Queues is the local engine: a channel the cluster declared is
	// installed in it before an operation on it is served.
	Queues *queue.Manager
	// DefaultPartitions is partitioning.default_partition_count, read at
	// each declaration.
	DefaultPartitions func() uint32
	// PlacementTimeout is routing.declare_placement_timeout_ms, read at
	// each declaration: how long its answer waits for the partitions to
	// get owners (AwaitPlacement). nil means DefaultPlacementTimeout.
	PlacementTimeout func() time.Duration
	// ExposePrivate is routing.expose_private_endpoints, read at each
	// topology answer (TopologyEndpoints); nil means off.
	ExposePrivate func() bool
}

var (
	_ session.Router          = (*SessionRouter)(nil)
	_ session.PlacementWaiter = (*SessionRouter)(nil)
)

// DefaultPlacementTimeout is the built-in routing.declare_placement_timeout_ms.
const DefaultPlacementTimeout = 5 * time.Second

// Route implements session.Router (docs/protocol.md#answers).
func (r *SessionRouter) Route(ref core.PartitionRef, publish bool, version uint64, forwarded bool) session.Route {
	snap := r.Cluster.Snapshot()
	if publish {
		if d, fenced := Fence(snap, ref, version); fenced {
			return session.Route{Redirect: RedirectBody(d)}
		}
	}
	d := Decide(snap, r.Self, ref, forwarded)
	if d.Action == Refuse && (errors.Is(d.Err, core.ErrNotFound) || !d.Partition.Placed()) {
		// Decide again when the catch-up waited, and also when the view
		// moved on by itself meanwhile (CatchUp then finds it current and
		// does not wait): a refusal from the older view would be stale.
		waited := r.catchUp(ref)
		if now := r.Cluster.Snapshot(); waited || now != snap {
			snap = now
			d = Decide(snap, r.Self, ref, forwarded)
		}
	}
	switch d.Action {
	case Redirect:
		return session.Route{Redirect: RedirectBody(d)}
	case Refuse:
		return session.Route{Err: d.Err}
	case Forward:
		return session.Route{Forward: d.Partition.Node, Err: d.Err}
	}
	if !r.Cluster.LeaseValid() {
		return session.Route{Err: core.Errorf(core.ErrUnavailable,
			"this broker owns partition %s but cannot be sure of its cluster lease right now; retry", ref)}
	}
	if err := r.EnsureLocal(snap, ref); err != nil {
		return session.Route{Err: err}
	}
	if publish {
		if err := r.MarkWritten(d.Partition); err != nil {
			return session.Route{Err: err}
		}
		if err := r.beginEpoch(snap, d.Partition); err != nil {
			return session.Route{Err: err}
		}
	}
	return session.Route{Serve: true}
}

// beginEpoch has a partition's log record the assignment epoch before the
// first append under it (queue.Partition.BeginEpoch): the epoch history
// replicas compare to find where their logs part.
func (r *SessionRouter) beginEpoch(snap *cluster.Snapshot, p cluster.Partition) error {
	var begin func(epoch uint64) error
	if q := snap.Queue(p.Ref.Topic, p.Ref.Group); q != nil {
		qp, err := r.Queues.Partition(q.Info.Key, p.Ref.Partition)
		if err != nil {
			return err
		}
		begin = qp.BeginEpoch
	} else {
		sp, err := r.Queues.StreamPartition(p.Ref.Topic, p.Ref.Partition)
		if err != nil {
			return err
		}
		begin = sp.BeginEpoch
	}
	err := begin(p.Epoch)
	var used *queue.EpochUsedError
	if !errors.As(err, &used) {
		return err
	}
	// This broker restarted: a new epoch before its first publish.
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	epoch, err := r.Cluster.NewEpoch(ctx, p.Ref, used.Last)
	if err != nil {
		return err
	}
	return begin(epoch)
}

// catchUp gives a view that may trail a fresh declaration or placement
// the chance to hold it before an operation on the partition is refused
// as undeclared or unplaced (Cluster.CatchUp).
func (r *SessionRouter) catchUp(ref core.PartitionRef) bool {
	ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
	defer cancel()
	return r.Cluster.CatchUp(ctx, ref)
}

// catchUpTimeout bounds that: one linearizable catalog read and the wait
// for this node's view.
const catchUpTimeout = 2 * time.Second

// MarkWritten records the first-write mark of an owned partition before
// its first append (S-138). Once marked it costs a map lookup: no
// context, no I/O.
func (r *SessionRouter) MarkWritten(p cluster.Partition) error {
	if r.Cluster.IsWritten(p) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	return r.Cluster.MarkWritten(ctx, p.Ref)
}

// markTimeout bounds the first-write mark of a partition (one
// coordination write, once per partition and epoch).
const markTimeout = 5 * time.Second

// EnsureLocal installs ref's channel in the local engine when the catalog
// follower has not yet (a lock-free check first: this runs per operation).
// A queue the engine has with fewer partitions than the view — a
// repartition's new ones, which the catalog follower installs, in its own
// order, a moment later — is 503: retry, rather than 404 for a partition
// that exists.
func (r *SessionRouter) EnsureLocal(snap *cluster.Snapshot, ref core.PartitionRef) error {
	if q := snap.Queue(ref.Topic, ref.Group); q != nil {
		if info, ok := r.Queues.QueueInfo(q.Info.Key); ok {
			if ref.Partition >= info.PartitionCount && int(ref.Partition) < len(q.Parts) {
				return core.Errorf(core.ErrUnavailable, "partition %s is new and not installed on this broker yet; retry", ref)
			}
			return nil
		}
		if _, err := r.Queues.ApplyQueue(q.Info); err != nil {
			return err
		}
		return nil
	}
	if st := snap.Stream(ref.Topic); st != nil {
		if k, ok := r.Queues.Kind(ref.Topic); ok && k == queue.KindStream {
			return nil
		}
		_, err := r.Queues.ApplyStream(st.Info)
		return err
	}
	return nil
}

// DeclareQueue implements session.Router: the cluster decides, and the
// local engine installs the decision at once.
func (r *SessionRouter) DeclareQueue(ctx context.Context, spec queue.QueueSpec) (queue.QueueInfo, error) {
	info, err := r.Cluster.DeclareQueue(ctx, spec, r.DefaultPartitions())
	if err != nil {
		return info, err
	}
	if _, err := r.Queues.ApplyQueue(info); err != nil {
		return info, err
	}
	return info, nil
}

// DeclareStream implements session.Router.
func (r *SessionRouter) DeclareStream(ctx context.Context, spec queue.StreamSpec) (queue.StreamInfo, error) {
	info, err := r.Cluster.DeclareStream(ctx, spec, r.DefaultPartitions())
	if err != nil {
		return info, err
	}
	_, err = r.Queues.ApplyStream(info)
	return info, err
}

// AwaitPlacement implements session.PlacementWaiter: it returns once every
// partition of the declared channel has an owner in this broker's view, so
// that an operation a client sends right after the declaration's answer
// finds an owner to serve, forward or redirect to instead of a "no owner
// yet" 409 or 503 that SDKs do not retry (docs/protocol.md#declare). The
// placement controller assigns new partitions within a round trip or two
// of the coordinator; when it cannot (no controller, no live node that
// takes partitions) the wait ends after PlacementTimeout and the client
// gets the declaration's answer anyway, and later operations the answers
// they get today.
func (r *SessionRouter) AwaitPlacement(ctx context.Context, topic, group string, stream bool) {
	limit := DefaultPlacementTimeout
	if r.PlacementTimeout != nil {
		limit = r.PlacementTimeout()
	}
	r.Cluster.Await(ctx, limit, func(snap *cluster.Snapshot) bool {
		var parts []cluster.Partition
		if stream {
			st := snap.Stream(topic)
			if st == nil {
				return false
			}
			parts = st.Parts
		} else {
			q := snap.Queue(topic, group)
			if q == nil {
				return false
			}
			parts = q.Parts
		}
		for _, p := range parts {
			if !p.Placed() {
				return false
			}
		}
		return true
	})
}

// Topology implements session.Router.
func (r *SessionRouter) Topology(req wire.TopologyRequest) wire.Topology {
	return Topology(r.Cluster.Snapshot(), req, r.ExposePrivate != nil && r.ExposePrivate())
}

// Generation implements session.Router.
func (r *SessionRouter) Generation() uint64 { return r.Cluster.Snapshot().Generation }

// Changed implements session.Router.
func (r *SessionRouter) Changed() <-chan struct{} { return r.Cluster.Changed() }
