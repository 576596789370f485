package forward

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/lograte"
	"github.com/fibrilgo/fibril/core/wire"
)

// The gateway side of forwarding (core/forward/README.md#upstream-sessions, docs/protocol.md#extensions): a public
// broker serves a partition owned by a private broker (or by a broker
// behind its own shared address) by relaying the client's operations over
// an upstream session — one per (client connection, owner node) — opened
// on first use over the inter-broker transport, authenticated as @node and
// marked with FORWARDED_SESSION. A forwarded confirm is the owner's: the
// gateway never stores, confirms or counts a forwarded message itself.
//
// Frames keep their bodies: PUBLISH, PUBLISH_DELAYED, ACK and NACK go up
// unchanged; PUBLISH_OK and ERROR come back unchanged; SUBSCRIBE_OK,
// DELIVER and SUBSCRIPTION_CLOSED come back with the subscription id
// rewritten in place to the client-facing id (from 2^48 up, above every
// id of a local subscription). Per owner, order is the upstream's order.
//
// Upstream sessions live with the client's session: when it ends they are
// closed in order (an empty RECONCILE_CLIENT first, so the owner requeues
// what they held, then a clean end of stream, with FFS2's
// release_on_close); while it waits out its reconnect grace they wait
// with it, and a resume of it hands them to the new connection (Park,
// Adopt). A link to an owner that drops is resumed (resume.go).

// Upstream is an open upstream session, as the relay holds it.
type Upstream struct {
	// Conn speaks the wire protocol to the owner: HELLO, AUTH as @node and
	// FORWARDED_SESSION are done; Conn.Handshake has the owner's HELLO_OK,
	// with the session's resume identity and the resume outcome.
	Conn *upclient.Conn
	// Abort ends the session as a broken link would (the owner keeps its
	// grace); Conn.Close ends it in order.
	Abort func()
}

// Dialer opens an upstream session to owner on behalf of the
// client described by fs (OriginNodeID is the dialer's to fill), within
// ctx, presenting resume in HELLO when it is set (the upstream's link
// dropped and the gateway resumes the session). onPush receives every server-initiated frame (DELIVER,
// SUBSCRIPTION_CLOSED, GOING_AWAY, …) on the upstream's reader goroutine;
// its body is only valid during the call. An error wraps
// core.ErrPeerRefused when the owner could not be reached, or
// core.ErrUnavailable when it is not forwarding-capable.
type Dialer func(ctx context.Context, owner core.NodeID, fs wire.ForwardedSession, resume *wire.ResumeIdentity, onPush func(upclient.Frame)) (Upstream, error)

// FirstSubID is the first client-facing id of a forwarded subscription
// (core/forward/README.md#sub-ids): the ids of local subscriptions stay
// below it.
const FirstSubID = 1 << 48

// relayHighBytes bounds the relayed frames a client connection has queued
// and not yet written: past it the upstream reader waits for the client's
// writer (no buffering beyond what the owner's prefetch allows in flight,
// and backpressure to the owner for auto-ack subscriptions).
const relayHighBytes = 8 << 20

// Relay is one client connection's forwarding state: its upstream
// sessions, one per owner, and its forwarded subscriptions.
type Relay struct {
	gw   *Gateway
	c    ClientConn
	done <-chan struct{} // closed when the client connection is ending

	// queued is the relayed bytes the client's writer has not written
	// yet; room wakes an upstream reader that waits for them (relaySub).
	queued atomic.Int64
	room   chan struct{}

	mu      sync.Mutex
	ups     map[core.NodeID]*upstream
	subs    map[subKey]*fwdSub
	nextSub uint64
	closed  bool
	// parked: the client connection ended and its session waits out its
	// reconnect grace; a resume of that session on another connection
	// moves everything to that connection's relay (Adopt). handover is
	// closed then, or when the relay closes; pushes that arrive meanwhile
	// wait for it (awaitHandover).
	parked       bool
	handover     chan struct{}
	handoverOnce sync.Once
	heir         *Relay // the relay that adopted this one
	// failLog rate-limits logForwardFailure: one line a second.
	failLog lograte.Limiter[struct{}]
	// opening holds, per owner whose upstream session is being opened, the
	// operations that wait for it, in the order the client sent them. The
	// entry stays until they have all run, so a later operation for that
	// owner queues behind them instead of overtaking them.
	opening map[core.NodeID]*opening
}

// opening is an upstream session being opened and the operations waiting
// for it.
type opening struct {
	ops   []queuedOp
	bytes int           // of the bodies queued
	done  chan struct{} // closed when the queue has run
}

