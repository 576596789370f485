package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	hraft "github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// boltStore is raft's LogStore and StableStore in one bbolt file. It
// exists because raft-boltdb/v2 cannot be built with raft v1.8.0 (see
// coordination/raft/DESIGN.md#log-store-our-own-on-bbolt). Every Update transaction fsyncs before it
// returns (NoSync is false), which is what raft requires: a log entry or a
// vote it was told is stored must survive a power loss.
type boltStore struct {
	db *bolt.DB
}

var (
	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")
)

// errStableNotFound is what raft expects from a StableStore for a missing
// key: it compares the error text with "not found".
var errStableNotFound = errors.New("not found")

// logFormat versions the encoding of one log entry.
const logFormat = 1

// openBoltStore opens (creating) the store at path, waiting up to lockWait
// for another process's lock on the file to go.
// errStoreLocked: another process has the log store open.
var errStoreLocked = errors.New("another process holds it (is a second broker using this data directory?)")

func openBoltStore(path string, lockWait time.Duration) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait, NoSync: false})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: %w", path, errStoreLocked)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketLogs, bucketStable} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initialise %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) Close() error { return s.db.Close() }

func indexKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i)
	return k[:]
}

// FirstIndex returns the first stored index, 0 when the log is empty.
func (s *boltStore) FirstIndex() (uint64, error) {
	var i uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLogs).Cursor().First(); k != nil {
			i = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return i, err
}

// LastIndex returns the last stored index, 0 when the log is empty.
func (s *boltStore) LastIndex() (uint64, error) {
	var i uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLogs).Cursor().Last(); k != nil {
			i = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return i, err
}

// GetLog reads one entry; a missing one is hraft.ErrLogNotFound.
func (s *boltStore) GetLog(index uint64, out *hraft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(indexKey(index))
		if v == nil {
			return hraft.ErrLogNotFound
		}
		return decodeLog(v, out)
	})
}

func (s *boltStore) StoreLog(l *hraft.Log) error { return s.StoreLogs([]*hraft.Log{l}) }

// StoreLogs writes a batch in one transaction, so one fsync covers it.
func (s *boltStore) StoreLogs(logs []*hraft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			if err := b.Put(indexKey(l.Index), encodeLog(l)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteRange removes entries min..max inclusive (compaction after a
// snapshot, or a conflicting suffix).
func (s *boltStore) DeleteRange(minIdx, maxIdx uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(indexKey(minIdx)); k != nil && binary.BigEndian.Uint64(k) <= maxIdx; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) Set(key, val []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketStable).Put(key, val)
	})
}

func (s *boltStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketStable).Get(key)
		if v == nil {
			return errStableNotFound
		}
		out = append([]byte(nil), v...) // bbolt memory is valid only inside the transaction
		return nil
	})
	return out, err
}

func (s *boltStore) SetUint64(key []byte, val uint64) error { return s.Set(key, indexKey(val)) }

func (s *boltStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("stable key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// encodeLog lays an entry out as: format, index, term, type, appended-at
// (unix ns, 0 = unset), then data and extensions, each uvarint-length
// prefixed. A hand-written layout keeps the store free of a codec
// dependency and stable across library upgrades.
func encodeLog(l *hraft.Log) []byte {
	buf := make([]byte, 0, 1+8+8+1+8+2*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	buf = append(buf, logFormat)
	buf = binary.BigEndian.AppendUint64(buf, l.Index)
	buf = binary.BigEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.BigEndian.AppendUint64(buf, uint64(at))
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	return append(buf, l.Extensions...)
}

var errCorruptLog = errors.New("raft log store: corrupt entry")

func decodeLog(v []byte, l *hraft.Log) error {
	const fixed = 1 + 8 + 8 + 1 + 8
	if len(v) < fixed || v[0] != logFormat {
		return errCorruptLog
	}
	l.Index = binary.BigEndian.Uint64(v[1:])
	l.Term = binary.BigEndian.Uint64(v[9:])
	l.Type = hraft.LogType(v[17])
	l.AppendedAt = time.Time{}
	if at := int64(binary.BigEndian.Uint64(v[18:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	rest := v[fixed:]
	var err error
	if l.Data, rest, err = readChunk(rest); err != nil {
		return err
	}
	if l.Extensions, rest, err = readChunk(rest); err != nil {
		return err
	}
	if len(rest) != 0 {
		return errCorruptLog
	}
	return nil
}

// readChunk reads a uvarint-prefixed byte string, copying it out of
// bbolt's memory; empty chunks decode as nil.
func readChunk(b []byte) ([]byte, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, errCorruptLog
	}
	b = b[w:]
	if n == 0 {
		return nil, b, nil
	}
	return append([]byte(nil), b[:n]...), b[n:], nil
}
