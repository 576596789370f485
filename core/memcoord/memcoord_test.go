package memcoord_test

import (
	"strconv"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/coordtest"
	"github.com/fibrilgo/fibril/core/memcoord"
)

// newCluster is the conformance factory: one store, n members on the real
// clock. Stop is Close, since a Close and a crash look the same here.
func newCluster(t *testing.T, n int) *coordtest.Cluster {
	s := memcoord.NewStore(memcoord.Options{})
	cl := &coordtest.Cluster{}
	for i := range n {
		cl.Members = append(cl.Members, s.Member("m"+strconv.Itoa(i)))
	}
	cl.Stop = func(i int) { cl.Members[i].Close() }
	t.Cleanup(func() {
		for _, m := range cl.Members {
			m.Close() // ErrClosed for members a test closed already
		}
	})
	return cl
}

func TestConformance(t *testing.T) {
	coordtest.Run(t, newCluster)
}

var _ core.Coordinator = (*memcoord.Member)(nil)
