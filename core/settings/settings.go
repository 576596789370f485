// Package settings holds the runtime settings document (S-167, S-170):
// one persisted, versioned document whose groups the broker reads on every
// use, so a change applies without a restart. It is seeded from
// `runtime_seed.*` boot configuration only when no document exists;
// afterwards the persisted document wins over file, env and flags on every
// boot. The routing group has built-in defaults and no boot seed: its
// forwarding limits are tuned on a running cluster, one document for all
// brokers.
//
// Standalone, the document lives in <data_dir>/runtime-settings.json
// (Open). In coordinated mode it lives in the coordinator, one for the
// whole cluster (S-173), behind the same Current/Replace calls
// (OpenShared).
package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/config"
)

// Document is the runtime settings document. Durations are milliseconds,
// named as in S-170.
type Document struct {
	Version      uint64       `json:"version"`
	Delivery     Delivery     `json:"delivery"`
	Connection   Connection   `json:"connection"`
	Partitioning Partitioning `json:"partitioning"`
	Routing      Routing      `json:"routing"`
	Replication  Replication  `json:"replication"`
	Limits       Limits       `json:"limits"`
}

// Limits is the `limits` group: per-queue bounds
// (docs/admin.md#limits). Empty by default, and absent from documents
// stored before it existed.
type Limits struct {
	Queues []QueueLimit `json:"queues"`
}

// QueueLimit bounds one queue: each of its partitions holds at most
// MaxMessagesPerPartition unsettled messages; a publish past it is
// refused (overflow "reject_publish") or makes room by dropping the
// oldest ready message ("drop_oldest").
type QueueLimit struct {
	Topic                   string `json:"topic"`
	Group                   string `json:"group,omitempty"`
	MaxMessagesPerPartition int64  `json:"max_messages_per_partition"`
	Overflow                string `json:"overflow"`
}

// Overflow policies of QueueLimit.
const (
	OverflowRejectPublish = "reject_publish"
	OverflowDropOldest    = "drop_oldest"
)

// Delivery is the `delivery` group (S-50, S-170).
type Delivery struct {
	InflightTTLMS     int64 `json:"inflight_ttl_ms"`
	ExpiryPollMinMS   int64 `json:"expiry_poll_min_ms"`
	ExpiryBatchMax    int64 `json:"expiry_batch_max"`
	DeliveryPollMaxMS int64 `json:"delivery_poll_max_ms"`
}

// Connection is the `connection` group (S-102, S-107, S-128).
type Connection struct {
	ReconnectGraceMS          int64 `json:"reconnect_grace_ms"`
	ResumeSessionRestartTTLMS int64 `json:"resume_session_restart_ttl_ms"`
	DrainHandoffTimeoutMS     int64 `json:"drain_handoff_timeout_ms"`
}

// Partitioning is the `partitioning` group (S-18).
type Partitioning struct {
	DefaultPartitionCount int64 `json:"default_partition_count"`
}

// Routing is the `routing` group: forwarding limits
// (core/forward/README.md#bounds), the placement wait of a
// declaration's answer and whether topology answers expose private
// owners' addresses to internal clients.
type Routing struct {
	MaxUpstreamSessions         int64 `json:"max_upstream_sessions"`
	MaxUpstreamSessionsPerOwner int64 `json:"max_upstream_sessions_per_owner"`
	MaxInflightForwardBytes     int64 `json:"max_inflight_forward_bytes"`
	ForwardTimeoutMS            int64 `json:"forward_timeout_ms"`
	UpstreamConnectTimeoutMS    int64 `json:"upstream_connect_timeout_ms"`
	UpstreamIdleCloseMS         int64 `json:"upstream_idle_close_ms"`
	DeclarePlacementTimeoutMS   int64 `json:"declare_placement_timeout_ms"`
	// ExposePrivateEndpoints lists, in topology answers, a private owner's
	// own client addresses after its gateway's, tagged private
	// (core/routing/README.md#private-endpoints). Off by default.
	ExposePrivateEndpoints bool `json:"expose_private_endpoints"`
	// RepartitionAdoptionTimeoutMS bounds how long a repartition's
	// finalize waits for the adoption floor (docs/repartition.md, S-125).
	RepartitionAdoptionTimeoutMS int64 `json:"repartition_adoption_timeout_ms"`
}

// Replication is the `replication` group: how many followers the
// placement controller gives each partition and what a replicated
// confirm waits for (docs/cluster.md#replication). It has built-in
// defaults and no boot seed, like routing, and it is read only in a
// cluster: a standalone broker has no followers and ignores it.
type Replication struct {
	TargetFollowers   int64  `json:"target_followers"`
	Durability        string `json:"durability"`
	ConfirmTimeoutMS  int64  `json:"confirm_timeout_ms"`
	ISRTimeoutMS      int64  `json:"isr_timeout_ms"`
	MinInSyncReplicas int64  `json:"min_in_sync_replicas"`
}

