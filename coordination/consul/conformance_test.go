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
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/plugintest"
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
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	coordtest.Run(t, newCluster(agent))
}

// TestConformancePlugin runs the suite through the plugin protocol, with
// the configuration a broker would hand the plugin process.
func TestConformancePlugin(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	info := plugins.Info{Name: "consul", Version: "test", Config: consul.ConfigKeys}
	plugintest.CoordinationConformance(t, info, func(t *testing.T, n int) []plugins.CoordinationFactory {
		prefix := fmt.Sprintf("pt%d-%d", time.Now().UnixNano(), clusterSeq.Add(1))
		out := make([]plugins.CoordinationFactory, n)
		for i := range out {
			out[i] = func(ctx context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
				env.Config = map[string]string{consul.KeyAddresses: agent.Addr, consul.KeyPrefix: prefix}
				return consul.Factory(ctx, env)
			}
		}
		return out
	})
}
