package queue

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/wire"
)

var jobs = Key{Topic: "jobs"}

func (e *env) declare(key Key, count uint32) {
	e.t.Helper()
	if _, err := e.m.DeclareQueue(QueueSpec{Key: key, PartitionCount: wire.Some(count)}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) partOf(key Key, n uint32) *Partition {
	e.t.Helper()
	p, err := e.m.Partition(key, n)
	if err != nil {
		e.t.Fatalf("Partition(%s, %d): %v", key, n, err)
	}
	return p
}

func wantInfo(t *testing.T, info QueueInfo, err error, count uint32, version uint64) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if info.PartitionCount != count || info.PartitioningVersion != version {
		t.Fatalf("queue %s: %d partitions at version %d, want %d at version %d", info.Key, info.PartitionCount, info.PartitioningVersion, count, version)
	}
}

// GrowQueue adds partitions (a multiple of the current count only),
// keeps what the old ones hold and serves the new ones at once; a restart
// opens the queue with the new count and version.
func TestGrowQueue(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 2)
	e.pub(e.partOf(jobs, 0), "p0")
	e.pub(e.partOf(jobs, 1), "p1")

	for _, bad := range []uint32{0, 1, 3, 5} {
		_, err := e.m.GrowQueue(jobs, bad, 1)
		wantCode(t, err, core.ErrBadRequest)
	}
	_, err := e.m.GrowQueue(Key{Topic: "nothing"}, 4, 1)
	wantCode(t, err, core.ErrNotFound)

	info, err := e.m.GrowQueue(jobs, 4, 1)
	wantInfo(t, info, err, 4, 1)
	if got, _ := e.m.QueueInfo(jobs); got.PartitionCount != 4 {
		t.Fatalf("QueueInfo says %d partitions", got.PartitionCount)
	}
	for n := range uint32(4) {
		e.pub(e.partOf(jobs, n), fmt.Sprintf("new%d", n), func(m *Message) { m.PartitioningVersion = 1 })
	}
	_, err = e.m.Partition(jobs, 4)
	wantCode(t, err, core.ErrNotFound)

	e.restart()
	info, _ = e.m.QueueInfo(jobs)
	wantInfo(t, info, nil, 4, 1)
	got := drain(t, e.m, jobs)
	for _, pl := range []string{"p0", "p1", "new0", "new1", "new2", "new3"} {
		if got[pl] != 1 {
			t.Fatalf("after the restart: %v", got)
		}
	}

	// The same count changes the version only.
	info, err = e.m.GrowQueue(jobs, 4, 2)
	wantInfo(t, info, err, 4, 2)
}

// ShrinkQueue retires the partitions at and past the new count: their
// *Partition answers ErrNotFound, their files go, and a later grow starts
// them empty. The survivors keep their messages across a restart.
func TestShrinkQueue(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 4)
	for n := range uint32(4) {
		e.pub(e.partOf(jobs, n), fmt.Sprintf("p%d", n))
	}
	retired := e.partOf(jobs, 3)
	s, r := e.sub(retired, 10, false)
	wantPayloads(t, r.take(), "p3")

	for _, bad := range []uint32{0, 3, 8} {
		_, err := e.m.ShrinkQueue(jobs, bad, 1)
		wantCode(t, err, core.ErrBadRequest)
	}
	info, err := e.m.ShrinkQueue(jobs, 2, 1)
	wantInfo(t, info, err, 2, 1)

	err = retired.Publish(&Message{Payload: []byte("x"), Received: e.nowMs()}, nil)
	wantCode(t, err, core.ErrNotFound)
	_, err = retired.Subscribe(&recorder{}, SubscribeOptions{})
	wantCode(t, err, core.ErrNotFound)
	s.Ack(1) // an ack on a retired partition's subscription is ignored
	s.Close()
	_, err = e.m.Partition(jobs, 2)
	wantCode(t, err, core.ErrNotFound)
	for n := 2; n < 4; n++ {
		if _, err := os.Stat(partitionDir(e.opts.Dir, jobs, uint32(n))); !os.IsNotExist(err) {
			t.Fatalf("partition %d's files remain: %v", n, err)
		}
	}

	e.restart()
	info, _ = e.m.QueueInfo(jobs)
	wantInfo(t, info, nil, 2, 1)
	info, err = e.m.GrowQueue(jobs, 4, 2)
	wantInfo(t, info, err, 4, 2)
	got := drain(t, e.m, jobs)
	if len(got) != 2 || got["p0"] != 1 || got["p1"] != 1 {
		t.Fatalf("after shrink, restart and grow: %v", got)
	}
}

// A partition to retire that is open as a follower's replica is not
// removed under it: ShrinkQueue refuses until the replica is closed.
func TestShrinkRefusesOpenReplica(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.LazyPartitions = true; o.AutoCreate = false })
	e.declare(jobs, 2)
	if _, err := e.m.OpenReplica(jobs, 1); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.ShrinkQueue(jobs, 1, 1)
	wantCode(t, err, core.ErrConflict)
	if err := e.m.CloseReplica(jobs, 1); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.ShrinkQueue(jobs, 1, 1)
	wantInfo(t, info, err, 1, 1)
}

