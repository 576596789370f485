package wire

// FNV-1a 64-bit parameters (docs/protocol.md#publish).
const (
	fnvOffsetBasis uint64 = 0xcbf29ce484222325
	fnvPrime       uint64 = 0x00000100000001b3
)

// FNV1a64 hashes key with 64-bit FNV-1a, the hash every SDK uses to map a
// partition key to a partition (docs/protocol.md#publish). It is written out rather than taken
// from hash/fnv to avoid an allocation per call.
func FNV1a64(key []byte) uint64 {
	h := fnvOffsetBasis
	for _, c := range key {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// PartitionForKey returns the partition an SDK picks for key among n
// partitions: 0 when n ≤ 1, else FNV-1a-64(key) mod n (docs/protocol.md#publish). The broker
// never recomputes this (it trusts the publish's partition field); the
// helper exists for the project's own client and for tests.
func PartitionForKey(key []byte, n uint32) uint32 {
	if n <= 1 {
		return 0
	}
	return uint32(FNV1a64(key) % uint64(n))
}
