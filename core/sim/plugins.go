package sim

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/plugins"
)

// The brokers of a simulation choose transport.backend = sim and
// coordination.backend = sim, registered here: both find their world (the
// Net and the coordination Store of one cluster) by the domain in the
// broker's addresses.
func init() {
	plugins.RegisterTransport("sim", openTransport)
	plugins.RegisterCoordination("sim", openCoordinator)
}

// world is what the brokers of one simulated cluster share.
type world struct {
	net   *Net
	store *memcoord.Store
}

var worlds = struct {
	sync.Mutex
	m map[string]*world // by domain
}{m: map[string]*world{}}

func addWorld(domain string, w *world) {
	worlds.Lock()
	defer worlds.Unlock()
	worlds.m[domain] = w
}

func removeWorld(domain string) {
	worlds.Lock()
	defer worlds.Unlock()
	delete(worlds.m, domain)
}

// worldOf finds the world of a host or host:port of a simulated net.
func worldOf(addr string) (*world, error) {
	host := hostOf(addr)
	worlds.Lock()
	defer worlds.Unlock()
	for d, w := range worlds.m {
		if strings.HasSuffix(host, "."+d) {
			return w, nil
		}
	}
	return nil, fmt.Errorf("sim: %q is not a host of a running simulation", addr)
}

// coordKey carries the domain to the coordination backend, which sees only
// its coordination.* keys: coordination.raft.peers = "sim=<any host of the
// domain>:1" (the raft keys are validated but unused with another backend).
const coordKey = "coordination.raft.peers"

func openCoordinator(_ context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
	_, addr, ok := strings.Cut(env.Config[coordKey], "=")
	if !ok {
		return nil, fmt.Errorf("sim: %s = %q names no simulated host", coordKey, env.Config[coordKey])
	}
	w, err := worldOf(addr)
	if err != nil {
		return nil, err
	}
	return w.store.Member(string(env.NodeID)), nil
}

func openTransport(_ context.Context, env plugins.TransportEnv) (core.Transport, error) {
	if env.Bind == "" {
		return nil, fmt.Errorf("sim: the sim transport needs broker.peer_listener.bind")
	}
	w, err := worldOf(env.Bind)
	if err != nil {
		return nil, err
	}
	l, err := w.net.Listen("tcp", env.Bind)
	if err != nil {
		return nil, err
	}
	return &transport{net: w.net, self: hostOf(env.Bind), l: l.(*listener)}, nil
}

// transport is core.Transport over a Net: a stream is one connection.
type transport struct {
	net  *Net
	self string
	l    *listener
}

func (t *transport) Accept(ctx context.Context) (core.Stream, error) {
	select {
	case c := <-t.l.backlog:
		return c, nil
	case <-t.l.done:
		return nil, fmt.Errorf("sim transport: %w", core.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *transport) Dial(_ context.Context, p core.Peer) (core.Link, error) {
	return &link{t: t, peer: p}, nil
}

func (t *transport) Addr() net.Addr { return t.l.Addr() }

func (t *transport) Close() error { return t.l.Close() }

type link struct {
	t    *transport
	peer core.Peer

	mu      sync.Mutex
	streams map[*Conn]struct{}
	closed  bool
}

func (l *link) OpenStream(ctx context.Context) (core.Stream, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, core.DefaultConnectTimeout)
		defer cancel()
	}
	c, err := l.t.net.Dial(ctx, l.t.self, l.peer.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", core.ErrPeerRefused, l.peer.ID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Abort()
		return nil, fmt.Errorf("%w: %s: link closed", core.ErrPeerRefused, l.peer.ID)
	}
	if l.streams == nil {
		l.streams = map[*Conn]struct{}{}
	}
	// Forget streams that ended by themselves.
	for s := range l.streams {
		if s.ended() {
			delete(l.streams, s)
		}
	}
	l.streams[c] = struct{}{}
	return c, nil
}

func (l *link) Peer() core.Peer { return l.peer }

// Close aborts every stream opened on the link.
func (l *link) Close() error {
	l.mu.Lock()
	l.closed = true
	ss := l.streams
	l.streams = nil
	l.mu.Unlock()
	for s := range ss {
		_ = s.Abort()
	}
	return nil
}

// newStore is the coordination store of one simulated cluster: short
// lease floors so that a crashed broker's leases end at its liveness TTL.
func newStore() *memcoord.Store {
	return memcoord.NewStore(memcoord.Options{MinTTL: 100 * time.Millisecond, ElectionTTL: time.Second})
}
