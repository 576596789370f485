package raft

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
)

// Operating the raft group (core.ConsensusMembers): list its members with
// the leader's view of which it reaches, and change one for good — remove
// a member that will not come back, promote or demote a voter. Changes
// run on the leader, which refuses one that would leave the voters
// without a quorum it can reach (docs: coordination/raft/README.md#members).

var _ core.ConsensusMembers = (*Coordinator)(nil)

const codeNotFound = "not_found"

// setUnreachable records the peers the leader's heartbeats fail to reach,
// with when that began (watchPeers, after each observation).
func (c *Coordinator) setUnreachable(down map[hraft.ServerID]*peerOutage) {
	m := make(map[hraft.ServerID]time.Time, len(down))
	for id, o := range down {
		m[id] = o.since
	}
	c.unreachable.Store(&m)
}

func (c *Coordinator) downSince(id hraft.ServerID) (time.Time, bool) {
	m := c.unreachable.Load()
	if m == nil {
		return time.Time{}, false
	}
	t, ok := (*m)[id]
	return t, ok
}

// ConsensusMembers lists the raft configuration as its leader sees it.
func (c *Coordinator) ConsensusMembers(ctx context.Context) ([]core.ConsensusMember, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	resp, err := c.toLeader(ctx, &rpcRequest{Op: rpcMembers})
	if err != nil {
		return nil, err
	}
	if err := memberErr(resp); err != nil {
		return nil, err
	}
	return resp.Members, nil
}

// ChangeConsensusMember removes, promotes or demotes a member, on the
// leader. addr is needed only to add a member the configuration does not
// list.
func (c *Coordinator) ChangeConsensusMember(ctx context.Context, change core.ConsensusChange, id, addr string) error {
	if err := c.check(); err != nil {
		return err
	}
	switch change {
	case core.ConsensusRemove, core.ConsensusAddVoter, core.ConsensusDemote:
	default:
		return core.Errorf(core.ErrBadRequest, "unknown membership change %q", change)
	}
	if id == "" {
		return core.Errorf(core.ErrBadRequest, "a membership change needs a node id")
	}
	resp, err := c.toLeader(ctx, &rpcRequest{Op: rpcChange, Change: string(change), ID: id, Addr: addr})
	if err != nil {
		return err
	}
	return memberErr(resp)
}

func memberErr(resp *rpcResponse) error {
	switch resp.Code {
	case codeOK:
		return nil
	case codeConflict:
		return core.Errorf(core.ErrConflict, "%s", resp.Msg)
	case codeBadRequest:
		return core.Errorf(core.ErrBadRequest, "%s", resp.Msg)
	case codeNotFound:
		return core.Errorf(core.ErrNotFound, "%s", resp.Msg)
	}
	return core.Errorf(core.ErrUnavailable, "raft: %s", resp.Msg)
}

// leaderMembers answers rpcMembers: the configuration, the leader, and
// which members the leader's heartbeats reach.
func (c *Coordinator) leaderMembers() *rpcResponse {
	if c.raft.State() != hraft.Leader {
		return c.notLeader()
	}
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &rpcResponse{Code: codeUnavailable, Msg: err.Error()}
	}
	var out []core.ConsensusMember
	for _, s := range f.Configuration().Servers {
		m := core.ConsensusMember{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == hraft.Voter,
			Leader: string(s.ID) == c.opts.NodeID, Reachable: true}
		if since, down := c.downSince(s.ID); down && !m.Leader {
			m.Reachable, m.DownSince = false, &since
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b core.ConsensusMember) int { return strings.Compare(a.ID, b.ID) })
	return &rpcResponse{Members: out}
}

