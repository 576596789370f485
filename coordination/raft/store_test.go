package raft

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
)

func TestBoltStoreLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := openBoltStore(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 0 {
		t.Fatalf("empty store first index %d", first)
	}
	at := time.Unix(1700000000, 123)
	var logs []*hraft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &hraft.Log{Index: i, Term: 2, Type: hraft.LogCommand, Data: []byte{byte(i)}, AppendedAt: at})
	}
	logs[3].Extensions = []byte("ext")
	logs[4].Data = nil
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(&hraft.Log{Index: 11, Term: 3, Type: hraft.LogConfiguration}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Everything survives a reopen.
	if s, err = openBoltStore(path, time.Second); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 4 || last != 11 {
		t.Fatalf("range %d..%d, want 4..11", first, last)
	}
	var l hraft.Log
	if err := s.GetLog(2, &l); !errors.Is(err, hraft.ErrLogNotFound) {
		t.Fatalf("deleted entry: %v", err)
	}
	if err := s.GetLog(4, &l); err != nil {
		t.Fatal(err)
	}
	if l.Index != 4 || l.Term != 2 || l.Type != hraft.LogCommand || !bytes.Equal(l.Data, []byte{4}) ||
		string(l.Extensions) != "ext" || !l.AppendedAt.Equal(at) {
		t.Fatalf("entry 4: %+v", l)
	}
	if err := s.GetLog(5, &l); err != nil || l.Data != nil || l.Extensions != nil {
		t.Fatalf("entry 5: %+v %v", l, err)
	}
	if err := s.GetLog(11, &l); err != nil || l.Type != hraft.LogConfiguration || !l.AppendedAt.IsZero() {
		t.Fatalf("entry 11: %+v %v", l, err)
	}
}

func TestBoltStoreStable(t *testing.T) {
	s, err := openBoltStore(filepath.Join(t.TempDir(), "raft.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// raft tells "absent" from a failure by this exact text.
	if _, err := s.Get([]byte("x")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := s.GetUint64([]byte("x")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing uint64: %v", err)
	}
	if err := s.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("get: %q %v", v, err)
	}
	if err := s.SetUint64([]byte("term"), 42); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("term")); err != nil || v != 42 {
		t.Fatalf("uint64: %d %v", v, err)
	}
	if _, err := s.GetUint64([]byte("k")); err == nil {
		t.Fatal("a 1-byte value read as a uint64")
	}
}

func TestDecodeLogRejectsGarbage(t *testing.T) {
	good := encodeLog(&hraft.Log{Index: 1, Term: 1, Data: []byte("abc")})
	var l hraft.Log
	for _, b := range [][]byte{nil, {9}, good[:len(good)-1], append(good[:len(good):len(good)], 0)} {
		if err := decodeLog(b, &l); err == nil {
			t.Errorf("%x decoded", b)
		}
	}
}

func TestStoreIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := openBoltStore(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// bbolt locks the file: a second broker on the same data dir fails
	// with a message saying so instead of corrupting the log.
	if _, err := openBoltStore(path, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("opened a store twice: %v", err)
	}
}

// sink is an in-memory hraft.SnapshotSink.
type sink struct {
	bytes.Buffer
	cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }
func (s *sink) Close() error  { return nil }

func applyCmd(t *testing.T, f *fsm, index uint64, c command) *result {
	t.Helper()
	data := mustJSON(t, c)
	return f.Apply(&hraft.Log{Index: index, Data: data}).(*result)
}

func TestFSMSnapshotRestore(t *testing.T) {
	f := newFSM()
	applyCmd(t, f, 1, command{Op: opGrant, TTL: time.Second})
	lid := leaseID(1)
	if r := applyCmd(t, f, 2, command{Op: opPut, Key: "a", Value: []byte("1"), Version: 0, Lease: lid}); r.Code != codeOK || r.Version != 2 {
		t.Fatalf("put: %+v", r)
	}
	applyCmd(t, f, 3, command{Op: opPut, Key: "b", Value: []byte("2"), Version: core.AnyVersion})
	if r := applyCmd(t, f, 4, command{Op: opPut, Key: "b", Version: 1}); r.Code != codeConflict {
		t.Fatalf("stale put: %+v", r)
	}
	if f.storeIndex() != 3 {
		t.Fatalf("a refused write moved the store index to %d", f.storeIndex())
	}
	if r := applyCmd(t, f, 5, command{Op: opPut, Key: "c", Lease: "l999"}); r.Code != codeLeaseLost {
		t.Fatalf("put on an unknown lease: %+v", r)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	if err := g.Restore(io.NopCloser(&s)); err != nil {
		t.Fatal(err)
	}
	if g.storeIndex() != 3 {
		t.Fatalf("restored index %d", g.storeIndex())
	}
	if kv, _ := g.get("a"); kv.Lease != lid || kv.Version != 2 || string(kv.Value) != "1" {
		t.Fatalf("restored a: %+v", kv)
	}
	// The lease's bound keys were rebuilt: expiring it deletes "a".
	applyCmd(t, g, 6, command{Op: opExpire, Lease: lid})
	if kv, _ := g.get("a"); kv.Version != 0 {
		t.Fatalf("expired lease's key survived a restore: %+v", kv)
	}
	if kvs, _ := g.list(""); len(kvs) != 1 || kvs[0].Key != "b" {
		t.Fatalf("after expiry: %+v", kvs)
	}
	if r := applyCmd(t, g, 7, command{Op: "bogus"}); r.Code != codeBadRequest {
		t.Fatalf("unknown op: %+v", r)
	}
	if r := g.Apply(&hraft.Log{Index: 8, Data: []byte("{")}).(*result); r.Code != codeBadRequest {
		t.Fatalf("garbage: %+v", r)
	}
}
