package raft

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
)

// Log commands. Every change of the key space is one of these, committed
// through raft and applied identically on every member; nothing else
// writes the state. Renewing a lease is deliberately not a command (see
// leases.go).
const (
	opPut    = "put"    // compare-and-set, optionally bound to a lease
	opDelete = "delete" // compare-and-delete
	opGrant  = "grant"  // create a lease
	opRevoke = "revoke" // end a lease at the holder's request
	opExpire = "expire" // end a lease the leader saw go unrenewed
)

// command is one log entry's payload (JSON).
type command struct {
	Op      string        `json:"op"`
	Key     string        `json:"key,omitempty"`
	Value   []byte        `json:"value,omitempty"`
	Version uint64        `json:"version,omitempty"` // expected version
	Lease   string        `json:"lease,omitempty"`
	TTL     time.Duration `json:"ttl,omitempty"`
}

// Result codes of a command, shared with the RPC answers.
const (
	codeOK          = ""
	codeConflict    = "conflict"
	codeLeaseLost   = "lease_lost"
	codeBadRequest  = "bad_request"
	codeNotLeader   = "not_leader"
	codeUnavailable = "unavailable"
	codeUnknown     = "outcome_unknown"
	codeClosed      = "closed"
)

// result is what applying a command produced.
type result struct {
	Code    string `json:"code,omitempty"`
	Version uint64 `json:"version,omitempty"` // new version of a put
	Lease   string `json:"lease,omitempty"`   // id of a granted lease
	Msg     string `json:"msg,omitempty"`
}

type entry struct {
	value   []byte
	version uint64
	lease   string
}

type leaseState struct {
	ttl  time.Duration
	keys map[string]struct{}
}

// fsm is the replicated state machine: the key space, the leases and the
// store index (the log index of the last command that changed anything).
// Reads take the read lock; raft applies from one goroutine.
type fsm struct {
	mu     sync.RWMutex
	index  uint64
	kv     map[string]entry
	leases map[string]*leaseState
	// changed is closed and replaced whenever index moves, waking every
	// Watch at once without polling.
	changed chan struct{}
	// leasesChanged receives a token (never blocking) when the set of
	// leases changes, so the leader's expiry loop re-reads it.
	leasesChanged chan struct{}
}

func newFSM() *fsm {
	return &fsm{
		kv:            map[string]entry{},
		leases:        map[string]*leaseState{},
		changed:       make(chan struct{}),
		leasesChanged: make(chan struct{}, 1),
	}
}

// leaseID names the lease granted by the command at index: log indexes
// are unique for the life of a cluster, so ids never repeat.
func leaseID(index uint64) string { return "l" + strconv.FormatUint(index, 10) }

// Apply implements hraft.FSM.
func (f *fsm) Apply(l *hraft.Log) any {
	var cmd command
	if err := json.Unmarshal(l.Data, &cmd); err != nil {
		// A command this version cannot read would be a bug or a newer
		// member; refusing it the same way everywhere keeps replicas equal.
		return &result{Code: codeBadRequest, Msg: "undecodable command: " + err.Error()}
	}
	f.mu.Lock()
	res, wrote, leases := f.apply(l.Index, &cmd)
	if wrote {
		f.index = l.Index
		close(f.changed)
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
	if leases {
		f.signalLeases()
	}
	return res
}

// apply runs one command under the write lock. wrote says whether the
// state changed (the store index moves only then); leases whether the set
// of leases did.
func (f *fsm) apply(index uint64, c *command) (res *result, wrote, leases bool) {
	switch c.Op {
	case opPut:
		cur := f.kv[c.Key]
		if c.Version != core.AnyVersion && c.Version != cur.version {
			return &result{Code: codeConflict, Version: cur.version}, false, false
		}
		if c.Lease != "" {
			if _, ok := f.leases[c.Lease]; !ok {
				return &result{Code: codeLeaseLost}, false, false
			}
		}
		f.unbind(c.Key, cur.lease)
		f.kv[c.Key] = entry{value: c.Value, version: index, lease: c.Lease}
		if c.Lease != "" {
			f.leases[c.Lease].keys[c.Key] = struct{}{}
		}
		return &result{Version: index}, true, false
	case opDelete:
		cur, ok := f.kv[c.Key]
		if c.Version != core.AnyVersion && c.Version != cur.version {
			return &result{Code: codeConflict, Version: cur.version}, false, false
		}
		if !ok {
			return &result{}, false, false
		}
		f.unbind(c.Key, cur.lease)
		delete(f.kv, c.Key)
		return &result{}, true, false
	case opGrant:
		id := leaseID(index)
		f.leases[id] = &leaseState{ttl: c.TTL, keys: map[string]struct{}{}}
		return &result{Lease: id}, true, true
	case opRevoke, opExpire:
		ls, ok := f.leases[c.Lease]
		if !ok {
			return &result{Code: codeLeaseLost}, false, false
		}
		for k := range ls.keys {
			delete(f.kv, k)
		}
		delete(f.leases, c.Lease)
		return &result{}, true, true
	}
	return &result{Code: codeBadRequest, Msg: "unknown command " + strconv.Quote(c.Op)}, false, false
}

func (f *fsm) unbind(key, lease string) {
	if ls, ok := f.leases[lease]; ok {
		delete(ls.keys, key)
	}
}

func (f *fsm) signalLeases() {
	select {
	case f.leasesChanged <- struct{}{}:
	default:
	}
}

// get reads one key from the local state.
func (f *fsm) get(key string) (core.KV, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.kv[key]
	if !ok {
		return core.KV{Key: key}, f.index
	}
	return core.KV{Key: key, Value: slices.Clone(e.value), Version: e.version, Lease: e.lease}, f.index
}

// list reads every key under prefix, sorted, from the local state.
func (f *fsm) list(prefix string) ([]core.KV, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.listLocked(prefix), f.index
}

func (f *fsm) listLocked(prefix string) []core.KV {
	out := []core.KV{}
	for k, e := range f.kv {
		if strings.HasPrefix(k, prefix) {
			out = append(out, core.KV{Key: k, Value: slices.Clone(e.value), Version: e.version, Lease: e.lease})
		}
	}
	slices.SortFunc(out, func(a, b core.KV) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// wait returns the current store index and a channel closed when it next
// moves.
func (f *fsm) wait() (uint64, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index, f.changed
}

// storeIndex is the index of the last applied write.
func (f *fsm) storeIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// leaseTTLs lists every lease with its TTL (for the leader's expiry loop).
func (f *fsm) leaseTTLs() map[string]time.Duration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]time.Duration, len(f.leases))
	for id, ls := range f.leases {
		out[id] = ls.ttl
	}
	return out
}