// queuedOp is an operation waiting for its upstream session: the handler
// and its own copy of the frame body (the reader reuses its buffer).
type queuedOp struct {
	body []byte
	run  func(u *upstream, body []byte, err error)
}

// maxOpeningQueue bounds the bytes of the operations one connection queues
// for an upstream session being opened: past it the reader waits for the
// session, as it would for any full buffer (fire-and-forget publishes take
// no reply slot, so nothing else bounds them).
const maxOpeningQueue = 1 << 20

// fwdSub is one forwarded subscription.
type fwdSub struct {
	up  *upstream // nil while SUBSCRIBE is in flight (the key is reserved)
	key subKey
	req wire.Subscribe // as the client asked
	// clientID is the client-facing id, given when the key is reserved and
	// never changed, so that a reconcile while the SUBSCRIBE is in flight
	// answers the id its SUBSCRIBE_OK will carry.
	clientID uint64
	stream   bool   // a SUBSCRIBE_STREAM's: replaced by the next one, never reconciled (S-72, S-83)
	ownerID  uint64 // the owner's id, from its SUBSCRIBE_OK
	// ownerMember is the member id the owner's SUBSCRIBE_OK gave an
	// exclusive subscription (the client's own when it sent one).
	ownerMember wire.Option[wire.UUID]
	on          *upstream // while in flight: the upstream its SUBSCRIBE is sent on (guarded by Relay.mu)
}

// rawBody is a body relayed as received.
type rawBody []byte

func (r rawBody) AppendTo(b []byte) []byte { return append(b, r...) }

// withUpstream runs an operation for owner on the connection's upstream
// session to it (reader goroutine). When that session is open and nothing
// for owner waits, run is called at once with body. Otherwise the
// operation joins the queue of the session being opened — which it starts
// when there is none — and run is called later, in order, on the
// goroutine that opens it, with a copy of body, and with the error when
// the session could not be opened. So a dial to an owner that is slow to
// answer (up to routing.upstream_connect_timeout_ms) never holds up the
// client's operations on other partitions. run answers through
// ClientConn.Answer or ClientConn.Confirm (the caller has deferred its reply).
func (r *Relay) withUpstream(owner core.NodeID, body []byte, run func(u *upstream, body []byte, err error)) {
	r.mu.Lock()
	for waited := time.Duration(0); ; {
		if o := r.opening[owner]; o != nil {
			if o.bytes < maxOpeningQueue {
				o.ops = append(o.ops, queuedOp{body: bytes.Clone(body), run: run})
				o.bytes += len(body)
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			<-o.done
			r.mu.Lock()
			continue
		}
		if u := r.ups[owner]; u != nil && u.linkLost() && waited < lostLinkWait {
			// The session's connection has just ended and its watchdog has
			// not yet decided whether it resumes (this operation then waits
			// for it in the queue above) or ends (then it goes to a new
			// session): wait for that, rather than send on a dead
			// connection and answer 503 for a request a new session serves.
			r.mu.Unlock()
			time.Sleep(lostLinkPoll)
			waited += lostLinkPoll
			r.mu.Lock()
			continue
		}
		break
	}
	if r.closed {
		r.mu.Unlock()
		run(nil, body, errConnClosing)
		return
	}
	if u := r.ups[owner]; u != nil {
		u.pinned.Add(1) // under r.mu: the idle watchdog sees it
		r.mu.Unlock()
		run(u, body, nil)
		u.pinned.Add(-1)
		return
	}
	r.mu.Unlock()
	if err := r.reserveUpstream(owner); err != nil {
		run(nil, body, err)
		return
	}
	o := &opening{ops: []queuedOp{{body: bytes.Clone(body), run: run}}, bytes: len(body), done: make(chan struct{})}
	r.mu.Lock()
	if r.opening == nil {
		r.opening = make(map[core.NodeID]*opening)
	}
	r.opening[owner] = o
	r.mu.Unlock()
	go func() {
		u, err := r.openUpstream(owner)
		for {
			r.mu.Lock()
			q := o.ops
			if len(q) == 0 {
				delete(r.opening, owner)
				close(o.done)
				r.mu.Unlock()
				if u != nil {
					u.pinned.Add(-1)
				}
				return
			}
			o.ops, o.bytes = nil, 0
			r.mu.Unlock()
			for _, op := range q {
				op.run(u, op.body, err)
			}
		}
	}()
}

// answerError answers a request whose reply was deferred with ERROR
// (any goroutine).
func (r *Relay) answerError(reqID uint64, code uint16, msg string) {
	r.c.Answer(wire.OpError, reqID, &wire.ErrorBody{Code: code, Message: msg})
}

// An operation that finds its upstream's connection ended looks again
// every lostLinkPoll, for at most lostLinkWait, until the watchdog has
// taken the session into resume or ended it (it reacts at once; the bound
// only guards against a watchdog that never does).
const (
	lostLinkPoll = time.Millisecond
	lostLinkWait = time.Second
)

// errConnClosing answers an operation that needs an upstream session
// while the client connection is ending.
var errConnClosing = core.Errorf(core.ErrUnavailable, "connection closing")

// upstreamFor returns the connection's upstream session to owner, opening
// it on first use (the dial is bounded by routing.upstream_connect_timeout_ms),
// pinned: the caller unpins it (u.pinned.Add(-1)) once its request is
// sent. An operation re-sent after an ownership move calls it; two dials
// racing for one owner keep the first registered.
func (r *Relay) upstreamFor(owner core.NodeID) (*upstream, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errConnClosing
	}
	if u := r.ups[owner]; u != nil {
		u.pinned.Add(1)
		r.mu.Unlock()
		return u, nil
	}
	r.mu.Unlock()
	if err := r.reserveUpstream(owner); err != nil {
		return nil, err
	}
	return r.openUpstream(owner)
}

