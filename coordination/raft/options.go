package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/tlsconf"
)

// Peer is one coordination.raft.peers entry.
type Peer struct {
	ID   string
	Addr string
}

// Options configure one member. setup.go builds them from the broker's
// configuration; tests build them directly.
type Options struct {
	// NodeID is the member's stable id (the raft ServerID).
	NodeID string
	// DataDir holds raft.db (log and votes) and the snapshots.
	DataDir string
	// Listen is the host:port of the one TCP port that carries raft
	// traffic and the member-to-member RPC channel.
	Listen string
	// Advertise is the host:port other members dial; empty means the
	// address actually bound (so Listen may use port 0).
	Advertise string
	// Peers are the initial voters, this node included when it is one.
	Peers []Peer
	// BootstrapExpect > 0 lets the smallest id among Peers bootstrap a new
	// cluster once that many members answer (coordination/raft/DESIGN.md#membership).
	BootstrapExpect int
	// NonVoter joins as a non-voting member (coordination.raft.voter =
	// false): it replicates and serves reads and watches but never votes.
	NonVoter bool

	// Secret is the cluster secret every member must prove.
	Secret []byte
	// TLS, when set, wraps every connection in mutual TLS verified by node
	// id (tls.inter_broker).
	TLS *tlsconf.Peer

	// HeartbeatInterval and LivenessTTL are coordination.heartbeat_interval_ms
	// and coordination.liveness_ttl_ms. The backend uses them for the
	// leases behind Campaign (TTL = LivenessTTL, renewed every
	// HeartbeatInterval). Defaults 1 s and 4 s.
	HeartbeatInterval time.Duration
	LivenessTTL       time.Duration

	// RaftTimeout is raft's heartbeat and election timeout (default 1 s;
	// tests use a few hundred ms). MinTTL is twice it.
	RaftTimeout time.Duration
	// SnapshotThreshold is how many log entries trigger a snapshot
	// (default 4096); tests lower it.
	SnapshotThreshold uint64

	// Logger receives the backend's and raft's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the fibril_raft_* metrics; nil registers none
	// (Coordinator.Collectors still returns them).
	Registerer prometheus.Registerer

	// listener, when set (tests), is used instead of binding Listen, so a
	// test can reserve its ports before any member starts.
	listener net.Listener
}

const (
	defaultHeartbeat         = time.Second
	defaultLivenessTTL       = 4 * time.Second
	defaultRaftTimeout       = time.Second
	defaultSnapshotThreshold = 4096
	// minRaftTimeout keeps a misconfiguration from making raft flap.
	minRaftTimeout = 50 * time.Millisecond
)

// withDefaults fills zero values and checks the rest. Errors name the
// config key an operator would fix.
func (o Options) withDefaults() (Options, error) {
	if o.NodeID == "" || len(o.NodeID) > 255 {
		return o, fmt.Errorf("raft: coordination.node_id %q: expected 1 to 255 bytes", o.NodeID)
	}
	if o.DataDir == "" {
		return o, errors.New("raft: no data directory (server.data_dir)")
	}
	if o.Listen == "" {
		return o, errors.New("raft: coordination.raft.listen is empty; set host:port for the raft channel")
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return o, fmt.Errorf("raft: coordination.raft.listen %q: %w", o.Listen, err)
	}
	if o.Advertise != "" {
		if _, _, err := net.SplitHostPort(o.Advertise); err != nil {
			return o, fmt.Errorf("raft: coordination.raft.advertise %q: %w", o.Advertise, err)
		}
	}
	if len(o.Secret) == 0 {
		return o, errors.New("raft: the cluster secret is empty; set FIBRIL_CLUSTER_SECRET or coordination.secret_path (every member must share it)")
	}
	seen := map[string]bool{}
	for _, p := range o.Peers {
		if p.ID == "" || p.Addr == "" {
			return o, fmt.Errorf("raft: coordination.raft.peers entry %q=%q: id and address are required", p.ID, p.Addr)
		}
		if seen[p.ID] {
			return o, fmt.Errorf("raft: coordination.raft.peers lists %q twice", p.ID)
		}
		seen[p.ID] = true
	}
	switch {
	case o.BootstrapExpect < 0:
		return o, errors.New("raft: coordination.raft.bootstrap_expect is negative")
	case o.BootstrapExpect > len(o.Peers):
		return o, fmt.Errorf("raft: coordination.raft.bootstrap_expect = %d but coordination.raft.peers lists %d members; list every initial voter, this node included", o.BootstrapExpect, len(o.Peers))
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = defaultHeartbeat
	}
	if o.LivenessTTL <= 0 {
		o.LivenessTTL = defaultLivenessTTL
	}
	if o.LivenessTTL < 2*o.HeartbeatInterval {
		return o, fmt.Errorf("raft: coordination.liveness_ttl_ms (%d) must be at least twice coordination.heartbeat_interval_ms (%d)",
			o.LivenessTTL.Milliseconds(), o.HeartbeatInterval.Milliseconds())
	}
	if o.RaftTimeout <= 0 {
		// A quarter of the liveness TTL, at least 1 s: an operator whose
		// brokers are far apart raises liveness_ttl_ms and raft's timeouts
		// follow (the leader steps down when no quorum answered within
		// half of it, which a long round trip must fit in).
		o.RaftTimeout = max(defaultRaftTimeout, o.LivenessTTL/4)
		// A lease must outlive a leader change (MinTTL = 2 × RaftTimeout);
		// shorten raft's timeout rather than refuse a short liveness TTL.
		if 2*o.RaftTimeout > o.LivenessTTL {
			o.RaftTimeout = max(o.LivenessTTL/2, minRaftTimeout)
		}
	}
	if o.RaftTimeout < minRaftTimeout {
		return o, fmt.Errorf("raft: the raft timeout %s is below %s", o.RaftTimeout, minRaftTimeout)
	}
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = defaultSnapshotThreshold
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// minTTL is the shortest lease TTL (see Coordinator.MinTTL).
func (o Options) minTTL() time.Duration { return 2 * o.RaftTimeout }

// selfPeer returns this node's entry in Peers, if listed.
func (o Options) selfPeer() (Peer, bool) {
	i := slices.IndexFunc(o.Peers, func(p Peer) bool { return p.ID == o.NodeID })
	if i < 0 {
		return Peer{}, false
	}
	return o.Peers[i], true
}

// bootstrapper reports whether this node is the one that bootstraps a new
// cluster: bootstrap_expect > 0, a voter, listed in Peers, and the
// smallest id there.
func (o Options) bootstrapper() bool {
	if o.BootstrapExpect == 0 || o.NonVoter {
		return false
	}
	if _, ok := o.selfPeer(); !ok {
		return false
	}
	for _, p := range o.Peers {
		if p.ID < o.NodeID {
			return false
		}
	}
	return true
}
