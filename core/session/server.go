package session

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/wire"
)

// Server serves client connections and holds the logical sessions.
type Server struct {
	opts      Options
	sessions  registry
	skeletons *skeletonStore
	cohorts   cohorts // exclusive consumer groups (cohort.go)

	stopPush chan struct{}

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	closing  bool
	connWG   sync.WaitGroup
	nextConn atomic.Uint64

	gw            *forward.Gateway // the relay's server-wide side: upstream sessions of every connection
	forwardedOpen atomic.Int64     // connections with an accepted FORWARDED_SESSION
}

// New creates a server. Skeletons older than the restart TTL are removed
// from Options.SkeletonDir.
func New(opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, conns: make(map[*Conn]struct{})}
	s.gw = forward.NewGateway(opts.Upstreams, func() forward.Limits { return opts.Settings().Forwarding }, opts.Metrics.Forward)
	s.sessions.byID = make(map[wire.UUID]*Session)
	s.skeletons, err = openSkeletons(opts.SkeletonDir, opts.OwnerID, opts.Now, opts.Settings().RestartTTL)
	if err != nil {
		return nil, err
	}
	s.stopPush = make(chan struct{})
	if opts.Router != nil {
		go s.pushTopology(s.stopPush)
		s.cohorts.clustered = true
	}
	return s, nil
}

// Serve accepts connections from l until l is closed or Shutdown runs.
// Listeners that need per-connection preparation (TLS sniffing) hand ready
// connections to ServeConn instead.
func (s *Server) Serve(l net.Listener) error {
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosing() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		go s.ServeConn(nc)
	}
}

// ServeConn serves one accepted connection until it ends.
func (s *Server) ServeConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := newConn(s, nc, s.nextConn.Add(1))
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	s.opts.Metrics.ConnectionsTotal.Inc()
	s.opts.Metrics.ConnectionsOpen.Inc()
	c.serve()
}

// forget drops a finished connection.
func (s *Server) forget(c *Conn) {
	s.mu.Lock()
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		s.connWG.Done()
		s.opts.Metrics.ConnectionsOpen.Dec()
	}
	s.mu.Unlock()
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Shutdown ends every connection gracefully: each live session gets
// GOING_AWAY (docs/protocol.md#going-away), readers stop taking new requests, confirms
// already in flight are answered, and sockets close once their writers
// have flushed (or ctx ends). Sessions are not ended: their skeletons are
// refreshed so clients can resume after the restart (S-107).
func (s *Server) Shutdown(ctx context.Context, grace time.Duration, message string) {
	s.mu.Lock()
	if !s.closing {
		close(s.stopPush)
	}
	s.closing = true
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	for _, sess := range s.sessions.all() {
		sess.notify(wire.OpGoingAway, &wire.GoingAway{GraceMillis: uint64(grace / time.Millisecond), Message: message})
	}
	for _, c := range conns {
		c.stopForShutdown()
	}
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		for _, c := range conns {
			c.close()
		}
		<-done
	}
	for _, sess := range s.sessions.all() {
		sess.stopGrace()
		sess.saveSkeleton()
	}
}

// registry holds the sessions by client id.
type registry struct {
	mu   sync.Mutex
	byID map[wire.UUID]*Session
}

func (r *registry) add(s *Session) {
	r.mu.Lock()
	r.byID[s.id] = s
	r.mu.Unlock()
}

func (r *registry) get(id wire.UUID) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

func (r *registry) remove(s *Session) {
	r.mu.Lock()
	if r.byID[s.id] == s {
		delete(r.byID, s.id)
	}
	r.mu.Unlock()
}

func (r *registry) all() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Session, 0, len(r.byID))
	for _, s := range r.byID {
		out = append(out, s)
	}
	return out
}

// AdoptionLevel is the node's topology adoption level (S-120): the lowest
// generation acknowledged by the open connections that acknowledged at
// least once. ok is false when none has.
func (s *Server) AdoptionLevel() (level uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if g := c.topoAck.Load(); g > 0 && (!ok || g < level) {
			level, ok = g, true
		}
	}
	return level, ok
}

// Stats is a point-in-time view for the admin listener.
type Stats struct {
	Connections, Sessions int
}

// Stats reports open connections and known sessions.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	s.sessions.mu.Lock()
	m := len(s.sessions.byID)
	s.sessions.mu.Unlock()
	return Stats{Connections: n, Sessions: m}
}

// GoingAway sends GOING_AWAY to every session that has a socket (S-127;
// dormant ones are skipped) and returns how many it notified.
func (s *Server) GoingAway(grace time.Duration, message string) int {
	n := 0
	for _, sess := range s.sessions.all() {
		sess.mu.Lock()
		connected := sess.conn != nil && !sess.dormant
		sess.mu.Unlock()
		if connected {
			sess.notify(wire.OpGoingAway, &wire.GoingAway{GraceMillis: uint64(grace / time.Millisecond), Message: message})
			n++
		}
	}
	return n
}

// Gateway is the server-wide side of the relay (core/forward): its limit
// accounting and metrics.
func (s *Server) Gateway() *forward.Gateway { return s.gw }

// ForwardingCounts is what the node publishes in its labels (core/forward/README.md#observability):
// upstream sessions open as a gateway, forwarded sessions served as an
// owner.
func (s *Server) ForwardingCounts() (upstreams, forwarded int) {
	return s.gw.Open(), int(s.forwardedOpen.Load())
}
