package coordtest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

func (s *suite) watchTests() []testCase {
	return []testCase{
		{"ReadAcrossMembers", s.testReadAcrossMembers},
		{"WatchAcrossMembers", s.testWatchAcrossMembers},
		{"WatchReturnsAtOnce", s.testWatchReturnsAtOnce},
		{"WatchBlocksUntilWrite", s.testWatchBlocksUntilWrite},
		{"WatchSeesDelete", s.testWatchSeesDelete},
		{"WatchContextCancel", s.testWatchContextCancel},
		{"WatchIndexMonotonic", s.testWatchIndexMonotonic},
	}
}

// Get and List are linearizable: a write that returned on one member is
// visible to the next read on any other, with no waiting.
func (s *suite) testReadAcrossMembers(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	ctx := bounded(t, waitTimeout)
	var v uint64
	for i := range 5 {
		v = mustCAS(t, a, "ct/x", strconv.Itoa(i), core.AnyVersion)
		wantKV(t, mustGet(t, b, "ct/x"), strconv.Itoa(i), v)
		kvs, idx, err := b.List(ctx, "ct/")
		if err != nil {
			t.Fatal(err)
		}
		if idx < v {
			t.Fatalf("List on member 1: index %d below the write's version %d", idx, v)
		}
		kv, ok := find(kvs, "ct/x")
		if !ok {
			t.Fatalf("List on member 1 misses a write made on member 0")
		}
		wantKV(t, kv, strconv.Itoa(i), v)
	}
	if err := a.CompareAndDelete(ctx, "ct/x", v); err != nil {
		t.Fatal(err)
	}
	wantKV(t, mustGet(t, b, "ct/x"), "", 0)
}

// Watch may read a local replica, so a write on member 0 reaches a Watch on
// member 1 eventually (not necessarily at once).
func (s *suite) testWatchAcrossMembers(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	_, idx, err := b.List(bounded(t, waitTimeout), "ct/")
	if err != nil {
		t.Fatal(err)
	}
	v := mustCAS(t, a, "ct/x", "hello", 0)
	kvs, got, err := watchUntil(bounded(t, waitTimeout), b, "ct/", idx, func(kvs []core.KV) bool {
		kv, ok := find(kvs, "ct/x")
		return ok && kv.Version >= v
	})
	if err != nil {
		t.Fatal(err)
	}
	if got < v {
		t.Fatalf("Watch index %d below the version %d it shows", got, v)
	}
	kv, _ := find(kvs, "ct/x")
	wantKV(t, kv, "hello", v)
}

