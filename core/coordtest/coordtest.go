// Package coordtest is the conformance suite for core.Coordinator backends.
//
// Every backend (memcoord, the embedded raft backend, the gRPC plugin
// adapter, third-party plugins) runs the same suite so that core/cluster can
// rely on one behaviour whatever store sits underneath. A backend's test
// calls Run with a function that starts a fresh cluster of n members:
//
//	func TestConformance(t *testing.T) {
//		coordtest.Run(t, func(t *testing.T, n int) *coordtest.Cluster {
//			... start n members, t.Cleanup(stop) ...
//			return &coordtest.Cluster{Members: members, Stop: crash}
//		})
//	}
//
// The suite asserts the contract written in core/coordinator.go, nothing
// more: it never asserts speed (a slow backend passes), only bounded waits
// so that a broken backend fails instead of hanging.
package coordtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// Cluster is a running set of members of one coordination cluster.
type Cluster struct {
	Members []core.Coordinator
	// Stop (optional) takes member i down abruptly, as a crash would; nil =
	// not supported (tests that need it are skipped).
	Stop func(i int)
}

// Run runs every conformance test against clusters made by newCluster (n
// members, n >= 1; backends may return fewer members, and the tests that
// need more are then skipped). Tests ask for at most 3 members; those that
// close or stop a member ask for 3, so that a quorum backend keeps a
// majority among the others.
//
// newCluster registers its own cleanup with t.Cleanup (closing a member
// twice must be harmless: some tests close members themselves). Each
// subtest starts its own cluster, so tests do not see each other's keys;
// they use keys under "ct/" and elections named "ct-*".
func Run(t *testing.T, newCluster func(t *testing.T, n int) *Cluster) {
	t.Helper()
	s := &suite{newCluster: newCluster}
	for _, tc := range s.tests() {
		t.Run(tc.name, func(t *testing.T) { tc.run(t) })
	}
}

// suite holds the backend factory the tests share.
type suite struct {
	newCluster func(t *testing.T, n int) *Cluster
}

type testCase struct {
	name string
	run  func(t *testing.T)
}

// tests lists every conformance test in the order they run; the bodies live
// in kv.go, watch.go, lease.go, election.go and lifecycle.go.
func (s *suite) tests() []testCase {
	var all []testCase
	all = append(all, s.kvTests()...)
	all = append(all, s.watchTests()...)
	all = append(all, s.leaseTests()...)
	all = append(all, s.electionTests()...)
	all = append(all, s.lifecycleTests()...)
	return all
}

// Bounds of every wait in the suite. They are deadlines for a broken
// backend, not speed requirements: a correct backend answers far sooner.
const (
	// waitTimeout bounds an operation that needs no lease to expire.
	waitTimeout = 20 * time.Second
	// slowTimeout bounds waits that include a lease or election expiry
	// on top of the TTL (Consul may take up to twice a session's TTL).
	slowTimeout = 60 * time.Second
	// quietPeriod is how long a test watches for something that must not
	// happen (a second leader, a Watch returning without a change). Only
	// correctness is asserted: a slow backend passes.
	quietPeriod = 300 * time.Millisecond
)

// cluster starts a cluster of n members, skipping the test when the
// backend gives fewer.
func (s *suite) cluster(t *testing.T, n int) *Cluster {
	t.Helper()
	return s.clusterOf(t, n, n)
}

// clusterOf asks for want members and skips the test when the backend
// gives fewer than need (tests that merely spread load over members run
// on whatever the backend supports).
func (s *suite) clusterOf(t *testing.T, want, need int) *Cluster {
	t.Helper()
	c := s.newCluster(t, want)
	if c == nil || len(c.Members) < need {
		t.Skipf("backend does not run a cluster of %d members", need)
	}
	return c
}

// testTTL is the lease TTL the suite uses: small, but never below the
// backend's floor.
func testTTL(c core.Coordinator) time.Duration {
	return max(c.MinTTL(), 100*time.Millisecond)
}

// bounded returns a context that ends after d or with the test.
func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// find returns the entry for key in a List/Watch answer.
func find(kvs []core.KV, key string) (core.KV, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv, true
		}
	}
	return core.KV{}, false
}

// watchUntil loops Watch (after = the index last returned) until cond
// holds for the state, checking on the way that every answer has an index
// above after. It returns an error rather than failing the test so that it
// can run on another goroutine.
func watchUntil(ctx context.Context, c core.Coordinator, prefix string, after uint64, cond func([]core.KV) bool) ([]core.KV, uint64, error) {
	for {
		kvs, idx, err := c.Watch(ctx, prefix, after)
		if errors.Is(err, core.ErrCoordinationUnavailable) && ctx.Err() == nil {
			// The contract lets a watch give up while the backend cannot
			// reach its store (a remote agent's hiccup under load); the
			// caller watches again, as the cluster view does.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("Watch(%q, %d): %w", prefix, after, err)
		}
		if idx <= after {
			return nil, 0, fmt.Errorf("Watch(%q, %d) returned index %d, not above after", prefix, after, idx)
		}
		if err := checkSorted(kvs, prefix); err != nil {
			return nil, 0, err
		}
		if cond(kvs) {
			return kvs, idx, nil
		}
		after = idx
	}
}

// checkSorted verifies a List/Watch answer: keys under prefix, strictly
// ascending.
func checkSorted(kvs []core.KV, prefix string) error {
	for i, kv := range kvs {
		if len(kv.Key) < len(prefix) || kv.Key[:len(prefix)] != prefix {
			return fmt.Errorf("answer for prefix %q holds key %q", prefix, kv.Key)
		}
		if kv.Version == 0 {
			return fmt.Errorf("answer holds key %q with version 0", kv.Key)
		}
		if i > 0 && kvs[i-1].Key >= kv.Key {
			return fmt.Errorf("answer not sorted: %q before %q", kvs[i-1].Key, kv.Key)
		}
	}
	return nil
}

func mustCAS(t *testing.T, c core.Coordinator, key, value string, version uint64) uint64 {
	t.Helper()
	v, err := c.CompareAndSet(bounded(t, waitTimeout), key, []byte(value), version)
	if err != nil {
		t.Fatalf("CompareAndSet(%q, %q, %d): %v", key, value, version, err)
	}
	if v == 0 {
		t.Fatalf("CompareAndSet(%q) returned version 0", key)
	}
	return v
}

func mustGet(t *testing.T, c core.Coordinator, key string) core.KV {
	t.Helper()
	kv, err := c.Get(bounded(t, waitTimeout), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if kv.Key != key {
		t.Fatalf("Get(%q) returned key %q", key, kv.Key)
	}
	return kv
}

// wantKV checks a key's value and version (version 0: absent).
func wantKV(t *testing.T, kv core.KV, value string, version uint64) {
	t.Helper()
	if kv.Version != version {
		t.Fatalf("key %q: version %d, want %d", kv.Key, kv.Version, version)
	}
	if version == 0 {
		if len(kv.Value) != 0 || kv.Lease != "" {
			t.Fatalf("absent key %q has value %q lease %q", kv.Key, kv.Value, kv.Lease)
		}
		return
	}
	if !bytes.Equal(kv.Value, []byte(value)) {
		t.Fatalf("key %q: value %q, want %q", kv.Key, kv.Value, value)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}
