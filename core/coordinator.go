package core

import (
	"context"
	"errors"
	"time"
)

// CoordinationAPIVersion is the version of the Coordinator contract below.
// External coordination plugins negotiate it (plugins package); it changes
// only when the contract's meaning changes.
const CoordinationAPIVersion = 1

// AnyVersion, given as the expected version to a write, makes it
// unconditional.
const AnyVersion = ^uint64(0)

// Coordination errors. Backends wrap them; callers test with errors.Is.
var (
	// ErrVersionConflict: a compare-and-set or compare-and-delete found
	// another version than the one expected.
	ErrVersionConflict = errors.New("coordination: version conflict")
	// ErrLeaseLost: the lease expired or was revoked; keys bound to it are
	// gone (or about to be) and it cannot be renewed.
	ErrLeaseLost = errors.New("coordination: lease lost")
	// ErrCoordinationUnavailable: the backend cannot answer now (no quorum,
	// no leader, plugin restarting). Retry later. It wraps ErrUnavailable,
	// so it reaches a client as 503 if it ever does.
	ErrCoordinationUnavailable = Errorf(ErrUnavailable, "coordination unavailable")
	// ErrClosed: the Coordinator (or Transport, or Links) was closed.
	ErrClosed = errors.New("closed")
)

// KV is one key of the coordination key space.
//
// Keys are non-empty UTF-8 strings of '/'-separated segments without a
// leading '/'. Keys starting with "_" are reserved for backends (election
// locks live under "_elections/"). Version is the store index at which the
// key was last written: it only grows, and 0 means "absent".
type KV struct {
	Key     string
	Value   []byte
	Version uint64
	// Lease is the id of the lease the key is bound to ("" for none).
	Lease string
}

// Coordinator is the cluster's shared memory: a small, consistent key space
// that every broker reads and writes through one backend (embedded raft by
// default, Consul, or a third party's plugin). Placement, catalog, users
// and settings are built on it once, in core/cluster, so every backend
// behaves the same. coordination/README.md maps each primitive onto raft
// and onto Consul.
//
// Lifecycle: a backend is opened by its constructor (or by the plugin
// host), used from many goroutines at once, and closed once by Close, after
// which every method returns ErrClosed (a second Close too); calls blocked
// in Watch or Campaign return ErrClosed when Close happens. Methods that
// talk to other nodes honour ctx — a cancelled or expired ctx returns
// ctx.Err() — and return ErrCoordinationUnavailable (wrapped) when the
// backend cannot answer. An invalid key or prefix is an error wrapping
// ErrBadRequest. Lease handles of a closed Coordinator return ErrClosed or
// ErrLeaseLost.
type Coordinator interface {
	// Get reads one key, linearizably. A missing key is KV{Key: key} with
	// Version 0 and no error.
	Get(ctx context.Context, key string) (KV, error)

	// List reads every key under prefix ("" is everything), sorted by key,
	// linearizably, with the store index the answer reflects.
	List(ctx context.Context, prefix string) ([]KV, uint64, error)

	// Watch is the level-triggered watch: it returns the state of prefix
	// (as List does) once the store index is greater than after — at once
	// when it already is — and otherwise blocks until it is or ctx ends.
	// It may return early when the index moved for keys outside prefix; a
	// caller loops with after = the index returned. Watch may read a local
	// replica, so its answer can lag a write that already returned, but the
	// index it returns never goes backwards on one Coordinator.
	Watch(ctx context.Context, prefix string, after uint64) ([]KV, uint64, error)

	// CompareAndSet writes value at key when the key's version equals
	// version (0: only when the key is absent; AnyVersion: always) and
	// returns the new version. A mismatch returns ErrVersionConflict and
	// writes nothing. The write is durable on a quorum when it returns.
	// Writing a key bound to a lease through CompareAndSet unbinds it.
	CompareAndSet(ctx context.Context, key string, value []byte, version uint64) (uint64, error)

	// CompareAndDelete deletes key when its version equals version
	// (AnyVersion: always). Deleting an absent key with version 0 or
	// AnyVersion succeeds.
	CompareAndDelete(ctx context.Context, key string, version uint64) error

	// GrantLease creates a lease of at least ttl (raised to MinTTL). The
	// caller renews it; it ends when not renewed within its TTL, when
	// revoked, or when the backend loses track of it, and every key bound
	// to it is then deleted.
	GrantLease(ctx context.Context, ttl time.Duration) (Lease, error)

	// MinTTL is the shortest lease TTL the backend supports (Consul
	// sessions: 10 s; raft: one heartbeat round).
	MinTTL() time.Duration

	// Campaign blocks until this member leads the named election, or ctx
	// ends. A Leadership, once lost, is final: campaign again for a new
	// term.
	Campaign(ctx context.Context, election string) (Leadership, error)

	// Close releases the backend. Leases held through it are not revoked
	// (they expire), so a crash and a Close look the same to the cluster;
	// call Lease.Revoke first for a clean departure.
	Close() error
}

