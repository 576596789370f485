package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// Net is a simulated network of named hosts: listeners at "host:port",
// connections between them, and faults on the directions between two
// hosts. It models what TCP and QUIC let an application see, nothing
// below: bytes of one connection arrive in order or not at all; a cut
// direction holds them (the sender's retransmissions fail) until the
// heal, when they arrive; a connection to a crashed host ends with a
// reset; a dial across a cut hangs until its deadline (the SYN or its
// answer is lost), one to a host with no listener is refused at once.
//
// Every wait is a channel wait or a timer, so inside a testing/synctest
// bubble time only moves when every goroutine of the bubble waits.
type Net struct {
	domain string // every host of this net is "<name>.<domain>"

	mu        sync.Mutex
	listeners map[string]*listener // by "host:port"
	conns     map[*pipe]struct{}   // every direction of every open connection
	cut       map[[2]string]bool   // host → host: nothing passes
	down      map[string]bool      // crashed hosts: no connection from or to them
	delay     map[[2]string]time.Duration
	jitter    map[[2]string]time.Duration // the most a new connection adds to delay
	rng       *rand.Rand                  // jitter draws (in dial order, which the scheduler decides)
	changed   chan struct{}               // closed and replaced when a cut heals
	guard     func(from, addr string) error
}

// sendBuffer bounds the bytes one direction of a connection holds (a
// socket's send and receive buffers together): a writer beyond it waits
// for the reader, which is backpressure as TCP gives it.
const sendBuffer = 4 << 20

func newNet(domain string) *Net {
	return &Net{
		domain:    domain,
		listeners: map[string]*listener{},
		conns:     map[*pipe]struct{}{},
		cut:       map[[2]string]bool{},
		down:      map[string]bool{},
		delay:     map[[2]string]time.Duration{},
		jitter:    map[[2]string]time.Duration{},
		rng:       rand.New(rand.NewPCG(1, 2)),
		changed:   make(chan struct{}),
	}
}

// Host is the full name of host name on this net.
func (n *Net) Host(name string) string { return name + "." + n.domain }

// hostOf is the host part of "host:port".
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// Cut stops every byte and every new connection from host a to host b
// (one direction; cut both for a partition). Bytes already written wait
// for the heal.
func (n *Net) Cut(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[[2]string{a, b}] = true
}

// Heal removes every cut; held bytes are delivered.
func (n *Net) Heal() {
	n.mu.Lock()
	clear(n.cut)
	n.wakeAllLocked()
	n.mu.Unlock()
}

// SetDelay makes every byte from a to b take d longer (a one-way delay).
func (n *Net) SetDelay(a, b string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d <= 0 {
		delete(n.delay, [2]string{a, b})
		return
	}
	n.delay[[2]string{a, b}] = d
}

// wakeAllLocked wakes every waiter: each waits on n.changed as well.
// SetJitter makes each new connection from a to b slower by a random
// amount up to max, on top of SetDelay's: bytes of one connection stay in
// order, those of different connections may overtake each other, as
// separate TCP connections and separate QUIC streams allow.
func (n *Net) SetJitter(a, b string, max time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if max <= 0 {
		delete(n.jitter, [2]string{a, b})
		return
	}
	n.jitter[[2]string{a, b}] = max
}

func (n *Net) wakeAllLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *Net) isCut(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[[2]string{a, b}]
}

// Crash ends host's connections with a reset (its peers read an error
// once the direction towards them is not cut) and closes its listeners:
// the process is gone, its machine and the network stay.
func (n *Net) Crash(host string) {
	n.mu.Lock()
	n.down[host] = true
	var ends []*pipe
	for p := range n.conns {
		if p.from == host || p.to == host {
			ends = append(ends, p)
		}
	}
	var ls []*listener
	for addr, l := range n.listeners {
		if hostOf(addr) == host {
			ls = append(ls, l)
		}
	}
	n.mu.Unlock()
	for _, p := range ends {
		p.abort(errReset)
	}
	for _, l := range ls {
		_ = l.Close()
	}
}

// Revive ends Crash: host may connect and listen again.
func (n *Net) Revive(host string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.down, host)
}

