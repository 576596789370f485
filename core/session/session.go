package session

import (
	"log/slog"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// maxSubID bounds the ids of subscriptions served here: ids at and above
// 2^48 belong to forwarded subscriptions, so one connection can mix both
// without collisions (core/forward/README.md#sub-ids).
const maxSubID = forward.FirstSubID

// Session is a logical client: it outlives its sockets for the reconnect
// grace (S-102) and follows the newest one (S-104).
type Session struct {
	srv     *Server
	id      wire.UUID // client_id
	token   wire.UUID // resume_token
	created time.Time
	log     *slog.Logger

	// transition serialises the operations that change the session's
	// subscriptions or its attached/dormant state and call into the engine
	// to do so. Taken before any engine lock, never while holding mu.
	transition sync.Mutex

	mu        sync.Mutex
	conn      *Conn      // the connection pushes go to; nil while dormant
	principal *Principal // carried across resumes (docs/protocol.md#resume `resumed`), except @node's
	// A node session (principal @node) remembers whom it belongs to, so
	// that a resume can demand the same proof again (Conn.proveNode):
	// origin is the node its peer certificate or its FORWARDED_SESSION
	// named ("" when neither did: inter-broker TLS off and not forwarded),
	// forwarded the FORWARDED_SESSION accepted for it (nil if none).
	origin    string
	forwarded *wire.ForwardedSession
	subs      map[subKey]*subscription
	nextSubID uint64
	pushes    []push
	spare     []push
	pushBytes int             // payload bytes of queued deliveries
	throttled []*subscription // paused because the delivery queue was full
	grace     *time.Timer
	graceGen  uint64
	dormant   bool   // socket gone, waiting out the grace
	pushedGen uint64 // topology generation last pushed or fetched at connect (S-119)
	ended     bool
	skeleton  bool // a skeleton was persisted for this session (S-106)
	// parked is the relay of the connection that dropped while the
	// session waits out its grace: its upstream sessions and forwarded
	// subscriptions, for the connection that resumes the session.
	parked *forward.Relay
	// member is the id the session joined exclusive consumer groups with,
	// once it has (S-89: one member id per connection).
	member    wire.UUID
	hasMember bool
}

// subKey is a queue subscription's identity within a session: at most one
// per (topic, partition, group) (S-44).
type subKey struct {
	topic     string
	group     wire.Option[string]
	partition uint32
}

// push is one unsolicited frame waiting for the session's connection:
// a delivery, or a notice with its body.
type push struct {
	sub      *subscription
	delivery *queue.Delivery
	op       wire.Op
	body     wire.Encoder
}

func newSession(srv *Server, id, token wire.UUID) *Session {
	return &Session{
		srv:       srv,
		id:        id,
		token:     token,
		created:   srv.opts.Now(),
		log:       srv.opts.Logger.With("client_id", id.String()),
		subs:      make(map[subKey]*subscription),
		nextSubID: 1,
	}
}

// takePushes hands the queued pushes to c if c is the connection the
// session follows. Deliveries of subscriptions closed meanwhile are
// dropped (the engine already took their messages back).
func (s *Session) takePushes(c *Conn) []push {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || len(s.pushes) == 0 {
		return nil
	}
	out := s.pushes
	s.pushes = s.spare[:0]
	s.spare = nil
	s.pushBytes = 0
	n := 0
	for _, p := range out {
		if p.sub != nil && p.sub.closed {
			continue
		}
		out[n] = p
		n++
	}
	clear(out[n:])
	return out[:n]
}

// recyclePushes returns a written batch's backing array for reuse.
func (s *Session) recyclePushes(ps []push) {
	if ps == nil {
		return
	}
	clear(ps)
	s.mu.Lock()
	if s.spare == nil && cap(ps) <= 4096 {
		s.spare = ps[:0]
	}
	s.mu.Unlock()
}

// notify queues a notice push (SUBSCRIPTION_CLOSED, GOING_AWAY, …).
func (s *Session) notify(op wire.Op, body wire.Encoder) {
	s.mu.Lock()
	s.pushes = append(s.pushes, push{op: op, body: body})
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.kick()
	}
}

