package consul_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/coordination/consul/consultest"
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/coordtest"
)

var clusterSeq atomic.Int64

// newCluster returns a coordtest factory: n Coordinators on one agent,
// under a prefix of their own, so subtests never see each other's keys.
func newCluster(agent *consultest.Agent) func(t *testing.T, n int) *coordtest.Cluster {
	return func(t *testing.T, n int) *coordtest.Cluster {
		prefix := fmt.Sprintf("ct%d-%d", time.Now().UnixNano(), clusterSeq.Add(1))
		members := make([]core.Coordinator, n)
		for i := range n {
			members[i] = open(t, consul.Options{NodeID: fmt.Sprintf("n%d", i), Addresses: []string{agent.Addr}, Prefix: prefix})
		}
		return &coordtest.Cluster{Members: members, Stop: func(i int) { _ = members[i].Close() }}
	}
}

func open(t *testing.T, o consul.Options) *consul.Coordinator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := consul.Open(ctx, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	coordtest.Run(t, newCluster(agent))
}