// Listen opens a listener at addr ("host:port" of this net).
func (n *Net) Listen(network, addr string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down[hostOf(addr)] {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: simAddr(addr), Err: syscall.EADDRNOTAVAIL}
	}
	if _, ok := n.listeners[addr]; ok {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: simAddr(addr), Err: syscall.EADDRINUSE}
	}
	l := &listener{n: n, addr: addr, backlog: make(chan *Conn, 128), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// errReset is what a reader sees after the other end crashed or aborted.
var errReset = &resetError{}

type resetError struct{}

func (*resetError) Error() string { return "sim: connection reset by peer" }

// Is makes a reset an aborted stream (core.Stream's contract) and
// ECONNRESET (what clients test for).
func (*resetError) Is(target error) bool {
	return target == core.ErrStreamAborted || target == syscall.ECONNRESET
}

// Dial connects from host from to addr. ctx bounds the connect.
func (n *Net) Dial(ctx context.Context, from, addr string) (*Conn, error) {
	to := hostOf(addr)
	if n.guard != nil {
		if err := n.guard(from, addr); err != nil {
			return nil, err
		}
	}
	// Across a cut the handshake is lost: wait for the heal or the deadline.
	for n.isCut(from, to) || n.isCut(to, from) {
		n.mu.Lock()
		ch := n.changed
		n.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: simAddr(addr), Err: fmt.Errorf("i/o timeout (the network between %s and %s is cut): %w", from, to, ctx.Err())}
		}
	}
	n.mu.Lock()
	rtt := n.delay[[2]string{from, to}] + n.delay[[2]string{to, from}]
	n.mu.Unlock()
	if rtt > 0 {
		t := time.NewTimer(rtt)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: simAddr(addr), Err: ctx.Err()}
		}
	}
	n.mu.Lock()
	l := n.listeners[addr]
	if n.down[from] || n.down[to] {
		l = nil
	}
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: simAddr(addr), Err: syscall.ECONNREFUSED}
	}
	local := fmt.Sprintf("%s:%d", from, n.ephemeral())
	up := n.newPipe(from, to)
	down := n.newPipe(to, from)
	c := &Conn{local: local, remote: addr, in: down, out: up}
	s := &Conn{local: addr, remote: local, in: up, out: down}
	select {
	case l.backlog <- s:
		return c, nil
	case <-l.done:
	default:
	}
	up.abort(errReset)
	down.abort(errReset)
	return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: simAddr(addr), Err: syscall.ECONNREFUSED}
}

var ports = struct {
	sync.Mutex
	next int
}{next: 40000}

func (n *Net) ephemeral() int {
	ports.Lock()
	defer ports.Unlock()
	ports.next++
	if ports.next > 60999 {
		ports.next = 40001
	}
	return ports.next
}

func (n *Net) newPipe(from, to string) *pipe {
	p := &pipe{n: n, from: from, to: to, changed: make(chan struct{})}
	n.mu.Lock()
	if j := n.jitter[[2]string{from, to}]; j > 0 {
		p.extra = time.Duration(n.rng.Int64N(int64(j)))
	}
	n.conns[p] = struct{}{}
	n.mu.Unlock()
	return p
}

type simAddr string

func (a simAddr) Network() string { return "tcp" }
func (a simAddr) String() string  { return string(a) }

type listener struct {
	n       *Net
	addr    string
	backlog chan *Conn
	done    chan struct{}
	once    sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.backlog:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: simAddr(l.addr), Err: net.ErrClosed}
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[l.addr] == l {
			delete(l.n.listeners, l.addr)
		}
		l.n.mu.Unlock()
		for {
			select {
			case c := <-l.backlog:
				c.Abort()
			default:
				return
			}
		}
	})
	return nil
}

func (l *listener) Addr() net.Addr { return simAddr(l.addr) }

// chunk is bytes written at once, deliverable from due.
type chunk struct {
	due time.Time
	b   []byte
}

// pipe is one direction of a connection.
type pipe struct {
	n        *Net
	from, to string

	mu       sync.Mutex
	q        []chunk
	buffered int
	eof      bool  // the writer's orderly end, after q
	err      error // an abort: seen by the reader once it can pass
	rclosed  bool  // the reader closed its side
	rdl, wdl time.Time
	extra    time.Duration // this connection's jitter (SetJitter)
	changed  chan struct{} // closed and replaced on every change
}

func (p *pipe) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *pipe) forget() {
	p.n.mu.Lock()
	delete(p.n.conns, p)
	p.n.mu.Unlock()
}

// abort ends the direction with err: its reader sees err (when the
// direction is not cut) and its writer fails.
func (p *pipe) abort(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.wakeLocked()
	p.mu.Unlock()
}

