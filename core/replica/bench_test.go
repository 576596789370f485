package replica

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// BenchmarkFollowerCatchUp measures how fast an empty follower catches up
// with an owner holding 64 MiB of 1 KiB records, over a pipe, both on
// the real filesystem with fsync always (the follower fsyncs every batch
// it reports). Reported as MB/s of records applied.
//
//	go test -run '^$' -bench FollowerCatchUp -benchtime 3x ./core/replica/
func BenchmarkFollowerCatchUp(b *testing.B) {
	const records, size = 64 << 10, 1 << 10
	dir := b.TempDir()
	owner, err := storage.OpenPartition(dir+"/owner", storage.Options{Fsync: storage.FsyncNone, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer owner.Close()
	data := make([]byte, size)
	for i := range records {
		data[0] = byte(i)
		if _, err := owner.AppendAsync(data, int64(i), nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := owner.Sync(); err != nil {
		b.Fatal(err)
	}
	src := &Source{Lookup: func(_ wire.QueueKey, _ string) (Owned, error) { return Owned{Log: owner, Epoch: 1}, nil }}
	b.SetBytes(records * size)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		fdir := b.TempDir() + "/follower"
		flog, err := storage.OpenPartition(fdir, storage.Options{Fsync: storage.FsyncAlways, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		a, c := net.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		go Serve(ctx, a, src, 64<<20)
		f := &Follower{Key: wire.QueueKey{Topic: "bench"}, NodeID: "bench", Log: flog, CreditBytes: 8 << 20}
		b.StartTimer()
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx, c) }()
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Millisecond) {
			if _, next := flog.Bounds(); next == records {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("run %d: not caught up in 5 minutes", i)
			}
		}
		if err := flog.Sync(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cancel()
		<-done
		a.Close()
		c.Close()
		flog.Close()
		b.StartTimer()
	}
}
