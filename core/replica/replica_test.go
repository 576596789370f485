package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

var key = wire.QueueKey{Topic: "orders", Partition: 3}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func open(t *testing.T, fsys *faultfs.FS, dir string) *storage.Partition {
	t.Helper()
	p, err := storage.OpenPartition(dir, storage.Options{FS: fsys, Logger: quiet(), SegmentMaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func fill(t *testing.T, p *storage.Partition, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := p.Append(bytes.Repeat([]byte{byte(i)}, 1000), int64(10_000+i)); err != nil {
			t.Fatal(err)
		}
	}
}

// pair runs an owner's Source and a follower over a pipe; it returns the
// progress the owner heard and a function that runs the follower once.
type pair struct {
	t        *testing.T
	src      *Source
	follower *Follower
	mu       sync.Mutex
	heard    [2]uint64 // last durable msgNext, eventNext reported
}

func newPair(t *testing.T, owner, follower *storage.Partition, allow func(string) error) *pair {
	pr := &pair{t: t}
	pr.src = &Source{
		Lookup: func(k wire.QueueKey, node string) (Owned, error) {
			if k.Topic != key.Topic || k.Partition != key.Partition {
				return Owned{}, fmt.Errorf("no partition %s#%d here", k.Topic, k.Partition)
			}
			if allow != nil {
				if err := allow(node); err != nil {
					return Owned{}, err
				}
			}
			return Owned{Log: owner, Epoch: 7}, nil
		},
		Progress: func(_ wire.QueueKey, _ string, m, e uint64) {
			pr.mu.Lock()
			pr.heard = [2]uint64{m, e}
			pr.mu.Unlock()
		},
		MaxBatchBytes: 16 << 10,
		Logger:        quiet(),
	}
	pr.follower = &Follower{Key: key, NodeID: "node-b", Log: follower, CreditBytes: 32 << 10, Logger: quiet()}
	return pr
}

// run starts the follower; stop ends it and returns what Run returned.
func (pr *pair) run() (stop func() error) {
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		Serve(ctx, a, pr.src, 64<<20)
	}()
	res := make(chan error, 1)
	go func() { res <- pr.follower.Run(ctx, b) }()
	return func() error {
		var err error
		select {
		case err = <-res:
		case <-time.After(50 * time.Millisecond):
			cancel()
			err = <-res
		}
		cancel()
		a.Close()
		b.Close()
		wg.Wait()
		return err
	}
}

func (pr *pair) progress() [2]uint64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.heard
}

// sameState fails unless follower holds owner's records (offsets,
// timestamps, data) and settled set.
func sameState(t *testing.T, owner, follower *storage.Partition) {
	t.Helper()
	_, next := owner.Bounds()
	for off := range next {
		a, err := owner.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		b, err := follower.Read(off)
		if err != nil {
			t.Fatalf("follower offset %d: %v", off, err)
		}
		if a.Timestamp != b.Timestamp || !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("offset %d differs", off)
		}
		if owner.IsSettled(off) != follower.IsSettled(off) {
			t.Fatalf("offset %d: settled %t on the owner, %t on the follower", off, owner.IsSettled(off), follower.IsSettled(off))
		}
	}
}

func caughtUp(owner, follower *storage.Partition) func() bool {
	return func() bool {
		_, a := owner.Bounds()
		_, b := follower.Bounds()
		if a != b {
			return false
		}
		for off := range a {
			if owner.IsSettled(off) != follower.IsSettled(off) {
				return false
			}
		}
		return true
	}
}

// A new follower takes the owner's checkpoint, pulls the records up to it,
// then streams what the owner appends and settles meanwhile, under a
// credit window much smaller than the data; the owner hears its durable
// progress.
func TestFollowerCatchesUpAndStreams(t *testing.T) {
	fsys := faultfs.New()
	owner, follower := open(t, fsys, "/owner"), open(t, fsys, "/follower")
	if err := owner.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 0, 120)
	if err := owner.BeginEpoch(4); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 120, 80)
	if err := owner.Settle(1, 5, 9); err != nil {
		t.Fatal(err)
	}
	pr := newPair(t, owner, follower, nil)
	stop := pr.run()
	testkit.Eventually(t, 10*time.Second, "the follower to catch up", caughtUp(owner, follower))
	if err := owner.BeginEpoch(6); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 200, 300)
	for off := uint64(100); off < 400; off += 3 {
		if err := owner.Settle(off); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the follower to follow the stream", caughtUp(owner, follower))
	testkit.Eventually(t, 10*time.Second, "the owner to hear durable progress to 500", func() bool {
		return pr.progress()[0] == 500
	})
	if err := stop(); !errors.Is(err, context.Canceled) && !errors.Is(err, io.ErrClosedPipe) && err != nil {
		t.Logf("follower stopped with %v", err)
	}
	sameState(t, owner, follower)
	if a, b := owner.Epochs(), follower.Epochs(); !slices.Equal(a, b) {
		t.Fatalf("epoch history: owner %v, follower %v", a, b)
	}
}