// Policy is the parsed durability. A document that passed Validate always
// parses; anything else falls back to the built-in majority_durable
// rather than to a weaker policy.
func (r Replication) Policy() config.Durability {
	d, err := config.ParseDurability(r.Durability)
	if err != nil {
		return config.Durability{Mode: config.MajorityDurable}
	}
	return d
}

// Seed builds version 1 of the document from boot configuration.
func Seed(seed config.RuntimeSeedSettings, rt config.Runtime) Document {
	d, c, p, r, rp := seed.Delivery, seed.Connection, seed.Partitioning, rt.Routing, rt.Replication
	return Document{
		Version: 1,
		Delivery: Delivery{InflightTTLMS: d.InflightTTLMS, ExpiryPollMinMS: d.ExpiryPollMinMS,
			ExpiryBatchMax: d.ExpiryBatchMax, DeliveryPollMaxMS: d.DeliveryPollMaxMS},
		Connection: Connection{ReconnectGraceMS: c.ReconnectGraceMS, ResumeSessionRestartTTLMS: c.ResumeSessionRestartTTLMS,
			DrainHandoffTimeoutMS: c.DrainHandoffTimeoutMS},
		Partitioning: Partitioning{DefaultPartitionCount: p.DefaultPartitionCount},
		Routing: Routing{MaxUpstreamSessions: r.MaxUpstreamSessions, MaxUpstreamSessionsPerOwner: r.MaxUpstreamSessionsPerOwner,
			MaxInflightForwardBytes: r.MaxInflightForwardBytes, ForwardTimeoutMS: r.ForwardTimeoutMS,
			UpstreamConnectTimeoutMS: r.UpstreamConnectTimeoutMS, UpstreamIdleCloseMS: r.UpstreamIdleCloseMS,
			DeclarePlacementTimeoutMS: r.DeclarePlacementTimeoutMS, ExposePrivateEndpoints: r.ExposePrivateEndpoints,
			RepartitionAdoptionTimeoutMS: r.RepartitionAdoptionTimeoutMS},
		Replication: Replication{TargetFollowers: rp.TargetFollowers, Durability: rp.Durability,
			ConfirmTimeoutMS: rp.ConfirmTimeoutMS, ISRTimeoutMS: rp.ISRTimeoutMS, MinInSyncReplicas: rp.MinInSyncReplicas},
	}
}

// decode parses a stored document. The routing and replication groups
// have built-in defaults and no boot seed, so a document stored before
// one of their settings (or the whole group) existed takes the default
// instead of failing validation with a zero: an upgrade must not refuse to start over a
// setting the operator never had the chance to set. (A document sent to
// Replace is taken as it is: an omitted setting there is an error.)
func decode(b []byte) (Document, error) {
	d := Document{Routing: routingDefaults(), Replication: replicationDefaults()}
	err := json.Unmarshal(b, &d)
	return d, err
}

// routingDefaults is the routing group of the built-in defaults.
func routingDefaults() Routing {
	return Seed(config.RuntimeSeedSettings{}, config.DefaultRuntime()).Routing
}

// replicationDefaults is the replication group of the built-in defaults.
func replicationDefaults() Replication {
	return Seed(config.RuntimeSeedSettings{}, config.DefaultRuntime()).Replication
}