// attach makes c the connection the session follows (a new session, or a
// resume). A previously attached connection is superseded: it keeps
// answering its own requests but gets no more pushes, and its end no
// longer touches the session (S-104). Called from c's reader.
func (s *Session) attach(c *Conn) {
	s.transition.Lock()
	defer s.transition.Unlock()
	s.mu.Lock()
	wasDormant := s.dormant
	s.dormant = false
	old := s.conn
	s.conn = c
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
	s.graceGen++
	streams := s.dropStreamsLocked() // a superseded connection's, when it has not detached yet
	subs := s.subList()
	parked := s.parked
	s.parked = nil
	for _, sub := range s.throttled {
		sub.throttled = false // resumed below with every subscription
	}
	s.throttled = nil
	s.mu.Unlock()
	s.seedTopology(s.srv.opts.Router)
	m := s.srv.opts.Metrics
	if old == nil {
		m.SessionsLive.Inc()
	}
	if wasDormant {
		m.SessionsDormant.Dec()
	}
	if old != nil && old != c {
		old.log.Info("connection superseded by a resume", "by_conn", c.id)
		c.relay.Adopt(old.relay) // its forwarded subscriptions go on here
	}
	if parked != nil {
		c.relay.Adopt(parked) // the dropped connection's forwarded subscriptions go on here
	}
	s.closeDropped(streams)
	for _, sub := range subs {
		sub.q.Resume()
	}
}

// dropStreamsLocked removes the session's stream subscriptions (S-83: a
// client subscribes to its streams again after a reconnect, from its
// durable cursors; keeping them would make that subscribe a duplicate)
// and returns them for closeDropped. Caller holds mu and transition.
func (s *Session) dropStreamsLocked() []*subscription {
	var out []*subscription
	for key, sub := range s.subs {
		if sub.stream {
			sub.closed = true
			delete(s.subs, key)
			out = append(out, sub)
		}
	}
	return out
}

// closeDropped ends what dropStreamsLocked removed. Caller holds
// transition, not mu.
func (s *Session) closeDropped(subs []*subscription) {
	for _, sub := range subs {
		sub.q.Close()
	}
	s.srv.opts.Metrics.SubscriptionsOpen.Sub(float64(len(subs)))
}

// detach runs when c's socket has ended. If c is still the connection the
// session follows, the session goes dormant for the reconnect grace, or
// ends at once when the grace is 0 (S-102, S-103). A superseded
// connection changes nothing. It reports whether the session keeps c's
// relay — its forwarded subscriptions — for a resume (dormant);
// otherwise the caller closes it.
func (s *Session) detach(c *Conn) (parked bool) {
	s.transition.Lock()
	s.mu.Lock()
	if s.conn != c || s.ended {
		s.mu.Unlock()
		s.transition.Unlock()
		return false
	}
	s.conn = nil
	grace := s.srv.opts.Settings().ReconnectGrace
	m := s.srv.opts.Metrics
	m.SessionsLive.Dec()
	if c.orderly.Load() && c.releaseOnClose.Load() {
		// docs/protocol.md#forwarded-session: the gateway closed its upstream in order after an
		// empty reconcile; nothing will resume this session.
		s.mu.Unlock()
		s.transition.Unlock()
		s.end("forwarded session closed in order (release_on_close)")
		return false
	}
	if grace <= 0 {
		s.mu.Unlock()
		s.transition.Unlock()
		s.end("socket closed, no reconnect grace")
		return false
	}
	s.graceGen++
	gen := s.graceGen
	s.grace = time.AfterFunc(grace, func() { s.graceExpired(gen) })
	s.dormant = true
	streams := s.dropStreamsLocked()
	subs := s.subList()
	// The connection's forwarded subscriptions wait with the session: a
	// resume hands them to the new connection (attach), the end closes
	// them.
	c.relay.Park()
	prev := s.parked
	s.parked = c.relay
	s.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
	m.SessionsDormant.Inc()
	m.GraceEntered.Inc()
	for _, sub := range subs {
		sub.q.Pause() // S-56: nothing is delivered, leases are kept
	}
	s.closeDropped(streams)
	s.transition.Unlock()
	return true
}

