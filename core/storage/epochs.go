package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
)

// The epoch history: for each assignment epoch in which records were
// written to this partition, the offset of its first record. Replicas
// compare histories to find where their logs part (the last epoch two
// replicas share ends, for both, where the owner's history says), and cut
// the rest (TruncatePartition) — see core/storage/README.md#epochs.
//
// File "epochs" in the partition directory, replaced whole (ReplaceFile)
// at each new epoch, little-endian:
//
//	0  [8]byte magic "FBRLEPO\x00"
//	8  u32 count n
//	12 n × (u64 epoch, u64 start)
//	.. u32 CRC32C of everything before it
const epochsFile = "epochs"

var epochsMagic = [8]byte{'F', 'B', 'R', 'L', 'E', 'P', 'O', 0}

// maxEpochs bounds the history kept: the oldest entries go first. A
// replica whose logs part before the oldest kept entry resynchronises from
// a checkpoint, as one too far behind does.
const maxEpochs = 1024

// EpochStart is one entry of the epoch history: records from Start on
// (up to the next entry's Start) were written in Epoch.
type EpochStart struct {
	Epoch uint64
	Start uint64
}

func encodeEpochs(h []EpochStart) []byte {
	b := make([]byte, 0, 16+16*len(h))
	b = append(b, epochsMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	for _, e := range h {
		b = binary.LittleEndian.AppendUint64(b, e.Epoch)
		b = binary.LittleEndian.AppendUint64(b, e.Start)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castTab))
}

// readEpochs returns the partition's history (nil when it has none).
// Entries starting past next (recorded for records a crash lost) are
// dropped: the log has nothing of those epochs.
func readEpochs(fsys FS, dir string, next uint64) ([]EpochStart, error) {
	path := filepath.Join(dir, epochsFile)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	bad := &CorruptionError{File: path, Reason: "damaged epoch history"}
	if size < 16 || size > 16+16*maxEpochs {
		return nil, bad
	}
	b := make([]byte, size)
	if !readFull(f, b, 0) {
		return nil, bad
	}
	n := int(binary.LittleEndian.Uint32(b[8:12]))
	if [8]byte(b[0:8]) != epochsMagic || int64(16+16*n) != size ||
		crc32.Checksum(b[:size-4], castTab) != binary.LittleEndian.Uint32(b[size-4:]) {
		return nil, bad
	}
	h := make([]EpochStart, 0, n)
	for i := range n {
		e := EpochStart{binary.LittleEndian.Uint64(b[12+16*i:]), binary.LittleEndian.Uint64(b[20+16*i:])}
		if i > 0 && (e.Epoch <= h[i-1].Epoch || e.Start < h[i-1].Start) {
			return nil, bad
		}
		h = append(h, e)
	}
	for len(h) > 0 && h[len(h)-1].Start > next {
		h = h[:len(h)-1]
	}
	return h, nil
}

// cutEpochs drops the entries of dir's history that start at or after
// next (TruncatePartition: their records are gone). An entry starting at
// next has no record left; the replica learns it again from the owner.
func cutEpochs(fsys FS, dir string, next uint64) error {
	h, err := readEpochs(fsys, dir, ^uint64(0))
	if err != nil || len(h) == 0 {
		return err
	}
	k := len(h)
	for k > 0 && h[k-1].Start >= next {
		k--
	}
	if k == len(h) {
		return nil
	}
	return ReplaceFile(fsys, dir, epochsFile, encodeEpochs(h[:k]))
}

// Epochs returns a copy of the partition's epoch history, oldest first.
func (p *Partition) Epochs() []EpochStart {
	p.epochMu.Lock()
	defer p.epochMu.Unlock()
	return append([]EpochStart(nil), p.epochs...)
}

// EpochOf returns the epoch of the history in which the record at off was
// written and where that epoch's records end (the next entry's start);
// 0 and no end when the history says nothing about off. A replication
// stream asks it for every batch, so it reads the history in place.
func (p *Partition) EpochOf(off uint64) (epoch, end uint64) {
	p.epochMu.Lock()
	defer p.epochMu.Unlock()
	end = ^uint64(0)
	for i := len(p.epochs) - 1; i >= 0; i-- {
		if p.epochs[i].Start <= off {
			return p.epochs[i].Epoch, end
		}
		end = p.epochs[i].Start
	}
	return 0, end
}

// BeginEpoch records that the records appended from now on are written in
// epoch: the owner calls it when it starts serving the partition under a
// new assignment epoch, before it appends anything in it. Recording the
// epoch the history already ends with is a no-op; an older one is refused
// (a deposed owner must not write).
func (p *Partition) BeginEpoch(epoch uint64) error {
	p.mu.Lock()
	next := p.next
	p.mu.Unlock()
	return p.BeginEpochAt(epoch, next)
}

// BeginEpochAt records that the records from start on were written in
// epoch, as the owner's history says: a follower calls it when the
// owner's records it applies enter a new epoch. start may not be past the
// partition's next offset, nor before the last entry's start.
func (p *Partition) BeginEpochAt(epoch, start uint64) error {
	p.epochMu.Lock()
	defer p.epochMu.Unlock()
	if n := len(p.epochs); n > 0 {
		last := p.epochs[n-1]
		switch {
		case epoch == last.Epoch:
			return nil
		case epoch < last.Epoch:
			return fmt.Errorf("storage: epoch %d is older than the partition's epoch %d", epoch, last.Epoch)
		case start < last.Start:
			return fmt.Errorf("storage: epoch %d cannot start at %d, before epoch %d's start %d", epoch, start, last.Epoch, last.Start)
		}
	}
	p.mu.Lock()
	next := p.next
	p.mu.Unlock()
	if start > next {
		return fmt.Errorf("%w: epoch %d cannot start at %d, past the log's next offset %d", ErrOutOfRange, epoch, start, next)
	}
	h := append(p.epochs[max(0, len(p.epochs)+1-maxEpochs):len(p.epochs):len(p.epochs)], EpochStart{epoch, start})
	if err := ReplaceFile(p.fs, p.dir, epochsFile, encodeEpochs(h)); err != nil {
		return fmt.Errorf("storage: record epoch %d: %w", epoch, err)
	}
	p.epochs = h
	return nil
}

// EpochEnd answers a replica that last wrote in epoch: the largest epoch
// of this partition's history not above it, and where that epoch's
// records end here — the next entry's start, or the log's next offset for
// the last entry. The replica keeps its records below end (its own
// records of that epoch beyond end were never written here) and cuts the
// rest. ok is false when the history holds no epoch that old: the replica
// resynchronises from a checkpoint.
func (p *Partition) EpochEnd(epoch uint64) (found, end uint64, ok bool) {
	p.epochMu.Lock()
	defer p.epochMu.Unlock()
	for i := len(p.epochs) - 1; i >= 0; i-- {
		e := p.epochs[i]
		if e.Epoch > epoch {
			continue
		}
		if i+1 < len(p.epochs) {
			return e.Epoch, p.epochs[i+1].Start, true
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return e.Epoch, p.next, true
	}
	return 0, 0, false
}
