package raft

import (
	"context"
	"errors"
	"slices"
	"time"

	hraft "github.com/hashicorp/raft"
)

// membership runs once at start: a new cluster's bootstrapper bootstraps
// it, every other member makes sure it is in the configuration (joining,
// or fixing a stale entry of its id). See coordination/raft/DESIGN.md#membership.
func (c *Coordinator) membership(hasState bool) {
	if !hasState && c.opts.bootstrapper() {
		if c.bootstrap() {
			return
		}
	}
	c.ensureMember()
}

// bootstrap waits until BootstrapExpect members (this one included)
// answer a ping without raft state, then bootstraps the configuration of
// every listed peer. If a peer already has state, a cluster exists (this
// node's data was lost, or it was added later) and it joins instead: it
// returns false. Pinging first means a bootstrapper never starts a second
// cluster next to an existing one that it can reach.
func (c *Coordinator) bootstrap() bool {
	backoff := 50 * time.Millisecond
	others := c.opts.otherPeers()
	for {
		reached := 1
		for _, p := range others {
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.RaftTimeout)
			resp, _, err := c.pool.call(ctx, p.ID, p.Addr, &rpcRequest{Op: rpcPing})
			cancel()
			switch {
			case err != nil || resp.Code != codeOK:
			case resp.HasState:
				c.log.Warn("raft: a listed peer already belongs to a cluster; joining it instead of bootstrapping", "peer", p.ID)
				return false
			default:
				reached++
			}
		}
		if reached >= c.opts.BootstrapExpect {
			break
		}
		c.log.Info("raft: waiting for peers before bootstrapping", "reached", reached, "bootstrap_expect", c.opts.BootstrapExpect)
		select {
		case <-c.ctx.Done():
			return true
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	servers := make([]hraft.Server, 0, len(c.opts.Peers))
	for _, p := range c.opts.Peers {
		addr := p.Addr
		if p.ID == c.opts.NodeID {
			addr = c.advertise
		}
		servers = append(servers, hraft.Server{Suffrage: hraft.Voter, ID: hraft.ServerID(p.ID), Address: hraft.ServerAddress(addr)})
	}
	err := c.raft.BootstrapCluster(hraft.Configuration{Servers: servers}).Error()
	switch {
	case err == nil:
		c.log.Info("raft: bootstrapped a new cluster", "members", len(servers))
	case errors.Is(err, hraft.ErrCantBootstrap):
		// State appeared meanwhile (a leader reached us first): fine.
	default:
		c.log.Error("raft: bootstrap failed", "err", err)
		return false
	}
	return true
}

// inConfig reports whether the configuration lists this member at its
// address with the wanted suffrage.
func (c *Coordinator) inConfig() bool {
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	want := hraft.Voter
	if c.opts.NonVoter {
		want = hraft.Nonvoter
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s hraft.Server) bool {
		return string(s.ID) == c.opts.NodeID && string(s.Address) == c.advertise && s.Suffrage == want
	})
}

// ensureMember asks the leader to add (or fix) this member until the
// configuration it replicates here lists it. Each join is idempotent on
// the leader, so asking again while the change propagates is harmless.
func (c *Coordinator) ensureMember() {
	backoff := 50 * time.Millisecond
	for c.ctx.Err() == nil {
		if c.inConfig() {
			c.log.Debug("raft: this member is in the configuration", "node", c.opts.NodeID)
			return
		}
		if err := c.requestJoin(); err != nil {
			c.log.Info("raft: not in the cluster configuration yet; asking to join", "err", err)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// requestJoin sends one join request to the leader, found through the
// known leader, the configuration and the configured peers, following
// not_leader hints.
func (c *Coordinator) requestJoin() error {
	type target struct{ id, addr string }
	var targets []target
	seen := map[string]bool{c.advertise: true}
	add := func(id, addr string) {
		if addr != "" && !seen[addr] {
			seen[addr] = true
			targets = append(targets, target{id, addr})
		}
	}
	addr, id := c.raft.LeaderWithID()
	add(string(id), string(addr))
	if f := c.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) != c.opts.NodeID {
				add(string(s.ID), string(s.Address))
			}
		}
	}
	for _, p := range c.opts.otherPeers() {
		add(p.ID, p.Addr)
	}
	req := &rpcRequest{Op: rpcJoin, ID: c.opts.NodeID, Addr: c.advertise, Voter: !c.opts.NonVoter}
	last := errors.New("no member to ask")
	for i := 0; i < len(targets) && i < 16; i++ {
		t := targets[i]
		ctx, cancel := context.WithTimeout(c.ctx, 4*c.opts.RaftTimeout)
		resp, _, err := c.pool.call(ctx, t.id, t.addr, req)
		cancel()
		switch {
		case err != nil:
			last = err
		case resp.Code == codeOK:
			return nil
		case resp.Code == codeNotLeader && resp.LeaderAddr != "":
			add(resp.LeaderID, resp.LeaderAddr)
			last = errors.New(resp.Msg)
		default:
			last = errors.New(resp.Msg)
		}
	}
	return last
}
