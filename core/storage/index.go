package storage

import (
	"encoding/binary"
	"hash/crc32"
	"os"
)

// The sparse index maps a record's offset (relative to the segment base) to
// its byte position, one entry every Options.IndexEveryBytes of log. It is
// an accelerator only: the log is the source of truth. The in-memory index
// is maintained as records are written; the .idx file is written when a
// segment is sealed (rolled) or the partition is closed, never fsynced, and
// validated on open (whole-file CRC, monotonic entries inside the file,
// and the record at the last entry must decode with the offset the entry
// claims). Anything that fails validation is rebuilt by scanning the log.
//
// .idx layout (little-endian):
//
//	0  [8]byte magic "FBRLIDX\x00"
//	8  u32 version   1
//	12 u32 count     number of entries
//	16 u64 base      segment base offset
//	24 count × { u32 rel offset, u32 file position }
//	.. u32 crc       CRC32C of every preceding byte
type idxEntry struct {
	rel uint32
	pos uint32
}

const idxHeaderLen = 24

var idxMagic = [8]byte{'F', 'B', 'R', 'L', 'I', 'D', 'X', 0}

func encodeIndex(base uint64, ents []idxEntry) []byte {
	b := make([]byte, idxHeaderLen+8*len(ents)+4)
	copy(b[0:8], idxMagic[:])
	binary.LittleEndian.PutUint32(b[8:12], formatVersion)
	binary.LittleEndian.PutUint32(b[12:16], uint32(len(ents)))
	binary.LittleEndian.PutUint64(b[16:24], base)
	p := idxHeaderLen
	for _, e := range ents {
		binary.LittleEndian.PutUint32(b[p:], e.rel)
		binary.LittleEndian.PutUint32(b[p+4:], e.pos)
		p += 8
	}
	binary.LittleEndian.PutUint32(b[p:], crc32.Checksum(b[:p], castTab))
	return b
}

// decodeIndex parses and structurally validates an index file for a
// segment of the given base and file size. It returns nil if the index
// cannot be trusted at all.
func decodeIndex(b []byte, base uint64, fileSize int64) []idxEntry {
	if len(b) < idxHeaderLen+4 || [8]byte(b[0:8]) != idxMagic {
		return nil
	}
	if binary.LittleEndian.Uint32(b[8:12]) != formatVersion || binary.LittleEndian.Uint64(b[16:24]) != base {
		return nil
	}
	n := int(binary.LittleEndian.Uint32(b[12:16]))
	if len(b) != idxHeaderLen+8*n+4 {
		return nil
	}
	p := idxHeaderLen + 8*n
	if crc32.Checksum(b[:p], castTab) != binary.LittleEndian.Uint32(b[p:]) {
		return nil
	}
	ents := make([]idxEntry, n)
	for i := range ents {
		q := idxHeaderLen + 8*i
		ents[i] = idxEntry{rel: binary.LittleEndian.Uint32(b[q:]), pos: binary.LittleEndian.Uint32(b[q+4:])}
		if i == 0 && ents[0] != (idxEntry{0, segHeaderLen}) {
			return nil
		}
		if i > 0 && (ents[i].rel <= ents[i-1].rel || ents[i].pos <= ents[i-1].pos) {
			return nil
		}
		if int64(ents[i].pos) >= fileSize && i > 0 {
			return nil
		}
	}
	if n == 0 {
		return nil
	}
	return ents
}

// writeIndexFile writes the index of a segment. Best effort: a missing or
// torn index only costs a scan at the next open, so it is not fsynced.
func writeIndexFile(fsys FS, path string, base uint64, ents []idxEntry) error {
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(encodeIndex(base, ents), 0)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// readIndexFile loads an index file; a missing or unreadable file yields nil.
func readIndexFile(fsys FS, path string, base uint64, fileSize int64) []idxEntry {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil || n > 64<<20 {
		return nil
	}
	b := make([]byte, n)
	if m, _ := f.ReadAt(b, 0); int64(m) != n {
		return nil
	}
	return decodeIndex(b, base, fileSize)
}