// A follower whose log is ahead of the owner's is told so, and appends
// nothing.
func TestFollowerAheadOfTheOwnerDiverged(t *testing.T) {
	fsys := faultfs.New()
	owner, follower := open(t, fsys, "/owner"), open(t, fsys, "/follower")
	fill(t, owner, 0, 10)
	fill(t, follower, 0, 12)
	stop := newPair(t, owner, follower, nil).run()
	err := stop()
	var de *DivergedError
	if !errors.Is(err, ErrDiverged) || !errors.As(err, &de) || de.OwnerNext != 10 || de.FollowerNext != 12 {
		t.Fatalf("Run: %v, want ErrDiverged at owner next 10, follower next 12", err)
	}
	if _, next := follower.Bounds(); next != 12 {
		t.Fatalf("follower next %d, want 12 untouched", next)
	}
}

// When the events a stream needs have left the owner's feed, the stream
// ends with "checkpoint required"; running the follower again takes a new
// checkpoint and ends with the owner's state.
func TestTrimmedEventsTakeANewCheckpoint(t *testing.T) {
	fsys := faultfs.New()
	owner, follower := open(t, fsys, "/owner"), open(t, fsys, "/follower")
	fill(t, owner, 0, 50)
	pr := newPair(t, owner, follower, nil)
	stop := pr.run()
	testkit.Eventually(t, 10*time.Second, "the follower to catch up", caughtUp(owner, follower))
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("follower stopped with %v", err)
	}
	owner.StopEventFeed() // its cursor is gone now
	for off := range uint64(20) {
		if err := owner.Settle(off); err != nil {
			t.Fatal(err)
		}
	}
	stop = pr.run()
	if err := stop(); !errors.Is(err, ErrCheckpointRequired) {
		t.Fatalf("Run with trimmed events: %v, want ErrCheckpointRequired", err)
	}
	stop = pr.run()
	testkit.Eventually(t, 10*time.Second, "the follower to install a new checkpoint", caughtUp(owner, follower))
	stop()
	sameState(t, owner, follower)
}

// The owner decides who may follow: a refusal reaches the follower.
func TestOwnerRefusesAStranger(t *testing.T) {
	fsys := faultfs.New()
	owner, follower := open(t, fsys, "/owner"), open(t, fsys, "/follower")
	fill(t, owner, 0, 5)
	pr := newPair(t, owner, follower, func(node string) error {
		if node != "node-c" {
			return fmt.Errorf("node %q does not follow this partition", node)
		}
		return nil
	})
	pr.follower.haveEvents = true // straight to the stream, which checks the follower
	stop := pr.run()
	err := stop()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`node "node-b" does not follow`)) {
		t.Fatalf("Run as a stranger: %v", err)
	}
	if _, next := follower.Bounds(); next != 0 {
		t.Fatalf("a stranger got %d records", next)
	}
}

// An owner that lost records in a crash and wrote past them under a new
// epoch: a follower that had them finds, from the two epoch histories,
// where the logs part, is cut back there, and then holds the owner's log.
func TestFollowerCutsWhatTheOwnerLostInACrash(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quiet(), SegmentMaxBytes: 64 << 10}
	owner, follower := open(t, fsys, "/owner"), open(t, fsys, "/follower")
	if err := owner.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 0, 100)
	stop := newPair(t, owner, follower, nil).run()
	testkit.Eventually(t, 10*time.Second, "the follower to catch up", caughtUp(owner, follower))
	stop()

	// The owner comes back without its last 10 records and writes 30 new
	// ones under epoch 2: its log passes the follower's end.
	owner.Close()
	if err := storage.TruncatePartition("/owner", 90, o); err != nil {
		t.Fatal(err)
	}
	owner = open(t, fsys, "/owner")
	if err := owner.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 1000, 30)

	pr := newPair(t, owner, follower, nil)
	err := pr.run()()
	var de *DivergedError
	if !errors.As(err, &de) || de.OwnerNext != 90 || de.FollowerNext != 100 {
		t.Fatalf("Run against the restarted owner: %v, want the logs to part at 90", err)
	}
	follower.Close()
	if err := storage.TruncatePartition("/follower", de.OwnerNext, o); err != nil {
		t.Fatal(err)
	}
	follower = open(t, fsys, "/follower")
	stop = newPair(t, owner, follower, nil).run()
	testkit.Eventually(t, 10*time.Second, "the cut follower to catch up", caughtUp(owner, follower))
	stop()
	sameState(t, owner, follower)
	if a, b := owner.Epochs(), follower.Epochs(); !slices.Equal(a, b) {
		t.Fatalf("epoch history: owner %v, follower %v", a, b)
	}
}

