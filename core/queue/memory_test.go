package queue

import (
	"runtime"
	"testing"

	"github.com/fibrilgo/fibril/core/wire"
)

// heapAfterGC returns the live heap after two collections.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Memory per queued message: a backlog costs the engine (and storage)
// no per-message memory beyond small fixed structures, independent of
// payload size — 1M queued 1 KiB messages must stay well under 100 MiB.
// Measured as the slope between two backlog sizes, so fixed costs (buffer
// pools, maps' base size) cancel out. A TTL adds one 16-byte heap entry
// (up to 32 with the slice's growth slack).
func TestMemoryPerQueuedMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~200 MiB")
	}
	payload := make([]byte, 1024)
	for _, c := range []struct {
		name  string
		ttl   bool
		limit float64
	}{{"no-ttl", false, 8}, {"ttl", true, 64}} {
		t.Run(c.name, func(t *testing.T) {
			// A small commit queue keeps storage's recycled write buffers
			// (bounded by MaxPendingBytes) from blurring the slope.
			e := newEnv(t, func(o *Options) { o.Storage.MaxPendingBytes = 256 << 10 })
			p := e.part("backlog", 0)
			publish := func(n int) {
				for range n {
					msg := &Message{Payload: payload, Received: e.nowMs()}
					if c.ttl {
						msg.TTLMillis = wire.Some[uint64](3600_000)
					}
					if err := p.Publish(msg, nil); err != nil {
						t.Fatal(err)
					}
				}
				if err := p.log.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			const n1, n2 = 20_000, 100_000
			publish(n1)
			h1 := heapAfterGC()
			publish(n2 - n1)
			h2 := heapAfterGC()
			per := (float64(h2) - float64(h1)) / float64(n2-n1)
			t.Logf("%s: %.1f bytes of heap per queued 1 KiB message (%.1f MiB per 1M)", c.name, per, per*1e6/(1<<20))
			if d := p.Depth(); d.Ready != n2 {
				t.Fatalf("depth %+v", d)
			}
			if per > c.limit {
				t.Fatalf("%.1f bytes per queued message, limit %.0f", per, c.limit)
			}
			runtime.KeepAlive(p)
		})
	}
}