// wait blocks until the pipe changes, the net heals, until, or a
// deadline; it returns a timeout error when deadline passed.
func (p *pipe) waitLocked(until, deadline time.Time) error {
	ch := p.changed
	p.n.mu.Lock()
	nch := p.n.changed
	p.n.mu.Unlock()
	p.mu.Unlock()
	defer p.mu.Lock()
	var timer *time.Timer
	var tc <-chan time.Time
	wake := until
	if !deadline.IsZero() && (wake.IsZero() || deadline.Before(wake)) {
		wake = deadline
	}
	if !wake.IsZero() {
		d := time.Until(wake)
		if d <= 0 {
			d = 0
		}
		timer = time.NewTimer(d)
		defer timer.Stop()
		tc = timer.C
	}
	select {
	case <-ch:
	case <-nch:
	case <-tc:
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (p *pipe) read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.rclosed {
			return 0, net.ErrClosed
		}
		passing := !p.n.isCut(p.from, p.to)
		if passing {
			// A reset overtakes bytes in flight, as a TCP RST does.
			if p.err != nil {
				return 0, p.err
			}
			if len(p.q) > 0 && !time.Now().Before(p.q[0].due) {
				k := copy(b, p.q[0].b)
				p.q[0].b = p.q[0].b[k:]
				if len(p.q[0].b) == 0 {
					p.q[0] = chunk{}
					p.q = p.q[1:]
				}
				p.buffered -= k
				p.wakeLocked() // room for the writer
				return k, nil
			}
			if len(p.q) == 0 && p.eof {
				return 0, io.EOF
			}
		}
		var until time.Time
		if passing && len(p.q) > 0 {
			until = p.q[0].due
		}
		if err := p.waitLocked(until, p.rdl); err != nil {
			return 0, err
		}
	}
}

func (p *pipe) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case p.err != nil:
			return 0, p.err
		case p.rclosed:
			return 0, errReset
		case p.eof:
			return 0, net.ErrClosed
		}
		if p.buffered < sendBuffer {
			break
		}
		if err := p.waitLocked(time.Time{}, p.wdl); err != nil {
			return 0, err
		}
	}
	p.n.mu.Lock()
	d := p.n.delay[[2]string{p.from, p.to}]
	p.n.mu.Unlock()
	due := time.Now().Add(d + p.extra)
	if n := len(p.q); n > 0 && p.q[n-1].due.After(due) {
		due = p.q[n-1].due // never overtake what was written before
	}
	p.q = append(p.q, chunk{due: due, b: append([]byte(nil), b...)})
	p.buffered += len(b)
	p.wakeLocked()
	return len(b), nil
}

// Conn is one end of a simulated connection: a net.Conn and a core.Stream.
type Conn struct {
	local, remote string
	in, out       *pipe
	closeOnce     sync.Once
}

func (c *Conn) Read(b []byte) (int, error)  { return c.in.read(b) }
func (c *Conn) Write(b []byte) (int, error) { return c.out.write(b) }

// CloseWrite ends this direction in order: the peer reads what was
// written, then io.EOF.
func (c *Conn) CloseWrite() error {
	c.out.mu.Lock()
	c.out.eof = true
	c.out.wakeLocked()
	c.out.mu.Unlock()
	return nil
}

// Close is CloseWrite and the end of reading: a peer that writes more
// gets a reset.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		_ = c.CloseWrite()
		c.in.mu.Lock()
		c.in.rclosed = true
		c.in.q, c.in.buffered = nil, 0
		c.in.wakeLocked()
		c.in.mu.Unlock()
		c.in.forget()
		c.out.forget()
	})
	return nil
}

// Abort resets the connection: both ends' reads fail.
func (c *Conn) Abort() error {
	c.out.abort(errReset)
	c.in.abort(errReset)
	return c.Close()
}

func (c *Conn) PeerNode() core.NodeID { return "" }

// ended reports whether both directions are over.
func (c *Conn) ended() bool {
	c.in.mu.Lock()
	in := c.in.rclosed || c.in.err != nil
	c.in.mu.Unlock()
	c.out.mu.Lock()
	out := c.out.eof || c.out.err != nil
	c.out.mu.Unlock()
	return in && out
}

func (c *Conn) LocalAddr() net.Addr  { return simAddr(c.local) }
func (c *Conn) RemoteAddr() net.Addr { return simAddr(c.remote) }

func (c *Conn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.in.mu.Lock()
	c.in.rdl = t
	c.in.wakeLocked()
	c.in.mu.Unlock()
	return nil
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.out.mu.Lock()
	c.out.wdl = t
	c.out.wakeLocked()
	c.out.mu.Unlock()
	return nil
}
