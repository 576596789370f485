// Package faultproxy is a loopback proxy for tests that injects network
// faults between two endpoints: a blackhole, one-way loss, added delay and
// connection resets. It forwards TCP connections (NewTCP) or UDP datagrams
// (NewUDP) from its own address on 127.0.0.1 to a target, so a test points
// one side at Addr() instead of the other side's address and flips faults
// with Set while traffic flows.
//
// "A" is the side that dialed the proxy, "B" the target. Faults apply to
// bytes (TCP) or datagrams (UDP) as they pass; a TCP blackhole keeps the
// connections open and discards what they carry, which is what a dead
// route looks like to an application that is not told otherwise.
//
// Everything the proxy starts ends when it is closed (with the test that
// created it, or by Close).
package faultproxy

import (
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Faults is the fault set in force. The zero value forwards faithfully, so
// Set(Faults{}) restores the network.
type Faults struct {
	// Blackhole drops everything in both directions. TCP connections stay
	// open (new ones are accepted and connected upstream) but carry nothing.
	Blackhole bool
	// Delay holds back each chunk (TCP) or datagram (UDP), in each
	// direction, by this long.
	Delay time.Duration
	// DropAToB drops what A (the side that dialed the proxy) sends to B.
	DropAToB bool
	// DropBToA drops what B sends back to A.
	DropBToA bool
}

func (f Faults) drops(aToB bool) bool {
	if f.Blackhole {
		return true
	}
	if aToB {
		return f.DropAToB
	}
	return f.DropBToA
}

// MaxUDPSessions bounds the UDP session table: beyond it, the least
// recently used client's upstream socket is closed and forgotten.
const MaxUDPSessions = 256

// maxDelayed bounds the UDP datagrams held back by Delay at once; beyond
// it datagrams are dropped, as a full router queue would.
const maxDelayed = 4096

// dialTimeout bounds the proxy's connection to the target.
const dialTimeout = 5 * time.Second

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	network string
	target  string

	mu     sync.Mutex
	faults Faults
	closed bool
	// tcp
	ln       net.Listener
	pairs    map[*pair]struct{}
	halfOpen []*pair // ResetAOnly's, whose B sides close with the proxy
	// udp
	pc       *net.UDPConn
	sessions map[string]*session
	delayed  int

	wg sync.WaitGroup
}

// pair is one proxied TCP connection: a is the accepted side, b the
// upstream side. halfOpen (ResetAOnly) keeps b open when the pair is
// dropped.
type pair struct {
	a, b     *net.TCPConn
	halfOpen atomic.Bool
}

// session is one UDP client's path: the upstream socket whose replies go
// back to client.
type session struct {
	client   *net.UDPAddr
	up       *net.UDPConn
	lastUsed time.Time
}

// NewTCP starts a TCP proxy on 127.0.0.1:0 forwarding to target; it closes
// with t.
func NewTCP(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{network: "tcp", target: target, ln: ln, pairs: make(map[*pair]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// NewUDP starts a UDP proxy on 127.0.0.1:0 forwarding to target; it closes
// with t.
func NewUDP(t testing.TB, target string) *Proxy {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{network: "udp", target: target, pc: pc, sessions: make(map[string]*session)}
	p.wg.Add(1)
	go p.udpLoop()
	t.Cleanup(p.Close)
	return p
}

// SetTarget changes the address new connections (TCP) or new sessions
// (UDP) go to: a test can start the proxy before the process it fronts
// has bound its port (and so cannot steal it between picking and
// binding). Connections made before it go to the old target.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

func (p *Proxy) currentTarget() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Addr is the address A dials instead of the target.
func (p *Proxy) Addr() string {
	if p.ln != nil {
		return p.ln.Addr().String()
	}
	return p.pc.LocalAddr().String()
}

// Set replaces the faults in force; it applies to bytes that arrive from
// now on, on existing and new connections.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
}

func (p *Proxy) current() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// Reset resets every current TCP connection (both halves see an RST) or,
// for UDP, forgets every session (a client's next datagram arrives at the
// target from a new port). New connections work as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	pairs := p.pairs
	sessions := p.sessions
	if p.pairs != nil {
		p.pairs = make(map[*pair]struct{})
	}
	if p.sessions != nil {
		p.sessions = make(map[string]*session)
	}
	p.mu.Unlock()
	for pr := range pairs {
		pr.reset()
	}
	for _, s := range sessions {
		s.up.Close()
	}
}

// Close stops the proxy, resets its connections and waits for its
// goroutines. It is safe to call more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
	}
	if p.pc != nil {
		p.pc.Close()
	}
	p.Reset()
	p.mu.Lock()
	halfOpen := p.halfOpen
	p.halfOpen = nil
	p.mu.Unlock()
	for _, pr := range halfOpen {
		pr.b.SetLinger(0) //nolint:errcheck // best effort: close anyway
		pr.b.Close()
	}
	p.wg.Wait()
}

