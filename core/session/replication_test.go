package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/replica"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// A follower logged in as @node replicates a partition through the
// session server: checkpoint export and pull reads answered by the
// reader, the stream's batches pushed, its progress heard by the owner.
// A user connection gets 403 for the same ops.
func TestReplicationOverASession(t *testing.T) {
	dir := t.TempDir()
	owner, err := storage.OpenPartition(dir+"/owner", storage.Options{Fsync: storage.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	follower, err := storage.OpenPartition(dir+"/follower", storage.Options{Fsync: storage.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	for i := range 300 {
		if _, err := owner.Append(bytes.Repeat([]byte{byte(i)}, 700), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	heard := make(chan uint64, 1024)
	src := &replica.Source{
		Lookup: func(k wire.QueueKey, node string) (replica.Owned, error) {
			if k.Topic != "orders" {
				return replica.Owned{}, fmt.Errorf("no partition %s here", k.Topic)
			}
			return replica.Owned{Log: owner, Epoch: 3}, nil
		},
		Progress: func(_ wire.QueueKey, _ string, m, _ uint64) {
			select {
			case heard <- m:
			default:
			}
		},
	}
	e := newEnv(t, func(o *Options) { o.Replication = src })

	u := e.dial()
	u.login()
	u.SendID(wire.OpReplicationCheckpointExport, 5, &wire.ReplicationCheckpointExport{Key: wire.QueueKey{Topic: "orders"}})
	u.ExpectError(wire.OpError, 5, wire.CodeForbidden)

	n := e.dial()
	n.hello(false)
	n.auth("@node", "s3cret")
	f := &replica.Follower{Key: wire.QueueKey{Topic: "orders"}, NodeID: "node-b", Log: follower, CreditBytes: 16 << 10}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- f.Run(ctx, n.Conn()) }()
	for i := 300; i < 400; i++ { // while it runs
		if _, err := owner.Append(bytes.Repeat([]byte{byte(i)}, 700), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := owner.Settle(4, 250, 399); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the follower to hold the owner's 400 records and settlements", func() bool {
		_, next := follower.Bounds()
		return next == 400 && follower.IsSettled(4) && follower.IsSettled(250) && follower.IsSettled(399)
	})
	testkit.Eventually(t, 10*time.Second, "the owner to hear progress to 400", func() bool {
		for {
			select {
			case m := <-heard:
				if m == 400 {
					return true
				}
			default:
				return false
			}
		}
	})
	cancel()
	if err := <-res; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("follower ended with %v", err)
	}
	// STREAM_REPLICATION_READ (op 99) is the same pull read, answered
	// with op 100.
	n2 := e.dial()
	n2.hello(false)
	n2.auth("@node", "s3cret")
	id := n2.Send(wire.OpStreamReplicationRead, &wire.StreamReplicationRead{ReadRequest: wire.ReadRequest{
		Key: wire.QueueKey{Topic: "orders"}, MessageFrom: 398, MaxMessages: 10, MaxBytes: 1 << 20}})
	ok := n2.Expect(wire.OpStreamReplicationReadOK, id).(*wire.StreamReplicationReadOK)
	if m := ok.Messages; m.Kind != wire.ReadBatch || len(m.Batch.Records) != 2 {
		t.Fatalf("op 99 read from 398: %+v, want the 2 last records", m)
	}
	for _, off := range []uint64{0, 150, 399} {
		a, _ := owner.Read(off)
		b, err := follower.Read(off)
		if err != nil || !bytes.Equal(a.Data, b.Data) || a.Timestamp != b.Timestamp {
			t.Fatalf("offset %d differs on the follower: %v", off, err)
		}
	}
}
