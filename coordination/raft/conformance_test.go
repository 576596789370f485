package raft

import (
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/coordtest"
)

// TestConformance runs the shared core.Coordinator suite against
// in-process clusters on 127.0.0.1.
func TestConformance(t *testing.T) {
	coordtest.Run(t, func(t *testing.T, n int) *coordtest.Cluster {
		c := newCluster(t, n, nil)
		c.leader()
		members := make([]core.Coordinator, n)
		for i := range n {
			members[i] = c.member(i)
		}
		return &coordtest.Cluster{Members: members, Stop: c.stop}
	})
}
