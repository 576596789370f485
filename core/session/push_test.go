package session

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// movingRouter is a placingRouter whose generation the test moves.
type movingRouter struct {
	*placingRouter
	gen     atomic.Uint64
	mu      sync.Mutex
	changed chan struct{}
}

func (r *movingRouter) Generation() uint64 { return r.gen.Load() }

func (r *movingRouter) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func (r *movingRouter) bump() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen.Add(1)
	close(r.changed)
	r.changed = make(chan struct{})
}

// A topology change is pushed to clients and to forwarded sessions (a
// gateway's upstream speaks for a client), not to a peer's own @node
// connections: a follower holds one per followed partition and discards
// the push, so the owner would send partitions × topology per change.
func TestTopologyPushSkipsPeerConnections(t *testing.T) {
	r := &movingRouter{placingRouter: newPlacingRouter(), changed: make(chan struct{})}
	e := newEnv(t, func(o *Options) { o.Router = r })
	user := e.dial()
	user.login()
	peer := e.dial()
	peer.hello(false)
	peer.auth("@node", "s3cret")
	upstream := e.dial()
	upstream.hello(false)
	upstream.auth("@node", "s3cret")
	upstream.SendID(wire.OpForwardedSession, 3, ffs("gw", 1, true, 0))
	upstream.Expect(wire.OpForwardedSessionOK, 3)

	for _, c := range []*client{user, peer, upstream} { // any frame ends the quiet window
		id := c.Send(wire.OpPing, nil)
		c.Expect(wire.OpPong, id)
	}
	r.bump()
	user.Expect(wire.OpTopologyUpdate, 0)
	upstream.Expect(wire.OpTopologyUpdate, 0)
	time.Sleep(100 * time.Millisecond) // the push loop has passed every session
	id := peer.Send(wire.OpPing, nil)
	peer.Expect(wire.OpPong, id) // strict: a TOPOLOGY_UPDATE first fails here
}
