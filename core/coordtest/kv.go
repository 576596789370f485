package coordtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core"
)

func (s *suite) kvTests() []testCase {
	return []testCase{
		{"GetMissing", s.testGetMissing},
		{"CreateWithVersionZero", s.testCreate},
		{"UpdateWithVersion", s.testUpdate},
		{"AnyVersion", s.testAnyVersion},
		{"VersionsIncrease", s.testVersionsIncrease},
		{"CompareAndDelete", s.testCompareAndDelete},
		{"List", s.testList},
		{"InvalidKey", s.testInvalidKey},
		{"ValueIsCopied", s.testValueIsCopied},
		{"ConcurrentCAS", s.testConcurrentCAS},
	}
}

func (s *suite) testGetMissing(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	wantKV(t, mustGet(t, c, "ct/missing"), "", 0)
}

// Version 0 means "only when absent": the first create wins, a second one
// conflicts and leaves the key as it was.
func (s *suite) testCreate(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	v := mustCAS(t, c, "ct/k", "one", 0)
	kv := mustGet(t, c, "ct/k")
	wantKV(t, kv, "one", v)
	if kv.Lease != "" {
		t.Fatalf("CompareAndSet key bound to lease %q", kv.Lease)
	}
	_, err := c.CompareAndSet(bounded(t, waitTimeout), "ct/k", []byte("two"), 0)
	wantErr(t, "second create", err, core.ErrVersionConflict)
	wantKV(t, mustGet(t, c, "ct/k"), "one", v)
}

func (s *suite) testUpdate(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	v1 := mustCAS(t, c, "ct/k", "a", 0)
	v2 := mustCAS(t, c, "ct/k", "b", v1)
	if v2 <= v1 {
		t.Fatalf("update version %d not above %d", v2, v1)
	}
	wantKV(t, mustGet(t, c, "ct/k"), "b", v2)

	// A stale version conflicts and writes nothing.
	_, err := c.CompareAndSet(bounded(t, waitTimeout), "ct/k", []byte("c"), v1)
	wantErr(t, "update with stale version", err, core.ErrVersionConflict)
	wantKV(t, mustGet(t, c, "ct/k"), "b", v2)

	// A version expected on an absent key conflicts and creates nothing.
	_, err = c.CompareAndSet(bounded(t, waitTimeout), "ct/absent", []byte("x"), v2)
	wantErr(t, "update of absent key", err, core.ErrVersionConflict)
	wantKV(t, mustGet(t, c, "ct/absent"), "", 0)
}

func (s *suite) testAnyVersion(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	v1 := mustCAS(t, c, "ct/k", "a", core.AnyVersion)
	wantKV(t, mustGet(t, c, "ct/k"), "a", v1)
	v2 := mustCAS(t, c, "ct/k", "b", core.AnyVersion)
	if v2 <= v1 {
		t.Fatalf("version %d not above %d", v2, v1)
	}
	wantKV(t, mustGet(t, c, "ct/k"), "b", v2)
}

// Every write, to any key and from any member, gets a greater version, and
// List reports an index at least as recent as the last write.
func (s *suite) testVersionsIncrease(t *testing.T) {
	cl := s.clusterOf(t, 2, 1)
	var last uint64
	for i := range 12 {
		c := cl.Members[i%len(cl.Members)]
		key := "ct/v/" + strconv.Itoa(i%3)
		v := mustCAS(t, c, key, strconv.Itoa(i), core.AnyVersion)
		if v <= last {
			t.Fatalf("write %d got version %d, not above %d", i, v, last)
		}
		last = v
		if err := c.CompareAndDelete(bounded(t, waitTimeout), "ct/v/gone", core.AnyVersion); err != nil {
			t.Fatalf("CompareAndDelete of absent key: %v", err)
		}
	}
	_, idx, err := cl.Members[0].List(bounded(t, waitTimeout), "ct/")
	if err != nil {
		t.Fatal(err)
	}
	if idx < last {
		t.Fatalf("List index %d below last write %d", idx, last)
	}
}

func (s *suite) testCompareAndDelete(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	ctx := bounded(t, waitTimeout)

	// Absent key: 0 and AnyVersion succeed, a real version conflicts.
	for _, v := range []uint64{0, core.AnyVersion} {
		if err := c.CompareAndDelete(ctx, "ct/absent", v); err != nil {
			t.Fatalf("CompareAndDelete(absent, %d): %v", v, err)
		}
	}
	wantErr(t, "CompareAndDelete(absent, 7)", c.CompareAndDelete(ctx, "ct/absent", 7), core.ErrVersionConflict)

	// Present key: 0 and a wrong version conflict and keep it.
	v := mustCAS(t, c, "ct/k", "a", 0)
	wantErr(t, "CompareAndDelete(present, 0)", c.CompareAndDelete(ctx, "ct/k", 0), core.ErrVersionConflict)
	wantErr(t, "CompareAndDelete(present, wrong)", c.CompareAndDelete(ctx, "ct/k", v+1000), core.ErrVersionConflict)
	wantKV(t, mustGet(t, c, "ct/k"), "a", v)

	// The right version deletes; a later create starts a new version.
	if err := c.CompareAndDelete(ctx, "ct/k", v); err != nil {
		t.Fatalf("CompareAndDelete(present, right): %v", err)
	}
	wantKV(t, mustGet(t, c, "ct/k"), "", 0)
	v2 := mustCAS(t, c, "ct/k", "b", 0)
	if v2 <= v {
		t.Fatalf("recreated key version %d not above %d", v2, v)
	}
	if err := c.CompareAndDelete(ctx, "ct/k", core.AnyVersion); err != nil {
		t.Fatalf("CompareAndDelete(present, AnyVersion): %v", err)
	}
	wantKV(t, mustGet(t, c, "ct/k"), "", 0)
}

