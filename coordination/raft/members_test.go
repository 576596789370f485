package raft

import (
	"errors"
	"testing"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
)

// The operator's view and changes of the raft group, asked on any member:
// a member that stops is shown unreachable; removing a reachable voter
// while another is down is refused (the rest could not make a quorum),
// removing the one that is down works; a voter is demoted and promoted
// again; the last voter cannot go.
func TestConsensusMembers(t *testing.T) {
	c := newCluster(t, 3, nil)
	li, leader := c.leader()
	fi, follower := c.follower(li)
	ctx := ctxT(t)
	ms, err := follower.ConsensusMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("members %+v", ms)
	}
	for _, m := range ms {
		if !m.Voter || !m.Reachable || m.Leader != (m.ID == leader.opts.NodeID) {
			t.Errorf("member %+v (leader %s)", m, leader.opts.NodeID)
		}
	}
	// The third member stops.
	di := 3 - li - fi
	downID := c.opts[di].NodeID
	c.stop(di)
	testkit.Eventually(t, waitLong, downID+" shown unreachable", func() bool {
		ms, err := follower.ConsensusMembers(ctx)
		if err != nil {
			return false
		}
		for _, m := range ms {
			if m.ID == downID {
				return !m.Reachable && m.DownSince != nil
			}
		}
		return false
	})
	followerID := follower.opts.NodeID
	err = leader.ChangeConsensusMember(ctx, core.ConsensusRemove, followerID, "")
	if !errors.Is(err, core.ErrConflict) {
		t.Fatalf("removing a reachable voter while another is down: %v", err)
	}
	if err := follower.ChangeConsensusMember(ctx, core.ConsensusRemove, "nobody", ""); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("removing a member that does not exist: %v", err)
	}
	if err := follower.ChangeConsensusMember(ctx, core.ConsensusRemove, downID, ""); err != nil {
		t.Fatalf("removing the member that is down: %v", err)
	}
	testkit.Eventually(t, waitLong, "two members left", func() bool { return len(servers(leader)) == 2 })

	if err := follower.ChangeConsensusMember(ctx, core.ConsensusDemote, followerID, ""); err != nil {
		t.Fatalf("demote: %v", err)
	}
	ms, err = leader.ConsensusMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == followerID && m.Voter {
			t.Fatalf("still a voter after demote: %+v", ms)
		}
	}
	if err := leader.ChangeConsensusMember(ctx, core.ConsensusRemove, leader.opts.NodeID, ""); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("removing the last voter: %v", err)
	}
	if err := leader.ChangeConsensusMember(ctx, core.ConsensusAddVoter, followerID, ""); err != nil {
		t.Fatalf("promote: %v", err)
	}
	testkit.Eventually(t, waitLong, followerID+" a voter again", func() bool {
		for _, s := range servers(leader) {
			if string(s.ID) == followerID {
				return s.Suffrage == hraft.Voter
			}
		}
		return false
	})
	if err := leader.ChangeConsensusMember(ctx, core.ConsensusAddVoter, "n9", ""); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("adding a new member without an address: %v", err)
	}
}
