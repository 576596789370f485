package queue

import (
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core/wire"
)

// With LazyPartitions (a cluster node) a declared queue loads no partition
// until one is used (S-138: partitions owned elsewhere are never loaded);
// a used one is recovered with its data after a restart, and concurrent
// first uses open it once.
func TestLazyPartitions(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.LazyPartitions = true; o.AutoCreate = false })
	if _, err := e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "lazy"}, PartitionCount: wire.Some(uint32(4))}); err != nil {
		t.Fatal(err)
	}
	if d := e.m.Depths(); len(d) != 0 {
		t.Fatalf("declaration opened partitions: %+v", d)
	}
	var wg sync.WaitGroup
	got := make([]*Partition, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.m.Partition(Key{Topic: "lazy"}, 2)
			if err != nil {
				t.Error(err)
			}
			got[i] = p
		}()
	}
	wg.Wait()
	for _, p := range got {
		if p != got[0] {
			t.Fatal("concurrent first uses opened partition 2 more than once")
		}
	}
	e.pubN(got[0], 3, "m")
	if d := e.m.Depths(); len(d) != 1 || d[0].Partition != 2 || d[0].Depth.Ready != 3 {
		t.Fatalf("depths after use: %+v", d)
	}
	if info := e.m.Queues(); len(info) != 1 || info[0].PartitionCount != 4 {
		t.Fatalf("queue info %+v: the count must not depend on what is open", info)
	}
	if _, err := e.m.Partition(Key{Topic: "lazy"}, 4); err == nil {
		t.Fatal("partition 4 of a 4-partition queue")
	}
	e.restart()
	if d := e.m.Depths(); len(d) != 0 {
		t.Fatalf("restart opened partitions: %+v", d)
	}
	_, r := e.sub(e.part("lazy", 2), 10, true)
	if got := payloads(r.take()); len(got) != 3 {
		t.Fatalf("recovered deliveries %v, want the 3 published before the restart", got)
	}
}
