package broker

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// BenchmarkReplicaMemory measures what one replicated partition costs in
// memory: three brokers in this process, a queue of 300 written
// partitions without followers, then with two followers each, every one
// in sync; the heap and goroutines that the 600 replicas added (the
// follower's replica and stream, and the owner's side serving it), per
// replica.
//
//	go test -run '^$' -bench ReplicaMemory -benchtime 1x ./core/broker/
func BenchmarkReplicaMemory(b *testing.B) {
	const parts = 300
	bs := startMemClusterWith(b, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	setTargetFollowers(b, bs, bs[0], 0)
	c := dialClient(ctx, b, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "mem", Partitions: parts}); err != nil {
		b.Fatal(err)
	}
	pub := c.Publisher("mem", client.PublisherOptions{})
	for i := range uint32(parts) {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &i, Payload: []byte("x")}); err != nil {
			b.Fatalf("publish to partition %d: %v", i, err)
		}
	}
	inSync := func(want int) func() bool {
		return func() bool {
			q := bs[0].cluster.cl.Snapshot().Queue("mem", "")
			if q == nil || len(q.Parts) != parts {
				return false
			}
			for _, p := range q.Parts {
				if len(p.Followers) != want || len(p.InSync) != want {
					return false
				}
			}
			return true
		}
	}
	testkit.Eventually(b, time.Minute, "every partition placed without followers", inSync(0))
	heap0, stack0, g0 := settledMemory()
	setTargetFollowers(b, bs, bs[0], 2)
	testkit.Eventually(b, 3*time.Minute, "every partition with two in-sync followers", inSync(2))
	heap2, stack2, g2 := settledMemory()
	b.Logf("heap %d → %d bytes, goroutines %d → %d, for %d replicas", heap0, heap2, g0, g2, 2*parts)
	for b.Loop() {
	}
	replicas := float64(2 * parts)
	b.ReportMetric(float64(int64(heap2)-int64(heap0))/replicas, "heap-B/replica")
	b.ReportMetric(float64(int64(stack2)-int64(stack0))/replicas, "stack-B/replica")
	b.ReportMetric(float64(g2-g0)/replicas, "goroutines/replica")
}

// settledMemory is the live heap after two collections, the goroutine
// stacks and the goroutine count, once the brokers are idle.
func settledMemory() (heap, stacks uint64, goroutines int) {
	time.Sleep(2 * time.Second) // idle: streams waiting, commit loops gone
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}
