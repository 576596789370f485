package routing

import (
	"testing"

	"github.com/fibrilgo/fibril/core"
)

// TestRendezvousVectors reproduces the table of
// core/routing/README.md#gateway-set, so that every broker (and every implementation) agrees on
// the gateway of a partition.
func TestRendezvousVectors(t *testing.T) {
	cases := []struct {
		ref    core.PartitionRef
		scores [3]uint64
		winner core.NodeID
	}{
		{core.PartitionRef{Topic: "orders", Partition: 0}, [3]uint64{0x38a7061633f3a45d, 0xf2c233d7f11cd83c, 0x11afdbdf7b65f511}, "node-b"},
		{core.PartitionRef{Topic: "orders", Partition: 3}, [3]uint64{0x0122181c6d6c8c46, 0x68c98da02144958a, 0xb7d7825de1b22f96}, "node-c"},
		{core.PartitionRef{Topic: "payments", Partition: 2}, [3]uint64{0xc9c01d434616b314, 0x13145a97dfc06351, 0xc97fdd3d2dded582}, "node-a"},
		{core.PartitionRef{Topic: "orders", Group: "billing", Partition: 0}, [3]uint64{0x9b5dd2e582c6d0ef, 0x2526c99bfc890f91, 0xeab3ef130e867516}, "node-c"},
	}
	nodes := []core.NodeID{"node-a", "node-b", "node-c"}
	for _, c := range cases {
		for i, n := range nodes {
			if got := Score(c.ref, n); got != c.scores[i] {
				t.Errorf("Score(%s, %s) = %#016x, want %#016x", c.ref, n, got, c.scores[i])
			}
		}
		if got := Rendezvous(c.ref, nodes); got != c.winner {
			t.Errorf("Rendezvous(%s) = %s, want %s", c.ref, got, c.winner)
		}
		// Order of the candidate list must not matter.
		if got := Rendezvous(c.ref, []core.NodeID{"node-c", "node-a", "node-b"}); got != c.winner {
			t.Errorf("Rendezvous(%s) depends on order: %s", c.ref, got)
		}
	}
}
