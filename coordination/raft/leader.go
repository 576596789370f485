package raft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
)

// handle answers one request, locally or for a peer. Only ping works on
// any member; the rest need the leader and answer not_leader elsewhere.
func (c *Coordinator) handle(ctx context.Context, req *rpcRequest) *rpcResponse {
	if c.closed.Load() {
		return &rpcResponse{Code: codeClosed, Msg: "the member is shutting down"}
	}
	switch req.Op {
	case rpcPing:
		return &rpcResponse{HasState: c.hasState()}
	case rpcApply:
		if req.Cmd == nil {
			return &rpcResponse{Code: codeBadRequest, Msg: "apply without a command"}
		}
		return c.leaderApply(ctx, req.Cmd)
	case rpcRenew:
		return c.leaderRenew(ctx, req.Lease)
	case rpcRead:
		return c.leaderRead(ctx, req)
	case rpcJoin:
		return c.leaderJoin(ctx, req)
	case rpcMembers:
		return c.leaderMembers()
	case rpcChange:
		return c.leaderChange(ctx, req)
	}
	return &rpcResponse{Code: codeBadRequest, Msg: fmt.Sprintf("unknown rpc %q", req.Op)}
}

func (c *Coordinator) notLeader() *rpcResponse {
	addr, id := c.raft.LeaderWithID()
	return &rpcResponse{Code: codeNotLeader, Msg: c.opts.NodeID + " is not the leader", LeaderID: string(id), LeaderAddr: string(addr)}
}