// With after below the index, Watch answers without waiting for a write.
// Nothing is written while it runs, so a Watch that blocked would hit the
// context deadline.
func (s *suite) testWatchReturnsAtOnce(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	v := mustCAS(t, c, "ct/x", "a", 0)
	mustCAS(t, c, "ct/other", "b", 0)
	// The write is seen by this member's Watch eventually; once seen,
	// every Watch with after below it must answer at once.
	_, seen, err := watchUntil(bounded(t, waitTimeout), c, "ct/", 0, func(kvs []core.KV) bool {
		_, ok := find(kvs, "ct/x")
		return ok
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []uint64{0, v - 1, seen - 1} {
		kvs, idx, err := c.Watch(bounded(t, waitTimeout), "ct/x", after)
		if err != nil {
			t.Fatalf("Watch(after=%d) with index %d: %v", after, seen, err)
		}
		if idx < seen {
			t.Fatalf("Watch index went back from %d to %d", seen, idx)
		}
		if len(kvs) != 1 || kvs[0].Key != "ct/x" {
			t.Fatalf("Watch(\"ct/x\") = %v, want only ct/x", kvs)
		}
		wantKV(t, kvs[0], "a", v)
	}
}

// With after equal to the index, Watch blocks until a write, then returns
// the new state. A Watch that returns early must still report an index
// above after (writes elsewhere), never the same state at the same index.
func (s *suite) testWatchBlocksUntilWrite(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	mustCAS(t, a, "ct/seed", "x", 0)
	// Catch member 1's Watch up to the current index.
	_, idx, err := b.List(bounded(t, waitTimeout), "ct/")
	if err != nil {
		t.Fatal(err)
	}
	_, idx, err = watchUntil(bounded(t, waitTimeout), b, "ct/", idx-1, func([]core.KV) bool { return true })
	if err != nil {
		t.Fatal(err)
	}

	// Nothing written: the Watch must not answer with index <= after.
	ctx, cancel := context.WithTimeout(context.Background(), quietPeriod)
	_, got, err := b.Watch(ctx, "ct/", idx)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
	case err != nil:
		t.Fatalf("idle Watch: %v", err)
	case got <= idx:
		t.Fatalf("Watch(after=%d) returned index %d without waiting for a write", idx, got)
	}

	type result struct {
		kvs []core.KV
		idx uint64
		err error
	}
	done := make(chan result, 1)
	wctx := bounded(t, waitTimeout)
	go func() {
		kvs, i, err := watchUntil(wctx, b, "ct/", idx, func(kvs []core.KV) bool {
			_, ok := find(kvs, "ct/new")
			return ok
		})
		done <- result{kvs, i, err}
	}()
	v := mustCAS(t, a, "ct/new", "y", 0)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.idx < v {
		t.Fatalf("Watch index %d below the write's version %d", r.idx, v)
	}
	kv, _ := find(r.kvs, "ct/new")
	wantKV(t, kv, "y", v)
	if _, ok := find(r.kvs, "ct/seed"); !ok {
		t.Fatal("Watch state lacks an older key under the prefix")
	}
}

func (s *suite) testWatchSeesDelete(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	v := mustCAS(t, a, "ct/x", "a", 0)
	_, idx, err := watchUntil(bounded(t, waitTimeout), b, "ct/", 0, func(kvs []core.KV) bool {
		_, ok := find(kvs, "ct/x")
		return ok
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CompareAndDelete(bounded(t, waitTimeout), "ct/x", v); err != nil {
		t.Fatal(err)
	}
	_, _, err = watchUntil(bounded(t, waitTimeout), b, "ct/", idx, func(kvs []core.KV) bool {
		_, ok := find(kvs, "ct/x")
		return !ok
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A blocked Watch ends with the context's error, both for cancellation
// and for a deadline.
func (s *suite) testWatchContextCancel(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	mustCAS(t, c, "ct/x", "a", 0)
	_, idx, err := watchUntil(bounded(t, waitTimeout), c, "ct/", 0, func([]core.KV) bool { return true })
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		// Loop over early returns (writes elsewhere) until ctx ends.
		_, _, err := watchUntil(ctx, c, "ct/", idx, func([]core.KV) bool { return false })
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it block; correctness holds either way
	cancel()
	select {
	case err := <-errc:
		wantErr(t, "cancelled Watch", err, context.Canceled)
	case <-time.After(waitTimeout):
		t.Fatal("Watch did not return after its context was cancelled")
	}

	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err = watchUntil(ctx, c, "ct/", idx, func([]core.KV) bool { return false })
	wantErr(t, "Watch past its deadline", err, context.DeadlineExceeded)

	// An already-ended context is refused too (or answered, since the
	// answer is ready); it must not block.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, got, err := c.Watch(ctx, "ct/", idx); err == nil && got <= idx {
		t.Fatalf("Watch with a cancelled context returned index %d <= after %d", got, idx)
	} else if err != nil {
		wantErr(t, "Watch with a cancelled context", err, context.Canceled)
	}
}

// The index Watch returns never goes backwards on one Coordinator, and a
// linearizable List on it is never behind a write that returned.
func (s *suite) testWatchIndexMonotonic(t *testing.T) {
	cl := s.cluster(t, 2)
	a, b := cl.Members[0], cl.Members[1]
	ctx := bounded(t, waitTimeout)
	var lastWatch, lastList uint64
	for i := range 20 {
		v := mustCAS(t, a, "ct/k"+strconv.Itoa(i%4), strconv.Itoa(i), core.AnyVersion)
		_, idx, err := b.Watch(ctx, "ct/", 0)
		if err != nil {
			t.Fatal(err)
		}
		if idx < lastWatch {
			t.Fatalf("Watch index went back from %d to %d", lastWatch, idx)
		}
		lastWatch = idx
		_, idx, err = b.List(ctx, "ct/")
		if err != nil {
			t.Fatal(err)
		}
		if idx < v || idx < lastList {
			t.Fatalf("List index %d: below the write %d or the previous List %d", idx, v, lastList)
		}
		lastList = idx
	}
}
