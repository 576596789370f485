package broker

import (
	"context"

	"github.com/fibrilgo/fibril/core"
)

// The raft group's members through the admin API (coordination/raft/README.md#members):
// available when the coordination backend is one whose members the
// operator manages (core.ConsensusMembers: the built-in raft).

func (b *Broker) consensus() (core.ConsensusMembers, error) {
	c := b.adminCluster.Load()
	if c == nil {
		return nil, core.Errorf(core.ErrNotFound, "a standalone broker has no raft group")
	}
	cm, ok := c.coord.(core.ConsensusMembers)
	if !ok {
		return nil, core.Errorf(core.ErrNotFound, "coordination.backend %q has no members to manage here (only the built-in raft has)", b.cfg.Coordination.Backend)
	}
	return cm, nil
}

// raftMembers is GET /admin/api/raft/members.
func (b *Broker) raftMembers(ctx context.Context) (any, error) {
	cm, err := b.consensus()
	if err != nil {
		return nil, err
	}
	ms, err := cm.ConsensusMembers(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"members": ms}, nil
}

// raftChange is POST /admin/api/raft/{remove,add-voter,demote}; user is
// the admin user, for the audit trail.
func (b *Broker) raftChange(ctx context.Context, change core.ConsensusChange, node, addr, user string) (any, error) {
	cm, err := b.consensus()
	if err != nil {
		return nil, err
	}
	if err := cm.ChangeConsensusMember(ctx, change, node, addr); err != nil {
		b.log.Warn("raft membership change refused", "change", string(change), "node", node, "admin_user", user, "err", err)
		return nil, err
	}
	b.log.Warn("raft membership changed", "change", string(change), "node", node, "addr", addr, "admin_user", user)
	ms, err := cm.ConsensusMembers(ctx)
	if err != nil {
		return map[string]any{"change": change, "node": node}, nil
	}
	return map[string]any{"change": change, "node": node, "members": ms}, nil
}