// reserveUpstream takes owner's place under the upstream session limits
// (openUpstream gives it back when the session does not open).
func (r *Relay) reserveUpstream(owner core.NodeID) error {
	if r.gw.dial == nil {
		return core.Errorf(core.ErrUnavailable, "this broker cannot forward to %s", owner)
	}
	if limit, err := r.gw.counts.take(owner, r.gw.limits(), time.Now()); err != nil {
		r.gw.m.Rejected.WithLabelValues(limit).Inc()
		return err
	}
	return nil
}

// openUpstream dials the upstream session to owner that reserveUpstream
// made room for, and installs it (any goroutine). The session comes back
// pinned, as from upstreamFor: it cannot close as idle before the
// operations that wait for it are sent.
func (r *Relay) openUpstream(owner core.NodeID) (*upstream, error) {
	dial := r.gw.dial
	set := r.gw.limits()
	now := time.Now()
	cl := r.c.Client()
	fs := wire.ForwardedSession{V2: true, HopCount: wire.ForwardedHopCount, Flags: wire.FlagReleaseOnClose,
		ConnectionID: cl.ConnID, ClientRemoteAddr: cl.Remote, ActingUsername: cl.User, ClientID: cl.ClientID}
	u := &upstream{owner: owner, fs: fs, subs: make(map[uint64]*fwdSub), gone: make(chan struct{})}
	u.rel.Store(r)
	timeout := set.UpstreamConnectTimeout
	if timeout <= 0 {
		timeout = core.DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	up, err := dial(ctx, owner, fs, nil, u.onPush)
	cancel()
	if err != nil {
		r.gw.counts.release(owner)
		if errors.Is(err, core.ErrPeerRefused) {
			r.gw.counts.refuse(owner, time.Now().Add(refusedFailFast))
		}
		if ok, _ := r.gw.warned.Allow(owner, time.Now()); ok {
			r.c.Logger().Warn("upstream session not opened (this warning repeats at most every 10 s per owner)", "owner", string(owner), "err", err)
		}
		return nil, core.Errorf(core.ErrUnavailable, "cannot reach the owner %s: %v; retry", owner, err)
	}
	u.up.Store(&up)
	u.lastUse.Store(now.UnixNano())
	r.mu.Lock()
	if r.closed || r.ups[owner] != nil {
		// The connection ended meanwhile (or, impossible on the one reader,
		// another upstream won): do not keep this one.
		other := r.ups[owner]
		if r.closed {
			other = nil
		}
		if other != nil {
			other.pinned.Add(1)
		}
		r.mu.Unlock()
		r.gw.counts.release(owner)
		go closeUpstream(up)
		if other != nil {
			return other, nil
		}
		return nil, errConnClosing
	}
	if r.ups == nil {
		r.ups = make(map[core.NodeID]*upstream)
	}
	r.ups[owner] = u
	u.pinned.Add(1)
	r.mu.Unlock()
	r.c.Logger().Info("upstream session opened", "owner", string(owner))
	go u.watch()
	return u, nil
}

// Close closes every upstream session of a connection that ended (in
// order, in the background: the owners requeue what was held).
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	ups := make([]*upstream, 0, len(r.ups))
	for _, u := range r.ups {
		ups = append(ups, u)
	}
	r.ups = nil
	r.mu.Unlock()
	r.endHandover()
	for _, u := range ups {
		u.closing("client_closed")
		go closeUpstream(*u.link())
	}
}

