package client

import (
	"sync"
	"sync/atomic"
)

// completer runs the callbacks of a Client's asynchronous publishes, one
// at a time and in the order their outcomes were known, on a goroutine of
// its own, so that a slow callback never stalls a connection's reader.
// The goroutine lives while some publish is outstanding and is started
// again on demand.
type completer struct {
	outstanding atomic.Int64 // accepted publishes whose callback has not run yet

	mu      sync.Mutex
	q       []completion
	spare   []completion
	running bool
	parked  bool
	kick    chan struct{} // capacity 1; one kick per park
}

type completion struct {
	f   func(uint64, error)
	off uint64
	err error
}

func newCompleter() *completer { return &completer{kick: make(chan struct{}, 1)} }

// begin counts a publish that will complete through push.
func (cp *completer) begin() { cp.outstanding.Add(1) }

// cancel uncounts a publish that will not complete (it was refused).
func (cp *completer) cancel() {
	cp.mu.Lock()
	if cp.outstanding.Add(-1) == 0 && cp.parked {
		cp.parked = false
		cp.kick <- struct{}{} // let it see that nothing is outstanding
	}
	cp.mu.Unlock()
}

// push queues one callback. It never blocks.
func (cp *completer) push(f func(uint64, error), off uint64, err error) {
	cp.mu.Lock()
	cp.q = append(cp.q, completion{f, off, err})
	switch {
	case !cp.running:
		cp.running = true
		go cp.run()
	case cp.parked:
		cp.parked = false
		cp.kick <- struct{}{}
	}
	cp.mu.Unlock()
}

func (cp *completer) run() {
	for {
		cp.mu.Lock()
		for len(cp.q) == 0 {
			if cp.outstanding.Load() == 0 {
				cp.running = false
				cp.mu.Unlock()
				return
			}
			cp.parked = true
			cp.mu.Unlock()
			<-cp.kick
			cp.mu.Lock()
		}
		q := cp.q
		cp.q, cp.spare = cp.spare[:0], nil
		cp.mu.Unlock()
		for i := range q {
			c := q[i]
			q[i] = completion{}
			c.f(c.off, c.err)
			cp.outstanding.Add(-1)
		}
		cp.mu.Lock()
		if cap(q) <= 1<<14 {
			cp.spare = q[:0]
		}
		cp.mu.Unlock()
	}
}
