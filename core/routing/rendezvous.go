package routing

import (
	"encoding/binary"

	"github.com/fibrilgo/fibril/core"
)

// Score is the gateway rendezvous score of node for partition ref, exactly
// as core/routing/README.md#gateway-set pins it, so that every broker picks
// the same gateway: splitmix64(fnv1a64(topic ‖ 0x00 ‖ group ‖ 0x00 ‖
// u32be(partition) ‖ 0x00 ‖ node_id)), an absent group being "".
func Score(ref core.PartitionRef, node core.NodeID) uint64 {
	const (
		offset = 0xcbf29ce484222325
		prime  = 0x100000001b3
	)
	h := uint64(offset)
	add := func(b ...byte) {
		for _, c := range b {
			h ^= uint64(c)
			h *= prime
		}
	}
	add([]byte(ref.Topic)...)
	add(0)
	add([]byte(ref.Group)...)
	add(0)
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], ref.Partition)
	add(p[:]...)
	add(0)
	add([]byte(node)...)
	return splitmix64(h)
}

func splitmix64(x uint64) uint64 {
	z := x + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Rendezvous returns the node with the highest Score for ref (a tie goes
// to the smaller id), or "" when nodes is empty.
func Rendezvous(ref core.PartitionRef, nodes []core.NodeID) core.NodeID {
	var best core.NodeID
	var bestScore uint64
	for _, n := range nodes {
		s := Score(ref, n)
		if best == "" || s > bestScore || s == bestScore && n < best {
			best, bestScore = n, s
		}
	}
	return best
}
