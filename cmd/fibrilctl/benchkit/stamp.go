package benchkit

import (
	"encoding/binary"
	"time"
)

// epoch is the process-wide start instant. Stamps are nanoseconds since
// epoch on the monotonic clock (time.Since never looks at the wall clock),
// so publish→deliver latency is exact within one process and immune to
// clock steps.
var epoch = time.Now()

// Now is the monotonic time in nanoseconds since the process started.
func Now() int64 { return int64(time.Since(epoch)) }

// HeaderSize is the number of leading payload bytes the bench uses:
//
//	[0:8)   send stamp, ns since epoch (the scheduled send time under --rate)
//	[8:12)  run id (random per run: messages of other runs are told apart)
//	[12:16) producer index
//	[16:24) sequence number within the producer, from 0
//	[24:32) actual send instant, ns since epoch (equal to the send stamp
//	        without --rate; later by the bench's own lateness with it)
//
// all little-endian. The rest of the payload is filler.
const HeaderSize = 32

// Stamp is the decoded bench header of a payload.
type Stamp struct {
	Sent     int64
	Run      uint32
	Producer uint32
	Seq      uint64
	Actual   int64
}

// Put writes s into the first HeaderSize bytes of p.
func (s Stamp) Put(p []byte) {
	_ = p[HeaderSize-1]
	binary.LittleEndian.PutUint64(p[0:], uint64(s.Sent))
	binary.LittleEndian.PutUint32(p[8:], s.Run)
	binary.LittleEndian.PutUint32(p[12:], s.Producer)
	binary.LittleEndian.PutUint64(p[16:], s.Seq)
	binary.LittleEndian.PutUint64(p[24:], uint64(s.Actual))
}

// ReadStamp decodes the header of p; ok is false when p is too short.
func ReadStamp(p []byte) (s Stamp, ok bool) {
	if len(p) < HeaderSize {
		return Stamp{}, false
	}
	s.Sent = int64(binary.LittleEndian.Uint64(p[0:]))
	s.Run = binary.LittleEndian.Uint32(p[8:])
	s.Producer = binary.LittleEndian.Uint32(p[12:])
	s.Seq = binary.LittleEndian.Uint64(p[16:])
	s.Actual = int64(binary.LittleEndian.Uint64(p[24:]))
	return s, true
}