// leaseTTL reports a lease's TTL and whether it exists.
func (f *fsm) leaseTTL(id string) (time.Duration, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ls, ok := f.leases[id]
	if !ok {
		return 0, false
	}
	return ls.ttl, true
}

// snapshotData is the whole state as persisted in a raft snapshot. Bound
// keys are not stored per lease: they are rebuilt from the keys' Lease.
type snapshotData struct {
	Format int             `json:"format"`
	Index  uint64          `json:"index"`
	KV     []snapshotEntry `json:"kv"`
	Leases []snapshotLease `json:"leases"`
}

type snapshotEntry struct {
	Key     string `json:"key"`
	Value   []byte `json:"value,omitempty"`
	Version uint64 `json:"version"`
	Lease   string `json:"lease,omitempty"`
}

type snapshotLease struct {
	ID  string        `json:"id"`
	TTL time.Duration `json:"ttl"`
}

const snapshotFormat = 1

// Snapshot implements hraft.FSM. Raft calls it between Applies; the copy
// is taken under the read lock (values are never modified in place, so
// sharing their bytes is safe) and written out later by Persist.
func (f *fsm) Snapshot() (hraft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	d := &snapshotData{Format: snapshotFormat, Index: f.index,
		KV: make([]snapshotEntry, 0, len(f.kv)), Leases: make([]snapshotLease, 0, len(f.leases))}
	for k, e := range f.kv {
		d.KV = append(d.KV, snapshotEntry{Key: k, Value: e.value, Version: e.version, Lease: e.lease})
	}
	for id, ls := range f.leases {
		d.Leases = append(d.Leases, snapshotLease{ID: id, TTL: ls.ttl})
	}
	return d, nil
}

// Persist implements hraft.FSMSnapshot.
func (d *snapshotData) Persist(sink hraft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(d); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements hraft.FSMSnapshot.
func (d *snapshotData) Release() {}

// Restore implements hraft.FSM: the state is replaced wholesale.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var d snapshotData
	if err := json.NewDecoder(rc).Decode(&d); err != nil {
		return fmt.Errorf("raft snapshot: %w", err)
	}
	if d.Format != snapshotFormat {
		return fmt.Errorf("raft snapshot: format %d, this version reads %d", d.Format, snapshotFormat)
	}
	kv := make(map[string]entry, len(d.KV))
	leases := make(map[string]*leaseState, len(d.Leases))
	for _, l := range d.Leases {
		leases[l.ID] = &leaseState{ttl: l.TTL, keys: map[string]struct{}{}}
	}
	for _, e := range d.KV {
		kv[e.Key] = entry{value: e.Value, version: e.Version, lease: e.Lease}
		if ls, ok := leases[e.Lease]; ok {
			ls.keys[e.Key] = struct{}{}
		}
	}
	f.mu.Lock()
	f.kv, f.leases = kv, leases
	if d.Index != f.index {
		f.index = d.Index
		close(f.changed)
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
	f.signalLeases()
	return nil
}