func (pr *pair) reset() {
	for _, c := range []*net.TCPConn{pr.a, pr.b} {
		if c == pr.b && pr.halfOpen.Load() {
			continue
		}
		c.SetLinger(0) //nolint:errcheck // best effort: close anyway
		c.Close()
	}
}

// ResetAOnly resets the accepted side of every current TCP connection and
// leaves the target's side open, silent: A sees its connection die at
// once, while B keeps a connection that carries nothing more until B's own
// timeouts end it (a relay or middlebox that lost the path but not B's
// socket). The B sides close with the proxy. New connections work as
// before.
func (p *Proxy) ResetAOnly() {
	p.mu.Lock()
	pairs := p.pairs
	p.pairs = make(map[*pair]struct{})
	p.halfOpen = slices.AppendSeq(p.halfOpen, maps.Keys(pairs))
	p.mu.Unlock()
	for pr := range pairs {
		pr.halfOpen.Store(true)
		pr.reset()
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of descriptors): back off briefly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.connect(c.(*net.TCPConn))
	}
}

// connect dials the target for an accepted connection and pumps both ways.
func (p *Proxy) connect(a *net.TCPConn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.currentTarget(), dialTimeout)
	if err != nil {
		// The target refuses: so does the proxy, with an RST.
		a.SetLinger(0) //nolint:errcheck
		a.Close()
		return
	}
	pr := &pair{a: a, b: up.(*net.TCPConn)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.reset()
		return
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(2)
	go p.pump(pr, pr.a, pr.b, true)
	go p.pump(pr, pr.b, pr.a, false)
}

// pump copies src to dst, applying the faults of its direction to each
// chunk. An orderly end (EOF) is passed on as a FIN; an error resets the
// pair, so an RST on one side becomes an RST on the other.
func (p *Proxy) pump(pr *pair, src, dst *net.TCPConn, aToB bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f := p.current()
			if f.Delay > 0 {
				time.Sleep(f.Delay)
			}
			if !f.drops(aToB) {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					p.drop(pr)
					return
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				dst.CloseWrite() //nolint:errcheck // the other pump sees any failure
				return
			}
			p.drop(pr)
			return
		}
	}
}

// drop resets a pair and forgets it.
func (p *Proxy) drop(pr *pair) {
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	pr.reset()
}

func (p *Proxy) udpLoop() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.pc.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ICMP-induced errors: keep serving
		}
		s := p.session(from)
		if s == nil {
			continue
		}
		p.sendDelayed(buf[:n], true, func(b []byte) { s.up.Write(b) }) //nolint:errcheck // UDP: loss is allowed
	}
}

// session returns from's session, creating it (and evicting the least
// recently used one when the table is full).
func (p *Proxy) session(from *net.UDPAddr) *session {
	key := from.String()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if s, ok := p.sessions[key]; ok {
		s.lastUsed = time.Now()
		p.mu.Unlock()
		return s
	}
	var evict *session
	if len(p.sessions) >= MaxUDPSessions {
		for _, s := range p.sessions {
			if evict == nil || s.lastUsed.Before(evict.lastUsed) {
				evict = s
			}
		}
		delete(p.sessions, evict.client.String())
	}
	p.mu.Unlock()
	if evict != nil {
		evict.up.Close()
	}
	raddr, err := net.ResolveUDPAddr("udp", p.currentTarget())
	if err != nil {
		return nil
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return nil
	}
	s := &session{client: from, up: up, lastUsed: time.Now()}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		up.Close()
		return nil
	}
	p.sessions[key] = s
	p.wg.Add(1)
	p.mu.Unlock()
	go p.udpReturn(s)
	return s
}

// udpReturn forwards the target's replies on s's upstream socket to the
// client, until the session is forgotten or the proxy closes.
func (p *Proxy) udpReturn(s *session) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.up.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // ECONNREFUSED from an ICMP: the target may come back
		}
		p.sendDelayed(buf[:n], false, func(b []byte) { p.pc.WriteToUDP(b, s.client) }) //nolint:errcheck
	}
}

// sendDelayed applies the faults of a direction to one datagram and sends
// it now or after the delay.
func (p *Proxy) sendDelayed(b []byte, aToB bool, send func([]byte)) {
	p.mu.Lock()
	f := p.faults
	if f.drops(aToB) || p.closed {
		p.mu.Unlock()
		return
	}
	if f.Delay <= 0 {
		p.mu.Unlock()
		send(b)
		return
	}
	if p.delayed >= maxDelayed {
		p.mu.Unlock()
		return
	}
	p.delayed++
	p.wg.Add(1)
	p.mu.Unlock()
	c := append([]byte(nil), b...)
	time.AfterFunc(f.Delay, func() {
		defer p.wg.Done()
		p.mu.Lock()
		p.delayed--
		closed := p.closed
		p.mu.Unlock()
		if !closed {
			send(c)
		}
	})
}
