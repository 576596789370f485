package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
)

// Coordinator is one member of an embedded raft cluster, implementing
// core.Coordinator. Writes go through the raft log (forwarded to the
// leader when this member follows); Get and List are linearizable reads
// answered by the leader; Watch is served from the local replica.
type Coordinator struct {
	opts      Options
	log       *slog.Logger
	advertise string
	// unreachable are the peers this member's heartbeats (as leader) fail
	// to reach, and since when (members.go).
	unreachable atomic.Pointer[map[hraft.ServerID]time.Time]

	fsm     *fsm
	store   *boltStore
	raft    *hraft.Raft
	raftPtr atomic.Pointer[hraft.Raft] // for the network before raft exists
	net     *network
	pool    *rpcPool
	keeper  *leaseKeeper
	metrics *metrics

	// readyTerm is the raft term in which this member, as leader, has
	// caught its FSM up with everything committed before (0: not ready).
	// Linearizable reads, renewals and expiry wait for it.
	readyTerm atomic.Uint64

	// leaderChanged is closed and replaced when raft reports a new leader,
	// waking callers that wait for one.
	leaderMu      sync.Mutex
	leaderChanged chan struct{}

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

var (
	_ core.Coordinator   = (*Coordinator)(nil)
	_ core.LeaseAttacher = (*Coordinator)(nil)
)

// Open starts a member: it opens the log store in DataDir, binds the
// listener, starts raft, and then bootstraps or joins in the background
// (coordination/raft/DESIGN.md#membership). It does not wait for a leader: calls made
// before one exists retry until their context ends.
func Open(ctx context.Context, o Options) (c *Coordinator, err error) {
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("raft: data directory: %w", err)
	}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	store, err := openBoltStore(filepath.Join(o.DataDir, "raft.db"), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	cleanup = append(cleanup, func() { _ = store.Close() })
	snaps, err := hraft.NewFileSnapshotStoreWithLogger(o.DataDir, 2, newHCLog(o.Logger, "raft-snapshot"))
	if err != nil {
		return nil, fmt.Errorf("raft: snapshot store in %s: %w", o.DataDir, err)
	}
	ln := o.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.Listen); err != nil {
			return nil, fmt.Errorf("raft: coordination.raft.listen %s: %w", o.Listen, err)
		}
	}
	cleanup = append(cleanup, func() { _ = ln.Close() })
	advertise, err := advertiseFor(o, ln.Addr())
	if err != nil {
		return nil, err
	}
	if self, ok := o.selfPeer(); ok && self.Addr != advertise {
		o.Logger.Warn("raft: coordination.raft.peers lists this node at another address than it advertises; the advertised one is used",
			"peers_entry", self.Addr, "advertise", advertise)
	}

	c = &Coordinator{
		opts:          o,
		log:           o.Logger,
		advertise:     advertise,
		fsm:           newFSM(),
		store:         store,
		keeper:        newLeaseKeeper(),
		leaderChanged: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	cleanup = append(cleanup, c.cancel)
	c.net = newNetwork(ln, o, advertise)
	c.net.expectID = c.expectID
	c.net.serveRPC = c.serveRPC
	c.pool = newRPCPool(c.net)
	cleanup = append(cleanup, c.net.close)

	trans := hraft.NewNetworkTransportWithConfig(&hraft.NetworkTransportConfig{
		Stream:  streamLayer{c.net},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newHCLog(o.Logger, "raft-net"),
	})
	cleanup = append(cleanup, func() { _ = trans.Close() })
	logs, err := hraft.NewLogCache(512, store)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	hasState, err := hraft.HasExistingState(logs, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("raft: reading state in %s: %w", o.DataDir, err)
	}
	if !hasState && !o.bootstrapper() && len(o.otherPeers()) == 0 {
		return nil, errors.New("raft: this node has no raft state and coordination.raft.peers names no other member to join; list the members (id=host:port), or set coordination.raft.bootstrap_expect to start a new cluster")
	}
	r, err := hraft.NewRaft(c.raftConfig(), c.fsm, logs, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	c.raft = r
	c.raftPtr.Store(r)
	if c.metrics, err = newMetrics(o.Registerer, c); err != nil {
		_ = r.Shutdown().Error()
		return nil, err
	}

	observations := make(chan hraft.Observation, 16)
	r.RegisterObserver(hraft.NewObserver(observations, false, func(ob *hraft.Observation) bool {
		switch ob.Data.(type) {
		case hraft.LeaderObservation, hraft.PeerObservation:
			return true
		}
		return false
	}))
	// The peer watch has its own observer: its heartbeat observations
	// never crowd the leader wake-ups above out of their channel.
	heartbeats := make(chan hraft.Observation, 64)
	r.RegisterObserver(hraft.NewObserver(heartbeats, false, func(ob *hraft.Observation) bool {
		switch ob.Data.(type) {
		case hraft.FailedHeartbeatObservation, hraft.ResumedHeartbeatObservation,
			hraft.LeaderObservation, hraft.PeerObservation:
			return true
		}
		return false
	}))
	c.net.start()
	c.goBackground(func() { c.observe(observations) })
	c.goBackground(func() { c.watchPeers(heartbeats) })
	c.goBackground(c.leaderLoop)
	c.goBackground(func() { c.membership(hasState) })
	c.log.Info("raft: started", "node", o.NodeID, "listen", ln.Addr().String(), "advertise", advertise,
		"has_state", hasState, "bootstrapper", o.bootstrapper() && !hasState, "voter", !o.NonVoter,
		"tls", o.TLS != nil, "min_ttl", o.minTTL())
	return c, nil
}

// raftConfig maps Options onto hashicorp/raft's Config.
func (c *Coordinator) raftConfig() *hraft.Config {
	o := c.opts
	conf := hraft.DefaultConfig()
	conf.LocalID = hraft.ServerID(o.NodeID)
	conf.HeartbeatTimeout = o.RaftTimeout
	conf.ElectionTimeout = o.RaftTimeout
	conf.LeaderLeaseTimeout = o.RaftTimeout / 2
	conf.CommitTimeout = min(conf.CommitTimeout, o.RaftTimeout/4)
	conf.SnapshotThreshold = o.SnapshotThreshold
	conf.TrailingLogs = o.SnapshotThreshold
	// A member that was removed (say, to be replaced under the same id)
	// stays up so it can ask to rejoin.
	conf.ShutdownOnRemove = false
	conf.NoLegacyTelemetry = true
	conf.Logger = newHCLog(o.Logger, "raft")
	return conf
}

// advertiseFor picks the address other members dial.
func advertiseFor(o Options, bound net.Addr) (string, error) {
	if o.Advertise != "" {
		return o.Advertise, nil
	}
	ap, err := netip.ParseAddrPort(bound.String())
	if err != nil {
		return bound.String(), nil
	}
	if ap.Addr().IsUnspecified() {
		return "", fmt.Errorf("raft: coordination.raft.listen %s binds every interface; set coordination.raft.advertise to the host:port other members dial", o.Listen)
	}
	return bound.String(), nil
}

func (o Options) otherPeers() []Peer {
	var out []Peer
	for _, p := range o.Peers {
		if p.ID != o.NodeID {
			out = append(out, p)
		}
	}
	return out
}

func (c *Coordinator) goBackground(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// expectID names the member that should answer at addr: the raft
// configuration knows best, then the configured peers.
func (c *Coordinator) expectID(addr string) string {
	if r := c.raftPtr.Load(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if string(s.Address) == addr {
					return string(s.ID)
				}
			}
		}
	}
	for _, p := range c.opts.Peers {
		if p.Addr == addr {
			return p.ID
		}
	}
	return ""
}