// stopGrace cancels a pending grace expiry (shutdown: the process is
// going away, and the skeleton carries the session across the restart).
func (s *Session) stopGrace() {
	s.mu.Lock()
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
	s.graceGen++
	s.mu.Unlock()
}

func (s *Session) graceExpired(gen uint64) {
	s.mu.Lock()
	stale := s.graceGen != gen || s.conn != nil || s.ended
	s.mu.Unlock()
	if stale {
		return
	}
	s.srv.opts.Metrics.GraceExpired.Inc()
	s.end("reconnect grace expired")
}

// end cleans the session up for good: every subscription closes (its
// unsettled deliveries return to Ready at once, S-54, S-103), the session
// is forgotten and its skeleton deleted.
func (s *Session) end(reason string) {
	s.transition.Lock()
	defer s.transition.Unlock()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	dormant, live := s.dormant, s.conn != nil
	s.dormant = false
	s.conn = nil
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
	subs := s.subList()
	for _, sub := range subs {
		sub.closed = true
	}
	clear(s.subs)
	s.pushes = nil
	hadSkeleton := s.skeleton
	parked := s.parked
	s.parked = nil
	s.mu.Unlock()
	if parked != nil {
		parked.Close() // the forwarded subscriptions end in order: their owners requeue
	}
	for _, sub := range subs {
		sub.q.Close()
	}
	m := s.srv.opts.Metrics
	m.SubscriptionsOpen.Sub(float64(len(subs)))
	if dormant {
		m.SessionsDormant.Dec()
	}
	if live {
		m.SessionsLive.Dec()
	}
	// The skeleton goes first: a resume racing this end then finds either
	// the ended session (resume_not_found) or nothing at all, never a
	// skeleton without its session (which would read as a restart).
	if hadSkeleton {
		s.srv.skeletons.delete(s.id)
	}
	s.srv.sessions.remove(s)
	s.log.Debug("session ended", "reason", reason, "subscriptions", len(subs))
}

// subList returns the session's subscriptions. Caller holds mu.
func (s *Session) subList() []*subscription {
	out := make([]*subscription, 0, len(s.subs))
	for _, sub := range s.subs {
		out = append(out, sub)
	}
	return out
}

// authenticated returns the principal carried by the session, if any.
func (s *Session) authenticated() *Principal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principal
}

func (s *Session) setPrincipal(p *Principal) {
	s.mu.Lock()
	s.principal = p
	s.mu.Unlock()
}

// needsNodeProof reports whether a resume of the session must prove @node
// again before it may act (docs/protocol.md#resume): the session holds
// @node, and with it maybe forwarded state. The resume token alone is not
// a peer's credential: it travels over every upstream connection, and
// accepting it would let whoever holds it act as any origin node and user
// without a peer certificate.
func (s *Session) needsNodeProof() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principal != nil && s.principal.Node
}

// nodeBinding returns the node the session belongs to and its accepted
// FORWARDED_SESSION (see origin and forwarded).
func (s *Session) nodeBinding() (origin string, f *wire.ForwardedSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origin, s.forwarded
}

// bindNode records the node a verified peer certificate named at an @node
// login, unless the session already belongs to one.
func (s *Session) bindNode(node string) {
	s.mu.Lock()
	if s.origin == "" {
		s.origin = node
	}
	s.mu.Unlock()
}

// setForwarded records an accepted FORWARDED_SESSION and its origin node.
func (s *Session) setForwarded(f *wire.ForwardedSession) {
	s.mu.Lock()
	s.forwarded = f
	if s.origin == "" {
		s.origin = f.OriginNodeID
	}
	s.mu.Unlock()
}
