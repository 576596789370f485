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

// Segment file header (32 bytes, little-endian), version 2:
//
//	0  [8]byte magic  "FBRLSEG\x00"
//	8  u32 version    2
//	12 u32 durable    bytes of the file an fsync had made durable when this
//	                  field was written (the "durable slot")
//	16 u64 base       offset of the first record; equals the file name
//	24 u32 slot crc   CRC32C of bytes [12,24)
//	28 u32 crc        CRC32C of bytes [0,12) and [16,24): the fixed part
//
// Version 1 (still read) has zeros at 12 and 24 and a CRC of [0,28) at 28:
// it records no durable size. The journal's header has the same layout
// with its own magic and the generation in place of base. The durable
// slot is rewritten (bytes [12,28), one write inside one sector) right
// before an fsync, with the size an earlier fsync made durable, so what it
// claims is always on disk; recovery uses it to tell a torn tail from
// corruption (core/storage/README.md#recovery).
const (
	segHeaderLen  = 32
	formatVersion = 1 // the index file's version, and headers without a durable slot
	headerVersion = 2 // segment and journal headers with a durable slot
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

// encodeFileHeader returns a version 2 header (segment or journal) whose
// durable slot claims durable bytes.
func encodeFileHeader(magic [8]byte, id uint64, durable int64) []byte {
	h := make([]byte, segHeaderLen)
	copy(h[0:8], magic[:])
	binary.LittleEndian.PutUint32(h[8:12], headerVersion)
	binary.LittleEndian.PutUint64(h[16:24], id)
	c := crc32.Update(0, castTab, h[0:12])
	binary.LittleEndian.PutUint32(h[28:32], crc32.Update(c, castTab, h[16:24]))
	putDurable(h, durable)
	return h
}

// putDurable sets the durable slot of an encoded version 2 header.
func putDurable(h []byte, durable int64) {
	binary.LittleEndian.PutUint32(h[12:16], uint32(durable))
	binary.LittleEndian.PutUint32(h[24:28], crc32.Checksum(h[12:24], castTab))
}

// writeDurable rewrites the durable slot of f's version 2 header (id is
// its base or generation): bytes [12,28), one write inside the first
// sector, so a power loss leaves the old slot or the new one. It is not
// counted in BytesWritten, which counts the files' content.
func writeDurable(f File, magic [8]byte, id uint64, durable int64) error {
	h := encodeFileHeader(magic, id, durable)
	_, err := f.WriteAt(h[12:28], 12)
	return err
}

// checkFileHeader validates a segment or journal header h for id (base or
// generation). It returns "" when the header is valid, else the reason;
// and the durable size the header's slot records, or -1 when it records
// none (version 1) or the slot fails its check.
func checkFileHeader(h []byte, magic [8]byte, id uint64, idName string) (string, int64) {
	if len(h) < segHeaderLen {
		return "short header", -1
	}
	if [8]byte(h[0:8]) != magic {
		return "bad magic", -1
	}
	durable := int64(-1)
	switch v := binary.LittleEndian.Uint32(h[8:12]); v {
	case formatVersion:
		if crc32.Checksum(h[:28], castTab) != binary.LittleEndian.Uint32(h[28:32]) {
			return "header crc mismatch", -1
		}
	case headerVersion:
		c := crc32.Update(0, castTab, h[0:12])
		if crc32.Update(c, castTab, h[16:24]) != binary.LittleEndian.Uint32(h[28:32]) {
			return "header crc mismatch", -1
		}
		if crc32.Checksum(h[12:24], castTab) == binary.LittleEndian.Uint32(h[24:28]) {
			durable = int64(binary.LittleEndian.Uint32(h[12:16]))
		}
	default:
		return fmt.Sprintf("unsupported format version %d", v), -1
	}
	if b := binary.LittleEndian.Uint64(h[16:24]); b != id {
		return fmt.Sprintf("header %s %d does not match file name", idName, b), -1
	}
	return "", durable
}

func encodeSegHeader(base uint64) []byte { return encodeFileHeader(segMagic, base, segHeaderLen) }

// checkSegHeader returns "" if h is a valid header for a segment with base,
// and the durable size its slot records (-1: none).
func checkSegHeader(h []byte, base uint64) (string, int64) {
	return checkFileHeader(h, segMagic, base, "base")
}