// observe turns raft observations into wake-ups and log lines.
func (c *Coordinator) observe(ch <-chan hraft.Observation) {
	for {
		select {
		case ob := <-ch:
			switch d := ob.Data.(type) {
			case hraft.LeaderObservation:
				if d.LeaderID != "" {
					c.log.Info("raft: leader elected", "leader", string(d.LeaderID), "addr", string(d.LeaderAddr), "term", c.raft.CurrentTerm())
				}
				c.leaderMu.Lock()
				close(c.leaderChanged)
				c.leaderChanged = make(chan struct{})
				c.leaderMu.Unlock()
			case hraft.PeerObservation:
				c.log.Info("raft: membership changed", "node", string(d.Peer.ID), "addr", string(d.Peer.Address), "removed", d.Removed)
			}
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *Coordinator) leaderWait() <-chan struct{} {
	c.leaderMu.Lock()
	defer c.leaderMu.Unlock()
	return c.leaderChanged
}

// Addr is the address other members dial to reach this one.
func (c *Coordinator) Addr() string { return c.advertise }

// MinTTL implements core.Coordinator: twice raft's heartbeat timeout, so
// that a lease renewed just before a leader fails survives the election
// of the next one (coordination/raft/DESIGN.md#leases-expiry-by-the-leader-renewal-is-not-a-write).
func (c *Coordinator) MinTTL() time.Duration { return c.opts.minTTL() }

func (c *Coordinator) check() error {
	if c.closed.Load() {
		return core.ErrClosed
	}
	return nil
}

// Get implements core.Coordinator (linearizable: answered by the leader).
func (c *Coordinator) Get(ctx context.Context, key string) (core.KV, error) {
	if err := c.check(); err != nil {
		return core.KV{}, err
	}
	if err := core.CheckKey(key); err != nil {
		return core.KV{}, err
	}
	resp, err := c.toLeader(ctx, &rpcRequest{Op: rpcRead, Key: key})
	if err != nil {
		return core.KV{}, err
	}
	if len(resp.KVs) == 0 {
		return core.KV{Key: key}, nil
	}
	return resp.KVs[0], nil
}

// List implements core.Coordinator (linearizable: answered by the leader).
func (c *Coordinator) List(ctx context.Context, prefix string) ([]core.KV, uint64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	if err := core.CheckPrefix(prefix); err != nil {
		return nil, 0, err
	}
	resp, err := c.toLeader(ctx, &rpcRequest{Op: rpcRead, Key: prefix, List: true})
	if err != nil {
		return nil, 0, err
	}
	if resp.KVs == nil {
		resp.KVs = []core.KV{}
	}
	return resp.KVs, resp.Index, nil
}

// Watch implements core.Coordinator from the local replica: it blocks on
// the FSM's change channel (no polling) until the local store index
// passes after. The index never goes backwards because the local FSM only
// moves forward.
func (c *Coordinator) Watch(ctx context.Context, prefix string, after uint64) ([]core.KV, uint64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	if err := core.CheckPrefix(prefix); err != nil {
		return nil, 0, err
	}
	for {
		idx, changed := c.fsm.wait()
		if idx > after {
			kvs, idx := c.fsm.list(prefix)
			return kvs, idx, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-c.ctx.Done():
			return nil, 0, core.ErrClosed
		}
	}
}

// CompareAndSet implements core.Coordinator.
func (c *Coordinator) CompareAndSet(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if err := core.CheckWritableKey(key); err != nil {
		return 0, err
	}
	res, err := c.apply(ctx, &command{Op: opPut, Key: key, Value: value, Version: version})
	if err != nil {
		return 0, err
	}
	return res.Version, nil
}

// CompareAndDelete implements core.Coordinator.
func (c *Coordinator) CompareAndDelete(ctx context.Context, key string, version uint64) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := core.CheckWritableKey(key); err != nil {
		return err
	}
	_, err := c.apply(ctx, &command{Op: opDelete, Key: key, Version: version})
	return err
}

// apply commits a command through the leader and maps its result code to
// the core errors.
func (c *Coordinator) apply(ctx context.Context, cmd *command) (*result, error) {
	resp, err := c.toLeader(ctx, &rpcRequest{Op: rpcApply, Cmd: cmd})
	if err != nil {
		return nil, err
	}
	res := resp.Result
	if res == nil {
		return nil, fmt.Errorf("raft: the leader answered an apply without a result: %w", core.ErrCoordinationUnavailable)
	}
	switch res.Code {
	case codeOK:
		return res, nil
	case codeConflict:
		return nil, fmt.Errorf("raft: key %q is at version %d, not %d: %w", cmd.Key, res.Version, cmd.Version, core.ErrVersionConflict)
	case codeLeaseLost:
		return nil, fmt.Errorf("raft: lease %s: %w", cmd.Lease, core.ErrLeaseLost)
	}
	return nil, core.Errorf(core.ErrBadRequest, "raft: %s", res.Msg)
}

// Close implements core.Coordinator: a leader first hands leadership to
// another voter (so the cluster does not wait out an election timeout),
// then raft stops and every connection closes. Leases are not revoked.
func (c *Coordinator) Close() error { return c.shutdown(true) }

// crash stops the member the way a killed process would look to its
// peers: no leadership transfer, connections dropped. Tests use it.
func (c *Coordinator) crash() { _ = c.shutdown(false) }

func (c *Coordinator) shutdown(graceful bool) error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if graceful && c.raft.State() == hraft.Leader && c.otherVoters() > 0 {
			if err := c.raft.LeadershipTransfer().Error(); err != nil {
				c.log.Warn("raft: leadership transfer before shutdown failed; the others will elect a leader after the election timeout", "err", err)
			} else {
				c.log.Info("raft: handed leadership over before shutdown")
			}
		}
		c.cancel()
		if err := c.raft.Shutdown().Error(); err != nil {
			c.closeErr = err
		}
		c.net.close()
		c.pool.close()
		c.wg.Wait()
		c.metrics.unregister()
		if err := c.store.Close(); err != nil && c.closeErr == nil {
			c.closeErr = err
		}
		c.log.Info("raft: stopped", "node", c.opts.NodeID)
	})
	return c.closeErr
}

func (c *Coordinator) otherVoters() int {
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	n := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == hraft.Voter && string(s.ID) != c.opts.NodeID {
			n++
		}
	}
	return n
}
