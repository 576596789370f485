package main

import (
	"encoding/binary"
	"time"
)

// epoch is the process start; stamps are monotonic ns since it, so
// publish→deliver latency is exact inside one process and immune to
// wall-clock steps (time.Since uses the monotonic reading).
var epoch = time.Now()

// Now is the monotonic time in ns since the process started.
func Now() int64 { return int64(time.Since(epoch)) }

// HeaderSize is the number of leading payload bytes the bench uses. The
// layout is the one of `fibrilctl bench`, all little-endian:
//
//	[0:8)   send instant, ns since epoch (the scheduled instant under --rate)
//	[8:12)  run id (random per run)
//	[12:16) producer index
//	[16:24) sequence number within the producer, from 0
const HeaderSize = 24

// Stamp is the decoded bench header.
type Stamp struct {
	Sent     int64
	Run      uint32
	Producer uint32
	Seq      uint64
}

// Put writes s into the first HeaderSize bytes of p.
func (s Stamp) Put(p []byte) {
	_ = p[HeaderSize-1]
	binary.LittleEndian.PutUint64(p[0:], uint64(s.Sent))
	binary.LittleEndian.PutUint32(p[8:], s.Run)
	binary.LittleEndian.PutUint32(p[12:], s.Producer)
	binary.LittleEndian.PutUint64(p[16:], s.Seq)
}

// ReadStamp decodes the header of p; ok is false when p is too short.
func ReadStamp(p []byte) (s Stamp, ok bool) {
	if len(p) < HeaderSize {
		return s, false
	}
	return Stamp{
		Sent:     int64(binary.LittleEndian.Uint64(p[0:])),
		Run:      binary.LittleEndian.Uint32(p[8:]),
		Producer: binary.LittleEndian.Uint32(p[12:]),
		Seq:      binary.LittleEndian.Uint64(p[16:]),
	}, true
}