// Lease is a TTL lease. Keys bound to it live only as long as it does: a
// node record bound to a lease is how liveness is expressed.
type Lease interface {
	// ID identifies the lease (KV.Lease of bound keys).
	ID() string
	// TTL is the granted TTL (≥ MinTTL).
	TTL() time.Duration

	// Put writes key bound to this lease, with the same compare-and-set
	// rule as Coordinator.CompareAndSet. It fails with ErrLeaseLost once
	// the lease has ended.
	Put(ctx context.Context, key string, value []byte, version uint64) (uint64, error)

	// Renew extends the lease by its TTL. On success ValidUntil becomes the
	// time Renew was called plus the TTL: the backend promises not to end
	// the lease before that instant (on this machine's clock; callers keep
	// a margin for clock-rate drift). It fails with ErrLeaseLost when the
	// lease has already ended.
	Renew(ctx context.Context) error

	// ValidUntil is until when the lease is surely still held (the zero
	// time once it is known lost). It is a local computation; no I/O.
	ValidUntil() time.Time

	// Done is closed once the holder learns that the lease ended (a renew
	// answered ErrLeaseLost, Revoke, or ValidUntil passed without a
	// successful renew).
	Done() <-chan struct{}

	// Revoke ends the lease now and deletes its keys (in one write).
	// Revoking a lease that already ended returns nil.
	Revoke(ctx context.Context) error
}

// LeaseAttacher is an optional ability: a backend whose leases outlive the
// handle that created them (they live in the cluster, not in the process)
// can hand out a new handle for a live lease by id. The plugin host uses it
// to keep a broker's lease across a restart of an external coordination
// plugin. Attaching renews the lease; an ended lease gives ErrLeaseLost.
type LeaseAttacher interface {
	AttachLease(ctx context.Context, id string) (Lease, error)
}

// Leadership is one term of leadership in an election.
type Leadership interface {
	// Term identifies the term; a later term of the same election always
	// has a greater Term.
	Term() uint64
	// Lost is closed when the term ends. It never reopens.
	Lost() <-chan struct{}
	// Resign ends the term early so another member can be elected; Lost
	// is closed by the time it returns.
	Resign(ctx context.Context) error
}

// Reachability is an optional ability of a backend that talks to a
// remote service (Consul): Unreachable says why its last call failed, or
// nil once a call succeeded, so /readyz can name the cause.
type Reachability interface {
	Unreachable() error
}

// ConsensusMembers is implemented by a coordination backend whose members
// form a consensus group the operator manages (the built-in raft): list
// them, and change one for good — remove a member that will not come
// back, promote one to voter, demote one. A change that would leave the
// group without a quorum is refused with ErrConflict; so is removing or
// demoting the last voter.
type ConsensusMembers interface {
	ConsensusMembers(ctx context.Context) ([]ConsensusMember, error)
	ChangeConsensusMember(ctx context.Context, change ConsensusChange, id, addr string) error
}

// ConsensusMember is one member of a consensus group.
type ConsensusMember struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Voter  bool   `json:"voter"`
	Leader bool   `json:"leader"`
	// Reachable is the leader's view: false once heartbeats to the
	// member fail, until one succeeds again.
	Reachable bool       `json:"reachable"`
	DownSince *time.Time `json:"down_since,omitempty"`
}

// ConsensusChange is one change of ConsensusMembers.
type ConsensusChange string

// The changes.
const (
	ConsensusRemove   ConsensusChange = "remove"    // out of the group for good
	ConsensusAddVoter ConsensusChange = "add_voter" // a voter (a non-voter promoted, or a new member at addr)
	ConsensusDemote   ConsensusChange = "demote"    // a voter becomes a non-voter
)
