package storage_test

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// Self-describing record payloads: 8 bytes of id, then a body derived
// from the id. Any record found after a crash can be checked for being one
// that some appender really wrote, byte for byte.
func idData(id uint64) []byte {
	n := int(id*2654435761>>7) % 180
	b := make([]byte, 8+n)
	binary.LittleEndian.PutUint64(b, id)
	for i := range n {
		b[8+i] = byte(id>>uint(i%8*8)) ^ byte(i)
	}
	return b
}

// parseID returns the id of a payload made by idData, or false if the
// payload is not exactly such a payload.
func parseID(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	id := binary.LittleEndian.Uint64(b)
	return id, slices.Equal(b, idData(id))
}

func checksum(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
