package integration

// A cuttable, freezable TCP proxy on 127.0.0.1.

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy forwards 127.0.0.1 connections to a target broker. Cut drops
// every forwarded connection abruptly (a network blip); Freeze makes the
// current ones half-open black holes; SetTarget("") holds new connections
// until a target is set again (a broker restart).
type proxy struct {
	t  testing.TB
	ln net.Listener
	g  *guard

	mu      sync.Mutex
	target  string
	changed chan struct{}
	pairs   map[*proxyPair]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type proxyPair struct {
	a, b   net.Conn
	frozen atomic.Bool
	cutCh  chan struct{} // closed by cut
}

const proxyHold = 45 * time.Second // how long a held connection waits for a target

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{t: t, ln: ln, g: newGuard(t), target: target, changed: make(chan struct{}), pairs: make(map[*proxyPair]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget points new connections at addr ("" holds them).
func (p *proxy) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Cut closes both sides of every forwarded connection with a TCP reset
// and returns how many there were.
func (p *proxy) Cut() int { return p.cut(func(*proxyPair) bool { return true }) }

// CutFrozen resets only the connections frozen by Freeze.
func (p *proxy) CutFrozen() int { return p.cut(func(pp *proxyPair) bool { return pp.frozen.Load() }) }

func (p *proxy) cut(which func(*proxyPair) bool) int {
	p.mu.Lock()
	var pairs []*proxyPair
	for pp := range p.pairs {
		if which(pp) {
			pairs = append(pairs, pp)
			delete(p.pairs, pp)
		}
	}
	p.mu.Unlock()
	for _, pp := range pairs {
		close(pp.cutCh)
		abort(pp.a)
		abort(pp.b)
	}
	return len(pairs)
}

// Freeze makes every current connection a black hole in both directions
// (a half-open path: nothing is forwarded, and neither side learns that
// the other closed) until CutFrozen or Cut, and returns how many there
// were. Later connections are forwarded normally.
func (p *proxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pp := range p.pairs {
		pp.frozen.Store(true)
	}
	return len(p.pairs)
}

func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	deadline := time.Now().Add(proxyHold)
	target := ""
	for target == "" {
		p.mu.Lock()
		tgt, closed, changed := p.target, p.closed, p.changed
		p.mu.Unlock()
		if closed {
			abort(c)
			return
		}
		if tgt != "" {
			target = tgt
			break
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
			abort(c)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := p.g.dial(ctx, "tcp", target)
	cancel()
	if err != nil {
		abort(c)
		return
	}
	pp := &proxyPair{a: c, b: up, cutCh: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		abort(c)
		abort(up)
		return
	}
	p.pairs[pp] = struct{}{}
	p.mu.Unlock()
	var once sync.Once
	end := func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.pairs, pp)
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pp.pump(up, c); end() }()
	go func() { defer wg.Done(); pp.pump(c, up); end() }()
	wg.Wait()
}

// pump copies src to dst until either fails. Once the pair is frozen it
// swallows what it reads, and an end of src is not passed on until the
// pair is cut: the other side keeps a half-open connection.
func (pp *proxyPair) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pp.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if pp.frozen.Load() {
				<-pp.cutCh
			}
			return
		}
	}
}