// hasState reports whether this member already belongs to a cluster (a
// bootstrapper must not start a second one next to it).
func (c *Coordinator) hasState() bool {
	if c.raft.LastIndex() > 0 {
		return true
	}
	f := c.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// await waits for a raft future or the end of ctx.
func await(ctx context.Context, f hraft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaderApply commits cmd and returns its result. Raft answers an apply
// only after the leader's FSM applied it, which is what makes a later
// leader read see it.
func (c *Coordinator) leaderApply(ctx context.Context, cmd *command) *rpcResponse {
	if c.raft.State() != hraft.Leader {
		return c.notLeader()
	}
	data, err := json.Marshal(cmd)
	if err != nil {
		return &rpcResponse{Code: codeBadRequest, Msg: err.Error()}
	}
	f := c.raft.Apply(data, c.opts.RaftTimeout)
	err = await(ctx, f)
	switch {
	case err == nil:
		res, ok := f.Response().(*result)
		if !ok {
			return &rpcResponse{Code: codeUnknown, Msg: fmt.Sprintf("unexpected FSM response %T", f.Response())}
		}
		return &rpcResponse{Result: res}
	case errors.Is(err, hraft.ErrNotLeader):
		return c.notLeader() // never appended: safe to retry elsewhere
	case errors.Is(err, hraft.ErrEnqueueTimeout), errors.Is(err, hraft.ErrLeadershipTransferInProgress):
		return &rpcResponse{Code: codeUnavailable, Msg: err.Error()}
	case errors.Is(err, hraft.ErrRaftShutdown):
		return &rpcResponse{Code: codeUnknown, Msg: "the leader shut down during the write"}
	case ctx.Err() != nil:
		return &rpcResponse{Code: codeUnknown, Msg: "the deadline passed before the write was confirmed"}
	}
	return &rpcResponse{Code: codeUnknown, Msg: "leadership changed during the write (" + err.Error() + ")"}
}

// gate admits a leader-only read or renewal: this member leads, has
// caught up in this term (readyTerm), and a quorum still confirms it
// (VerifyLeader), so no newer leader can have answered anything yet.
func (c *Coordinator) gate(ctx context.Context) (uint64, *rpcResponse) {
	if c.raft.State() != hraft.Leader {
		return 0, c.notLeader()
	}
	term := c.readyTerm.Load()
	if term == 0 || term != c.raft.CurrentTerm() {
		return 0, &rpcResponse{Code: codeUnavailable, Msg: "the new leader is catching up"}
	}
	if err := await(ctx, c.raft.VerifyLeader()); err != nil {
		if ctx.Err() != nil {
			return 0, &rpcResponse{Code: codeUnavailable, Msg: "the deadline passed while confirming leadership"}
		}
		return 0, c.notLeader()
	}
	// Lost and regained in between: the new term has not caught up yet.
	if c.raft.CurrentTerm() != term {
		return 0, &rpcResponse{Code: codeUnavailable, Msg: "leadership changed"}
	}
	return term, nil
}

// leaderRead answers Get and List. Every write acknowledged so far was
// applied to this FSM before it was acknowledged (or before readyTerm was
// set, for earlier terms), and gate proved no other leader exists, so the
// local state is linearizable here without a log write.
func (c *Coordinator) leaderRead(ctx context.Context, req *rpcRequest) *rpcResponse {
	if _, resp := c.gate(ctx); resp != nil {
		return resp
	}
	if req.List {
		kvs, idx := c.fsm.list(req.Key)
		return &rpcResponse{KVs: kvs, Index: idx}
	}
	kv, idx := c.fsm.get(req.Key)
	if kv.Version == 0 {
		return &rpcResponse{Index: idx}
	}
	return &rpcResponse{KVs: []core.KV{kv}, Index: idx}
}

// leaderRenew extends a lease's deadline without touching the log. The
// receipt time is taken before the leadership check: the holder called
// Renew earlier still, so receipt + TTL is at least the ValidUntil the
// holder will compute.
func (c *Coordinator) leaderRenew(ctx context.Context, id string) *rpcResponse {
	at := time.Now()
	term, resp := c.gate(ctx)
	if resp != nil {
		return resp
	}
	ttl, ok := c.fsm.leaseTTL(id)
	if !ok || !c.keeper.renew(term, id, at.Add(ttl)) {
		return &rpcResponse{Code: codeLeaseLost, Msg: "lease " + id + " has ended"}
	}
	return &rpcResponse{TTL: ttl}
}

// leaderLoop follows raft's leadership signal and runs lead for each
// term this member leads.
func (c *Coordinator) leaderLoop() {
	var stop context.CancelFunc
	var stopped chan struct{}
	end := func() {
		if stop != nil {
			stop()
			<-stopped
			stop = nil
		}
	}
	defer end()
	for {
		select {
		case isLeader := <-c.raft.LeaderCh():
			// Signals may be coalesced (lost and regained shows as true,
			// true): restart on every one.
			end()
			c.metrics.isLeader.Set(boolGauge(isLeader))
			if isLeader {
				ctx, cancel := context.WithCancel(c.ctx)
				stop, stopped = cancel, make(chan struct{})
				go func() {
					defer close(stopped)
					c.lead(ctx)
				}()
			}
		case <-c.ctx.Done():
			return
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// lead runs one term of leadership: catch the FSM up, give every lease a
// fresh deadline, open the gate, then expire leases until the term ends.
func (c *Coordinator) lead(ctx context.Context) {
	term := c.raft.CurrentTerm()
	c.log.Info("raft: leading", "node", c.opts.NodeID, "term", term)
	// Barrier commits an entry of this term and returns once the FSM has
	// applied everything before it, including whatever earlier leaders
	// committed (an expiry among them must take effect before a renewal
	// is answered).
	for {
		err := c.raft.Barrier(0).Error()
		if err == nil {
			break
		}
		if ctx.Err() != nil || c.raft.State() != hraft.Leader {
			return
		}
		c.log.Warn("raft: barrier failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.opts.RaftTimeout / 4):
		}
	}
	if c.raft.CurrentTerm() != term || c.raft.State() != hraft.Leader {
		return
	}
	// A new leader does not know when holders last renewed, so every lease
	// starts a full TTL from now: never earlier than any ValidUntil a
	// previous leader promised (coordination/raft/DESIGN.md#leases-expiry-by-the-leader-renewal-is-not-a-write).
	c.keeper.start(term, c.fsm.leaseTTLs(), time.Now())
	c.readyTerm.Store(term)
	defer func() {
		c.readyTerm.CompareAndSwap(term, 0)
		c.keeper.stop(term)
	}()
	c.expireLoop(ctx, term)
}

// errJoinSelf refuses a join that claims the leader's own id.
var errJoinSelf = errors.New("that node id is the current leader's: two processes share one node id")

// leaderJoin adds a member, or fixes its entry: a member with the same id
// at another address, or another id at the same address, is stale (a
// rebuilt or moved node) and is removed first. An identical entry is a
// no-op, so joining is idempotent.
func (c *Coordinator) leaderJoin(ctx context.Context, req *rpcRequest) *rpcResponse {
	if c.raft.State() != hraft.Leader {
		return c.notLeader()
	}
	if req.ID == "" || req.Addr == "" {
		return &rpcResponse{Code: codeBadRequest, Msg: "join needs an id and an address"}
	}
	if req.ID == c.opts.NodeID {
		return &rpcResponse{Code: codeBadRequest, Msg: errJoinSelf.Error()}
	}
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &rpcResponse{Code: codeUnavailable, Msg: err.Error()}
	}
	id, addr := hraft.ServerID(req.ID), hraft.ServerAddress(req.Addr)
	want := hraft.Nonvoter
	if req.Voter {
		want = hraft.Voter
	}
	timeout := c.opts.RaftTimeout * 4
	for _, s := range f.Configuration().Servers {
		sameID, sameAddr := s.ID == id, s.Address == addr
		switch {
		case sameID && sameAddr && s.Suffrage == want:
			return &rpcResponse{}
		case sameID && sameAddr && want == hraft.Nonvoter:
			return c.membershipResult(ctx, "demote", req, c.raft.DemoteVoter(id, 0, timeout))
		case sameID && sameAddr:
			return c.membershipResult(ctx, "promote", req, c.raft.AddVoter(id, addr, 0, timeout))
		case sameID || sameAddr:
			if string(s.ID) == c.opts.NodeID {
				return &rpcResponse{Code: codeBadRequest, Msg: "the address " + req.Addr + " is the leader's own"}
			}
			c.log.Warn("raft: replacing a stale member", "old_node", string(s.ID), "old_addr", string(s.Address),
				"new_node", req.ID, "new_addr", req.Addr)
			if resp := c.membershipResult(ctx, "remove stale", req, c.raft.RemoveServer(s.ID, 0, timeout)); resp.Code != codeOK {
				return resp
			}
		}
	}
	if want == hraft.Voter {
		return c.membershipResult(ctx, "add voter", req, c.raft.AddVoter(id, addr, 0, timeout))
	}
	return c.membershipResult(ctx, "add non-voter", req, c.raft.AddNonvoter(id, addr, 0, timeout))
}

func (c *Coordinator) membershipResult(ctx context.Context, what string, req *rpcRequest, f hraft.Future) *rpcResponse {
	if err := await(ctx, f); err != nil {
		if errors.Is(err, hraft.ErrNotLeader) || errors.Is(err, hraft.ErrLeadershipLost) {
			return c.notLeader()
		}
		return &rpcResponse{Code: codeUnavailable, Msg: what + ": " + err.Error()}
	}
	c.log.Info("raft: membership updated", "change", what, "node", req.ID, "addr", req.Addr)
	return &rpcResponse{}
}