// ApplyQueue refuses a count the engine does not have (only GrowQueue and
// ShrinkQueue change it), follows one they made, and keeps the
// partitioning version it is given, across a restart.
func TestApplyQueueCountAndVersion(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 2)
	info, _ := e.m.QueueInfo(jobs)
	info.PartitionCount = 4
	_, err := e.m.ApplyQueue(info)
	wantCode(t, err, core.ErrConflict)

	if _, err := e.m.GrowQueue(jobs, 4, 1); err != nil {
		t.Fatal(err)
	}
	info.PartitioningVersion = 3
	got, err := e.m.ApplyQueue(info)
	wantInfo(t, got, err, 4, 3)
	if v := e.partOf(jobs, 3).PartitioningVersion(); v != 3 {
		t.Fatalf("the publish fence reads version %d", v)
	}
	e.restart()
	got, _ = e.m.QueueInfo(jobs)
	wantInfo(t, got, nil, 4, 3)
	// A redeclare (no explicit count) keeps both.
	got, err = e.m.DeclareQueue(QueueSpec{Key: jobs, MaxRetries: wire.Some[uint32](2)})
	wantInfo(t, got, err, 4, 3)
}

// Readers of a queue's partition list run while it grows and shrinks
// (go test -race).
func TestRepartitionConcurrentReaders(t *testing.T) {
	e := newEnv(t)
	e.declare(jobs, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if p, err := e.m.Partition(jobs, uint32((g+i)%8)); err == nil {
					p.Publish(&Message{Payload: []byte("x")}, nil) // may be retired meanwhile
					p.Depth()
				}
				e.m.QueueInfo(jobs)
				e.m.Depths()
				e.m.LocalStats("jobs")
			}
		}()
	}
	version := uint64(0)
	for _, c := range []uint32{2, 4, 8} {
		version++
		if _, err := e.m.GrowQueue(jobs, c, version); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []uint32{4, 2, 1} {
		version++
		if _, err := e.m.ShrinkQueue(jobs, c, version); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	info, _ := e.m.QueueInfo(jobs)
	wantInfo(t, info, nil, 1, version)
}

// A power loss at any point of a grow or a shrink leaves a queue that
// opens with the old count or the new one (the new one when the call
// returned success), keeps every confirmed message of the partitions that
// remain, serves every partition, and never lets a partition inherit the
// files of one a shrink retired.
func TestRepartitionPowerLoss(t *testing.T) {
	type step struct {
		name     string
		from, to uint32
		op       func(m *Manager) error
	}
	steps := []step{
		{"grow", 2, 4, func(m *Manager) error { _, err := m.GrowQueue(jobs, 4, 1); return err }},
		{"shrink", 4, 2, func(m *Manager) error { _, err := m.ShrinkQueue(jobs, 2, 1); return err }},
	}
	for _, st := range steps {
		for k := 1; ; k++ {
			if k > 200 {
				t.Fatalf("%s: still failing after %d syncs", st.name, k)
			}
			rng := rand.New(rand.NewPCG(uint64(k), 9))
			fs := faultfs.New()
			opts := crashOptions(fs)
			opts.AutoCreate = true
			m, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.DeclareQueue(QueueSpec{Key: jobs, PartitionCount: wire.Some(st.from)}); err != nil {
				t.Fatal(err)
			}
			confirmed := publishConfirmed(t, m, st.from)
			fs.FailSyncAt(k, true) // the power goes at the k-th fsync from here
			opErr := st.op(m)
			crashed := fs.Crash(rng)
			m.Close() // errors expected: the old filesystem is gone

			m2, err := Open(crashOptions(crashed))
			if err != nil {
				t.Fatalf("%s, crash at sync %d: reopen: %v", st.name, k, err)
			}
			info, _ := m2.QueueInfo(jobs)
			if c := info.PartitionCount; c != st.to && (c != st.from || opErr == nil) {
				t.Fatalf("%s, crash at sync %d (op: %v): %d partitions", st.name, k, opErr, c)
			}
			got := drain(t, m2, jobs)
			for pl, n := range confirmed {
				if n < min(info.PartitionCount, st.from) && got[pl] != 1 {
					t.Fatalf("%s, crash at sync %d: confirmed %s of partition %d lost (%v)", st.name, k, pl, n, got)
				}
				if n >= info.PartitionCount && got[pl] != 0 {
					t.Fatalf("%s, crash at sync %d: %s of retired partition %d served", st.name, k, pl, n)
				}
			}
			// Every partition serves; a later repartition completes and no
			// partition inherits a retired one's messages.
			if info.PartitionCount != st.to {
				if err := st.op(m2); err != nil {
					t.Fatalf("%s, crash at sync %d: the repartition again: %v", st.name, k, err)
				}
			}
			if _, err := m2.GrowQueue(jobs, 4, 2); err != nil {
				t.Fatal(err)
			}
			got = drain(t, m2, jobs)
			if len(got) != 0 {
				t.Fatalf("%s, crash at sync %d: messages after the repartitions: %v", st.name, k, got)
			}
			for n := range uint32(4) {
				p, err := m2.Partition(jobs, n)
				if err == nil {
					err = p.Publish(&Message{Payload: []byte("after"), PartitioningVersion: 2}, nil)
				}
				if err != nil {
					t.Fatalf("%s, crash at sync %d: partition %d: %v", st.name, k, n, err)
				}
			}
			m2.Close()
			if opErr == nil {
				break // the op completed before the k-th sync: every crash point was tried
			}
		}
	}
}

// publishConfirmed publishes three messages to each of count partitions
// and waits for their confirms; it returns payload → partition.
func publishConfirmed(t *testing.T, m *Manager, count uint32) map[string]uint32 {
	t.Helper()
	out := map[string]uint32{}
	var wg sync.WaitGroup
	for n := range count {
		p, err := m.Partition(jobs, n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			pl := fmt.Sprintf("p%d-%d", n, i)
			out[pl] = n
			wg.Add(1)
			if err := p.Publish(&Message{Payload: []byte(pl)}, func(_ uint64, err error) {
				if err != nil {
					t.Errorf("confirm %s: %v", pl, err)
				}
				wg.Done()
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	return out
}