// Validate applies S-172's bounds. Every problem names its setting.
func (d Document) Validate() error {
	var errs []error
	atLeast := func(name string, v, min int64) {
		if v < min {
			errs = append(errs, fmt.Errorf("%s = %d: must be at least %d", name, v, min))
		}
	}
	atLeast("delivery.inflight_ttl_ms", d.Delivery.InflightTTLMS, 1)
	atLeast("delivery.expiry_poll_min_ms", d.Delivery.ExpiryPollMinMS, 1)
	atLeast("delivery.expiry_batch_max", d.Delivery.ExpiryBatchMax, 1)
	atLeast("delivery.delivery_poll_max_ms", d.Delivery.DeliveryPollMaxMS, 1)
	atLeast("connection.reconnect_grace_ms", d.Connection.ReconnectGraceMS, 0)
	atLeast("connection.resume_session_restart_ttl_ms", d.Connection.ResumeSessionRestartTTLMS, 0)
	atLeast("connection.drain_handoff_timeout_ms", d.Connection.DrainHandoffTimeoutMS, 1)
	atLeast("partitioning.default_partition_count", d.Partitioning.DefaultPartitionCount, 1)
	r := d.Routing
	rt := config.Runtime{Routing: config.Routing{MaxUpstreamSessions: r.MaxUpstreamSessions,
		MaxUpstreamSessionsPerOwner: r.MaxUpstreamSessionsPerOwner, MaxInflightForwardBytes: r.MaxInflightForwardBytes,
		ForwardTimeoutMS: r.ForwardTimeoutMS, UpstreamConnectTimeoutMS: r.UpstreamConnectTimeoutMS,
		UpstreamIdleCloseMS: r.UpstreamIdleCloseMS, DeclarePlacementTimeoutMS: r.DeclarePlacementTimeoutMS,
		ExposePrivateEndpoints: r.ExposePrivateEndpoints, RepartitionAdoptionTimeoutMS: r.RepartitionAdoptionTimeoutMS}}
	rp := d.Replication
	rt.Replication = config.Replication{TargetFollowers: rp.TargetFollowers, Durability: rp.Durability,
		ConfirmTimeoutMS: rp.ConfirmTimeoutMS, ISRTimeoutMS: rp.ISRTimeoutMS, MinInSyncReplicas: rp.MinInSyncReplicas}
	if err := config.ValidateRuntime(rt, config.Origin{}); err != nil {
		errs = append(errs, err)
	}
	seen := map[[2]string]bool{}
	for i, l := range d.Limits.Queues {
		name := fmt.Sprintf("limits.queues[%d]", i)
		switch {
		case l.Topic == "":
			errs = append(errs, fmt.Errorf("%s.topic: required", name))
		case seen[[2]string{l.Topic, l.Group}]:
			errs = append(errs, fmt.Errorf("%s: a second limit for topic %q group %q", name, l.Topic, l.Group))
		}
		seen[[2]string{l.Topic, l.Group}] = true
		atLeast(name+".max_messages_per_partition", l.MaxMessagesPerPartition, 1)
		if l.Overflow != OverflowRejectPublish && l.Overflow != OverflowDropOldest {
			errs = append(errs, fmt.Errorf("%s.overflow = %q: must be %q or %q", name, l.Overflow, OverflowRejectPublish, OverflowDropOldest))
		}
	}
	// A fixed node count cannot exceed the copies a partition may have:
	// such a policy could never confirm anything.
	if pol, err := config.ParseDurability(rp.Durability); err == nil && pol.Nodes > 0 && int64(pol.Nodes) > rp.TargetFollowers+1 {
		errs = append(errs, fmt.Errorf("replication.durability = %s needs %d copies but replication.target_followers = %d allows %d (the owner and its followers)",
			pol, pol.Nodes, rp.TargetFollowers, rp.TargetFollowers+1))
	}
	return errors.Join(errs...)
}

// Ms turns a millisecond setting into a Duration.
func Ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// Store keeps the current document and persists changes.
type Store struct {
	path string
	mu   sync.Mutex // serialises Replace (and, shared, the follower)
	cur  atomic.Pointer[Document]

	chMu    sync.Mutex
	changed chan struct{} // closed when cur changes (Changed)

	// Shared mode (OpenShared): the document lives in doc.
	doc    core.Document
	docVer uint64 // doc's version of cur; guarded by mu
	log    *slog.Logger
	stop   context.CancelFunc
	done   chan struct{}
}

// Open loads the document at path, or seeds and persists it when none
// exists (S-167). A document that fails to parse or validate is an error:
// the broker must not silently fall back to seeds and forget an operator's
// change.
func Open(path string, seed Document) (*Store, error) {
	st := &Store{path: path}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := seed.Validate(); err != nil {
			return nil, fmt.Errorf("runtime settings seed: %w", err)
		}
		if err := st.write(seed); err != nil {
			return nil, err
		}
		st.cur.Store(&seed)
		return st, nil
	case err != nil:
		return nil, fmt.Errorf("runtime settings: %w", err)
	}
	d, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("runtime settings %s: %w", path, err)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("runtime settings %s (version %d): %w", path, d.Version, err)
	}
	st.cur.Store(&d)
	return st, nil
}

// Current returns the document in force. Cheap; call it on every use.
func (s *Store) Current() Document { return *s.cur.Load() }

// Changed returns a channel that is closed at the next change of the
// current document (a Replace here, or another broker's in a cluster).
func (s *Store) Changed() <-chan struct{} {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// setCurrent makes d current and wakes Changed's waiters.
func (s *Store) setCurrent(d *Document) {
	s.cur.Store(d)
	s.chMu.Lock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.chMu.Unlock()
}

// Replace stores a whole new document if expected is the current version
// (S-162): a stale version → core.ErrConflict, an invalid document →
// core.ErrBadRequest. It returns the stored document with its new version.
func (s *Store) Replace(expected uint64, d Document) (Document, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.Current()
	if expected != cur.Version {
		return cur, core.Errorf(core.ErrConflict, "runtime settings changed: version is %d, not %d", cur.Version, expected)
	}
	if err := d.Validate(); err != nil {
		return cur, core.Errorf(core.ErrBadRequest, "%v", err)
	}
	d.Version = cur.Version + 1
	if s.doc != nil {
		return s.replaceShared(d)
	}
	if err := s.write(d); err != nil {
		return cur, err
	}
	s.setCurrent(&d)
	return d, nil
}

// write persists d crash-safely: temp file, fsync, rename, directory fsync.
func (s *Store) write(d Document) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, ".runtime-settings-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return err
	}
	df, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer df.Close()
	return df.Sync()
}