// leaderChange answers rpcChange after checking that the voters left
// still make a quorum the leader reaches.
func (c *Coordinator) leaderChange(ctx context.Context, req *rpcRequest) *rpcResponse {
	if c.raft.State() != hraft.Leader {
		return c.notLeader()
	}
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &rpcResponse{Code: codeUnavailable, Msg: err.Error()}
	}
	servers := f.Configuration().Servers
	voters := map[hraft.ServerID]bool{}
	var target *hraft.Server
	for i, s := range servers {
		if s.Suffrage == hraft.Voter {
			voters[s.ID] = true
		}
		if string(s.ID) == req.ID {
			target = &servers[i]
		}
	}
	id := hraft.ServerID(req.ID)
	timeout := c.opts.RaftTimeout * 4
	switch core.ConsensusChange(req.Change) {
	case core.ConsensusRemove:
		if target == nil {
			return &rpcResponse{Code: codeNotFound, Msg: fmt.Sprintf("%s is not a member of the raft group", req.ID)}
		}
		delete(voters, id)
		if resp := c.quorumAfter(voters, servers, "removing "+req.ID); resp != nil {
			return resp
		}
		return c.membershipResult(ctx, "remove", req, c.raft.RemoveServer(id, 0, timeout))
	case core.ConsensusDemote:
		if target == nil {
			return &rpcResponse{Code: codeNotFound, Msg: fmt.Sprintf("%s is not a member of the raft group", req.ID)}
		}
		if target.Suffrage != hraft.Voter {
			return &rpcResponse{} // a non-voter already
		}
		delete(voters, id)
		if resp := c.quorumAfter(voters, servers, "demoting "+req.ID); resp != nil {
			return resp
		}
		return c.membershipResult(ctx, "demote", req, c.raft.DemoteVoter(id, 0, timeout))
	case core.ConsensusAddVoter:
		addr := hraft.ServerAddress(req.Addr)
		if target != nil {
			if target.Suffrage == hraft.Voter {
				return &rpcResponse{} // a voter already
			}
			if req.Addr != "" && addr != target.Address {
				return &rpcResponse{Code: codeBadRequest, Msg: fmt.Sprintf("%s is a member at %s, not %s", req.ID, target.Address, req.Addr)}
			}
			addr = target.Address
		} else if req.Addr == "" {
			return &rpcResponse{Code: codeBadRequest, Msg: fmt.Sprintf("%s is not a member yet: give its raft address", req.ID)}
		}
		voters[id] = true
		if resp := c.quorumAfter(voters, servers, "adding "+req.ID+" as a voter"); resp != nil {
			return resp
		}
		return c.membershipResult(ctx, "add voter", req, c.raft.AddVoter(id, addr, 0, timeout))
	}
	return &rpcResponse{Code: codeBadRequest, Msg: fmt.Sprintf("unknown membership change %q", req.Change)}
}

// quorumAfter refuses (conflict) a change after which the voters would be
// none, or more than the leader reaches could outvote: a quorum of the
// new voter set must be reachable now (the leader counts itself; a member
// not in servers, the configuration the change starts from, counts as
// unreachable).
func (c *Coordinator) quorumAfter(voters map[hraft.ServerID]bool, servers []hraft.Server, what string) *rpcResponse {
	if len(voters) == 0 {
		return &rpcResponse{Code: codeConflict, Msg: what + " would leave the raft group without a voter"}
	}
	known := func(id hraft.ServerID) bool {
		return slices.ContainsFunc(servers, func(s hraft.Server) bool { return s.ID == id })
	}
	reachable := 0
	var down []string
	for _, v := range slices.Sorted(maps.Keys(voters)) {
		_, isDown := c.downSince(v)
		if string(v) == c.opts.NodeID || (known(v) && !isDown) {
			reachable++
		} else {
			down = append(down, string(v))
		}
	}
	need := len(voters)/2 + 1
	if reachable < need {
		return &rpcResponse{Code: codeConflict, Msg: fmt.Sprintf("%s would leave %d voters of which %d are reachable (not: %s); a quorum needs %d, so the cluster would stop: bring the members back first",
			what, len(voters), reachable, strings.Join(down, ", "), need)}
	}
	return nil
}
