package benchkit

import (
	"sync"
	"sync/atomic"
)

// padded keeps hot counters on their own cache lines.
type padded struct {
	atomic.Uint64
	_ [56]byte
}

// gate is the --max-ahead bound, and the stop signal of the producers:
// admitted counts publishes let through, and a producer waits while
// admitted − delivered ≥ max.
type gate struct {
	max       int64   // 0 = no bound
	delivered *padded // the run's count of first deliveries

	admitted padded
	stopping atomic.Bool
	mu       sync.Mutex
	cond     sync.Cond
	waiting  atomic.Int32
}

func newGate(max int64, delivered *padded) *gate {
	g := &gate{max: max, delivered: delivered}
	g.cond.L = &g.mu
	return g
}

// admit enforces --max-ahead; false once the run is stopping.
func (g *gate) admit() bool {
	limit := g.max
	if limit <= 0 {
		return !g.stopping.Load()
	}
	for {
		if g.stopping.Load() {
			return false
		}
		a := g.admitted.Load()
		if int64(a-g.delivered.Load()) < limit {
			if g.admitted.CompareAndSwap(a, a+1) {
				return true
			}
			continue
		}
		// Register as a waiter before re-checking: a consumer increments
		// delivered before it looks at waiting, so one of the two sees the
		// other (sequentially consistent atomics) and no wakeup is lost.
		g.mu.Lock()
		g.waiting.Add(1)
		for int64(g.admitted.Load()-g.delivered.Load()) >= limit && !g.stopping.Load() {
			g.cond.Wait()
		}
		g.waiting.Add(-1)
		g.mu.Unlock()
	}
}

// release gives back an admission whose publish failed.
func (g *gate) release() {
	if g.max <= 0 {
		return
	}
	g.admitted.Add(^uint64(0))
	g.wake()
}

// wake lets a waiting producer re-check; called after each delivery.
func (g *gate) wake() {
	if g.waiting.Load() > 0 {
		g.mu.Lock()
		g.cond.Signal()
		g.mu.Unlock()
	}
}

// broadcast wakes every waiter (the once-a-second safety net, and stop).
func (g *gate) broadcast() {
	g.mu.Lock()
	g.cond.Broadcast()
	g.mu.Unlock()
}

// stop makes every admit return false from now on.
func (g *gate) stop() {
	g.stopping.Store(true)
	g.broadcast()
}
