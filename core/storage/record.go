package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// On-disk record layout (all integers little-endian):
//
//	0  u32 length     payload length in bytes (n)
//	4  u32 crc        CRC32C (Castagnoli) of bytes [0,4) and [8, 24+n)
//	8  u64 offset     the record's log offset
//	16 i64 timestamp  unix milliseconds, set by the appender
//	24 [n]byte data
//
// The CRC covers every byte of the record except itself, so a record whose
// length or offset field was damaged fails the check just like one whose
// payload was. A record is "intact" when its length is sane, it fits in the
// file, and the CRC matches.
const recHeaderLen = 24

// Segment file header (32 bytes, little-endian):
//
//	0  [8]byte magic  "FBRLSEG\x00"
//	8  u32 version    1
//	12 u32 reserved   0
//	16 u64 base       offset of the first record; equals the file name
//	24 u32 reserved   0
//	28 u32 crc        CRC32C of bytes [0,28)
const (
	segHeaderLen  = 32
	formatVersion = 1
)

var (
	segMagic = [8]byte{'F', 'B', 'R', 'L', 'S', 'E', 'G', 0}
	castTab  = crc32.MakeTable(crc32.Castagnoli)
)

// appendRecord encodes one record onto buf and returns the extended slice.
func appendRecord(buf []byte, off uint64, ts int64, data []byte) []byte {
	start := len(buf)
	n := recHeaderLen + len(data)
	if cap(buf)-start < n {
		nb := make([]byte, start, 2*cap(buf)+n)
		copy(nb, buf)
		buf = nb
	}
	buf = buf[:start+n]
	r := buf[start:]
	binary.LittleEndian.PutUint32(r[0:4], uint32(len(data)))
	binary.LittleEndian.PutUint64(r[8:16], off)
	binary.LittleEndian.PutUint64(r[16:24], uint64(ts))
	copy(r[recHeaderLen:], data)
	binary.LittleEndian.PutUint32(r[4:8], recordCRC(r))
	return buf
}

// recordCRC computes the CRC of an encoded record (header + payload).
func recordCRC(r []byte) uint32 {
	c := crc32.Update(0, castTab, r[0:4])
	return crc32.Update(c, castTab, r[8:])
}

// recHeader is a decoded record header.
type recHeader struct {
	length uint32
	crc    uint32
	offset uint64
	ts     int64
}

func decodeHeader(h []byte) recHeader {
	return recHeader{
		length: binary.LittleEndian.Uint32(h[0:4]),
		crc:    binary.LittleEndian.Uint32(h[4:8]),
		offset: binary.LittleEndian.Uint64(h[8:16]),
		ts:     int64(binary.LittleEndian.Uint64(h[16:24])),
	}
}

// checkRecord validates a fully read record r (header + payload) that is
// expected to carry offset want. It returns "" when the record is intact
// and correct, otherwise the reason.
func checkRecord(r []byte, want uint64) string {
	h := decodeHeader(r)
	if int(h.length) != len(r)-recHeaderLen {
		return "length mismatch"
	}
	if recordCRC(r) != h.crc {
		return "crc mismatch"
	}
	if h.offset != want {
		return fmt.Sprintf("offset field %d", h.offset)
	}
	return ""
}

func encodeSegHeader(base uint64) []byte {
	h := make([]byte, segHeaderLen)
	copy(h[0:8], segMagic[:])
	binary.LittleEndian.PutUint32(h[8:12], formatVersion)
	binary.LittleEndian.PutUint64(h[16:24], base)
	binary.LittleEndian.PutUint32(h[28:32], crc32.Checksum(h[:28], castTab))
	return h
}

// checkSegHeader returns "" if h is a valid header for a segment with base.
func checkSegHeader(h []byte, base uint64) string {
	if len(h) < segHeaderLen {
		return "short header"
	}
	if [8]byte(h[0:8]) != segMagic {
		return "bad magic"
	}
	if crc32.Checksum(h[:28], castTab) != binary.LittleEndian.Uint32(h[28:32]) {
		return "header crc mismatch"
	}
	if v := binary.LittleEndian.Uint32(h[8:12]); v != formatVersion {
		return fmt.Sprintf("unsupported format version %d", v)
	}
	if b := binary.LittleEndian.Uint64(h[16:24]); b != base {
		return fmt.Sprintf("header base %d does not match file name", b)
	}
	return ""
}