// endHandover wakes the pushes waiting for a parked relay's heir, once.
func (r *Relay) endHandover() { r.handoverOnce.Do(func() { close(r.handover) }) }

// NewRelay returns the forwarding state of the client connection c; done
// is closed when that connection is ending.
func (g *Gateway) NewRelay(c ClientConn, done <-chan struct{}) *Relay {
	return &Relay{gw: g, c: c, done: done, room: make(chan struct{}, 1), failLog: lograte.Limiter[struct{}]{Every: time.Second},
		handover: make(chan struct{})}
}

// Park keeps the relay's upstream sessions and forwarded subscriptions
// after its client connection ended, while the client's session waits out
// its reconnect grace: a resume of the session hands them to the new
// connection (Adopt); the session's end closes them (Close). What owners
// push meanwhile waits, holding the upstream's reader (and so, through the
// transport's flow control and the owner's prefetch, the owner).
func (r *Relay) Park() {
	r.mu.Lock()
	r.parked = !r.closed
	r.mu.Unlock()
}

// Adopt moves the upstream sessions and forwarded subscriptions of old —
// the relay of the connection the client's session was resumed from — to
// r (core/forward/README.md#client-resume): the client keeps its forwarded
// subscriptions and settles what they delivered. Requests the old
// connection sent are still answered there (its connection is gone, so
// they are not answered at all); stream subscriptions are not kept
// (S-83), nor the ones whose SUBSCRIBE was still in flight. An owner r
// already has an upstream session to keeps r's; old's to it is closed.
func (r *Relay) Adopt(old *Relay) {
	if old == r {
		return
	}
	old.mu.Lock()
	if old.closed || old.heir != nil {
		old.mu.Unlock()
		return
	}
	ups, subs, next := old.ups, old.subs, old.nextSub
	old.ups, old.subs = nil, nil
	old.heir = r
	r.mu.Lock()
	var extra []*upstream
	for owner, u := range ups {
		if r.ups[owner] != nil || r.closed {
			extra = append(extra, u)
			continue
		}
		if r.ups == nil {
			r.ups = make(map[core.NodeID]*upstream)
		}
		r.ups[owner] = u
		u.rel.Store(r)
	}
	for key, fs := range subs {
		if fs.stream || fs.up == nil || fs.up.relay() != r || r.subs[key] != nil {
			if fs.up != nil {
				delete(fs.up.subs, fs.ownerID)
			}
			continue
		}
		if r.subs == nil {
			r.subs = make(map[subKey]*fwdSub)
		}
		r.subs[key] = fs
	}
	r.nextSub = max(r.nextSub, next)
	r.mu.Unlock()
	old.mu.Unlock()
	old.endHandover()
	for _, u := range extra {
		u.closing("superseded")
		go closeUpstream(*u.link())
	}
}

// awaitHandover waits, while r is parked, for the relay that adopts it and
// returns that relay (nil when r closed, or was not parked). It holds the
// upstream's reader, as waitRelayRoom does.
func (r *Relay) awaitHandover(u *upstream) *Relay {
	r.mu.Lock()
	parked := r.parked
	r.mu.Unlock()
	if !parked {
		return nil
	}
	unpark := u.link().Conn.ParkReader()
	defer unpark()
	select {
	case <-r.handover:
	case <-u.link().Conn.Done():
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heir
}

// Subscriptions lists the connection's forwarded subscriptions as
// "topic[/group]#partition", for the admin view.
func (r *Relay) Subscriptions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for key, fs := range r.subs {
		if fs.up != nil {
			out = append(out, key.String())
		}
	}
	return out
}

// Owners lists the owners the connection has an upstream session to.
func (r *Relay) Owners() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for owner := range r.ups {
		out = append(out, string(owner))
	}
	return out
}

// subKey is a forwarded subscription's partition: at most one per
// partition and connection, local or forwarded.
type subKey struct {
	topic     string
	group     wire.Option[string]
	partition uint32
}

func keyOf(topic string, group wire.Option[string], partition uint32) subKey {
	return subKey{topic: topic, group: group, partition: partition}
}

func (k subKey) String() string {
	s := k.topic
	if g, ok := k.group.Get(); ok {
		s += "/" + g
	}
	return s + "#" + strconv.FormatUint(uint64(k.partition), 10)
}