// A follower's reader answers the owner's PINGs and skips the
// TOPOLOGY_UPDATEs every session of the owner gets: neither ends a
// replication stream.
func TestFramesSkipPushes(t *testing.T) {
	var in bytes.Buffer
	in.Write(wire.AppendFrame(nil, wire.OpPing, 7, nil))
	in.Write(wire.AppendFrame(nil, wire.OpTopologyUpdate, 0, &wire.TopologyUpdate{}))
	in.Write(wire.AppendFrame(nil, wire.OpReplicationStreamProgress, 3, &wire.ReplicationStreamProgress{DurableMessageNext: 9}))
	var out bytes.Buffer
	fr := &frames{conn: struct {
		io.Reader
		io.Writer
	}{&in, &out}, max: 1 << 20}
	fm, err := fr.read()
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := fm.Body.(*wire.ReplicationStreamProgress); !ok || fm.RequestID != 3 || p.DurableMessageNext != 9 {
		t.Fatalf("read %v %d %+v, want the progress frame", fm.Op, fm.RequestID, fm.Body)
	}
	if want := wire.AppendFrame(nil, wire.OpPong, 7, nil); !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("wrote % x, want the PONG % x", out.Bytes(), want)
	}
}

// An owner whose retention deleted its settled head no longer holds the
// records a new follower would copy first: the follower is told it is
// behind, and once its log starts at the owner's first record it catches
// up from there (records, settlements, then the stream).
func TestFollowerBehindTheOwnersRetentionStartsPastZero(t *testing.T) {
	fsys := faultfs.New()
	owner := open(t, fsys, "/owner")
	if err := owner.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	fill(t, owner, 0, 300) // ~1 KiB each over 64 KiB segments
	for off := range uint64(200) {
		if err := owner.Settle(off); err != nil {
			t.Fatal(err)
		}
	}
	if err := owner.Settle(250); err != nil {
		t.Fatal(err)
	}
	if err := owner.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	first, _ := owner.Bounds()
	if first == 0 {
		t.Fatal("retention deleted nothing: the test needs a trimmed owner")
	}
	follower := open(t, fsys, "/follower")
	fill(t, follower, 0, 5) // an old copy that ends before the owner's first record
	err := newPair(t, owner, follower, nil).run()()
	var be *BehindError
	if !errors.As(err, &be) || be.OwnerFirst != first || be.FollowerNext != 5 {
		t.Fatalf("Run: %v, want a BehindError at owner first %d, follower next 5", err, first)
	}
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	opts := storage.Options{FS: fsys, Logger: quiet(), SegmentMaxBytes: 64 << 10}
	if err := storage.ResetPartition("/follower", be.OwnerFirst, opts); err != nil {
		t.Fatal(err)
	}
	follower, err = storage.OpenPartition("/follower", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	pr := newPair(t, owner, follower, nil)
	stop := pr.run()
	fill(t, owner, 300, 50)
	if err := owner.Settle(301); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the follower to copy from the owner's first record", func() bool {
		_, a := owner.Bounds()
		_, b := follower.Bounds()
		return a == b && follower.IsSettled(301)
	})
	stop()
	ffirst, next := follower.Bounds()
	if ffirst != first || next != 350 {
		t.Fatalf("follower bounds [%d,%d), want [%d,350)", ffirst, next, first)
	}
	for off := first; off < next; off++ {
		a, err := owner.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		b, err := follower.Read(off)
		if err != nil || a.Timestamp != b.Timestamp || !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("offset %d differs on the follower (%v)", off, err)
		}
		if owner.IsSettled(off) != follower.IsSettled(off) {
			t.Fatalf("offset %d: settled %t on the owner, %t on the follower", off, owner.IsSettled(off), follower.IsSettled(off))
		}
	}
	if h := follower.Epochs(); len(h) == 0 || h[len(h)-1].Epoch != 2 {
		t.Fatalf("follower epoch history %v, want it to end in the owner's epoch 2", h)
	}
}