func (s *suite) testList(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	ctx := bounded(t, waitTimeout)
	// Written out of order so that sorting is the backend's doing.
	keys := []string{"ct/l/b/d", "ct/lx", "ct/l/a", "ct/m/a", "ct/l/b/c"}
	versions := map[string]uint64{}
	var last uint64
	for _, k := range keys {
		versions[k] = mustCAS(t, c, k, "v:"+k, 0)
		last = versions[k]
	}
	cases := []struct {
		prefix string
		want   []string
	}{
		{"ct/l/", []string{"ct/l/a", "ct/l/b/c", "ct/l/b/d"}},
		{"ct/l/b/", []string{"ct/l/b/c", "ct/l/b/d"}},
		{"ct/l", []string{"ct/l/a", "ct/l/b/c", "ct/l/b/d", "ct/lx"}},
		{"ct/", []string{"ct/l/a", "ct/l/b/c", "ct/l/b/d", "ct/lx", "ct/m/a"}},
		{"ct/nothing/", nil},
	}
	for _, tc := range cases {
		kvs, idx, err := c.List(ctx, tc.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		if idx < last {
			t.Fatalf("List(%q) index %d below last write %d", tc.prefix, idx, last)
		}
		if err := checkSorted(kvs, tc.prefix); err != nil {
			t.Fatal(err)
		}
		if len(kvs) != len(tc.want) {
			t.Fatalf("List(%q) = %d keys %v, want %v", tc.prefix, len(kvs), kvs, tc.want)
		}
		for i, kv := range kvs {
			if kv.Key != tc.want[i] {
				t.Fatalf("List(%q)[%d] = %q, want %q", tc.prefix, i, kv.Key, tc.want[i])
			}
			wantKV(t, kv, "v:"+kv.Key, versions[kv.Key])
		}
	}
	// "" lists everything (backends may hold keys of their own, under
	// "_"), still sorted.
	all, _, err := c.List(ctx, "")
	if err != nil {
		t.Fatalf("List(\"\"): %v", err)
	}
	if err := checkSorted(all, ""); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := find(all, k); !ok {
			t.Fatalf("List(\"\") lacks %q", k)
		}
	}
}

// Key rules of core.KV: non-empty, no leading '/'. Breaking them is the
// caller's fault, reported as core.ErrBadRequest.
func (s *suite) testInvalidKey(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	ctx := bounded(t, waitTimeout)
	for _, key := range []string{"", "/ct/k"} {
		_, err := c.Get(ctx, key)
		wantErr(t, "Get("+strconv.Quote(key)+")", err, core.ErrBadRequest)
		_, err = c.CompareAndSet(ctx, key, []byte("x"), core.AnyVersion)
		wantErr(t, "CompareAndSet("+strconv.Quote(key)+")", err, core.ErrBadRequest)
		err = c.CompareAndDelete(ctx, key, core.AnyVersion)
		wantErr(t, "CompareAndDelete("+strconv.Quote(key)+")", err, core.ErrBadRequest)
	}
}

// The store keeps its own copy: changing the caller's slices afterwards
// changes nothing.
func (s *suite) testValueIsCopied(t *testing.T) {
	c := s.cluster(t, 1).Members[0]
	buf := []byte("abc")
	v, err := c.CompareAndSet(bounded(t, waitTimeout), "ct/k", buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	kv := mustGet(t, c, "ct/k")
	wantKV(t, kv, "abc", v)
	kv.Value[1] = 'Y'
	wantKV(t, mustGet(t, c, "ct/k"), "abc", v)
}

// Counters incremented by compare-and-set retry loops from several
// members at once lose no increment: the CAS is atomic.
func (s *suite) testConcurrentCAS(t *testing.T) {
	cl := s.clusterOf(t, 2, 1)
	const workers, each = 4, 10
	ctx := bounded(t, slowTimeout)
	mustCAS(t, cl.Members[0], "ct/counter", "0", 0)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		c := cl.Members[w%len(cl.Members)]
		wg.Go(func() {
			for range each {
				if err := increment(ctx, c, "ct/counter"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if kv := mustGet(t, cl.Members[0], "ct/counter"); string(kv.Value) != strconv.Itoa(workers*each) {
		t.Fatalf("counter = %q after %d increments", kv.Value, workers*each)
	}
}

func increment(ctx context.Context, c core.Coordinator, key string) error {
	for {
		kv, err := c.Get(ctx, key)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(string(kv.Value))
		if err != nil {
			return err
		}
		_, err = c.CompareAndSet(ctx, key, []byte(strconv.Itoa(n+1)), kv.Version)
		if err == nil {
			return nil
		}
		if !errors.Is(err, core.ErrVersionConflict) {
			return err
		}
	}
}
