package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tcpEcho serves an echo on loopback until the test ends. An EOF from the
// client is answered with a FIN once everything is echoed.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c) //nolint:errcheck
				c.(*net.TCPConn).CloseWrite()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d.
func roundTrip(c net.Conn, msg string, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo differs: " + string(buf))
	}
	return nil
}

// expectSilence reads for d and fails if anything arrives.
func expectSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		t.Fatalf("read %q through a fault that drops it", buf[:n])
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a timeout", err)
	}
}

func TestTCPForwardsAndHalfCloses(t *testing.T) {
	p := NewTCP(t, tcpEcho(t))
	c := dial(t, "tcp", p.Addr())
	if err := roundTrip(c, "hello", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// FIN travels through: the echo answers with its own FIN.
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("after CloseWrite: n=%d err=%v, want EOF", n, err)
	}
}

func TestTCPBlackholeKeepsConnectionAndRestores(t *testing.T) {
	p := NewTCP(t, tcpEcho(t))
	c := dial(t, "tcp", p.Addr())
	if err := roundTrip(c, "before", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Set(Faults{Blackhole: true})
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	expectSilence(t, c, 300*time.Millisecond)
	p.Set(Faults{})
	// The connection survived the blackhole; what it carried is gone.
	if err := roundTrip(c, "after", 10*time.Second); err != nil {
		t.Fatalf("round trip after restore: %v", err)
	}
}

func TestTCPOneWayLoss(t *testing.T) {
	// A server that greets first, so B→A traffic exists without A sending.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		s.Write([]byte("hi"))
		s.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		b := make([]byte, 16)
		n, _ := s.Read(b)
		got <- b[:n]
	}()
	p := NewTCP(t, ln.Addr().String())
	p.Set(Faults{DropAToB: true})
	c := dial(t, "tcp", p.Addr())
	c.Write([]byte("dropped"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("B→A read %q, %v: that direction is not dropped", b, err)
	}
	select {
	case g := <-got:
		if len(g) != 0 {
			t.Fatalf("B read %q sent A→B under DropAToB", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not finish")
	}

	p.Set(Faults{DropBToA: true})
	c3 := dial(t, "tcp", p.Addr())
	expectSilence(t, c3, 200*time.Millisecond)
}

func TestTCPDelay(t *testing.T) {
	p := NewTCP(t, tcpEcho(t))
	c := dial(t, "tcp", p.Addr())
	p.Set(Faults{Delay: 150 * time.Millisecond})
	start := time.Now()
	if err := roundTrip(c, "slow", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("round trip took %v with 150ms each way", el)
	}
}

func TestTCPResetSendsRST(t *testing.T) {
	p := NewTCP(t, tcpEcho(t))
	c := dial(t, "tcp", p.Addr())
	if err := roundTrip(c, "x", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: %v, want connection reset", err)
	}
	// New connections are unaffected.
	if err := roundTrip(dial(t, "tcp", p.Addr()), "y", 10*time.Second); err != nil {
		t.Fatalf("new connection after Reset: %v", err)
	}
}

func TestTCPTargetDownRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := NewTCP(t, addr)
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		return // the RST beat the end of connect: refused, as wanted
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a proxy whose target is down: %v, want a reset", err)
	}
}

// Close ends every goroutine, also with connections open.
func TestCloseEndsGoroutines(t *testing.T) {
	echo := tcpEcho(t)
	before := runtime.NumGoroutine()
	p := NewTCP(t, echo)
	for range 5 {
		c := dial(t, "tcp", p.Addr())
		if err := roundTrip(c, "z", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	u := NewUDP(t, udpEcho(t))
	uc := dial(t, "udp", u.Addr())
	if err := roundTrip(uc, "u", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Close()
	u.Close()
	p.Close() // twice is fine
	// The echo servers' own goroutines (one per connection) end when the
	// proxy's upstream halves close; allow for the UDP echo's one.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Fatalf("%d goroutines after Close, %d before the proxies", n, before)
	}
}

func udpEcho(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFromUDP(b)
			if err != nil {
				return
			}
			pc.WriteToUDP(b[:n], from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

func TestUDPFaults(t *testing.T) {
	p := NewUDP(t, udpEcho(t))
	c := dial(t, "udp", p.Addr())
	if err := roundTrip(c, "one", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, f := range []Faults{{Blackhole: true}, {DropAToB: true}, {DropBToA: true}} {
		p.Set(f)
		if _, err := c.Write([]byte("gone")); err != nil {
			t.Fatal(err)
		}
		expectSilence(t, c, 200*time.Millisecond)
	}
	p.Set(Faults{Delay: 100 * time.Millisecond})
	start := time.Now()
	if err := roundTrip(c, "late", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("UDP round trip took %v with 100ms each way", el)
	}
	p.Set(Faults{})
	if err := roundTrip(c, "two", 10*time.Second); err != nil {
		t.Fatalf("after restore: %v", err)
	}
}

// Reset forgets sessions: the target then sees the client from a new
// port. Many clients stay within the session bound.
func TestUDPSessions(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	p := NewUDP(t, pc.LocalAddr().String())
	c := dial(t, "udp", p.Addr())
	from := func() string {
		t.Helper()
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, a, err := pc.ReadFromUDP(make([]byte, 8))
		if err != nil {
			t.Fatal(err)
		}
		return a.String()
	}
	first := from()
	if again := from(); again != first {
		t.Fatalf("one client reached the target from %s and %s", first, again)
	}
	p.Reset()
	if after := from(); after == first {
		t.Fatal("the session survived Reset")
	}

	// Each new client's datagram must reach the target (UDP may drop
	// one under load: resend, a bounded number of times).
	buf := make([]byte, 8)
	for i := range MaxUDPSessions + 20 {
		cc, err := net.Dial("udp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		arrived := false
		for attempt := 0; attempt < 5 && !arrived; attempt++ {
			cc.Write([]byte("s"))
			pc.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, _, err := pc.ReadFromUDP(buf)
			arrived = err == nil
		}
		cc.Close()
		if !arrived {
			t.Fatalf("client %d: nothing reached the target in 5 tries", i)
		}
	}
	p.mu.Lock()
	n := len(p.sessions)
	p.mu.Unlock()
	if n != MaxUDPSessions {
		t.Fatalf("%d sessions after %d clients, want the bound %d", n, MaxUDPSessions+21, MaxUDPSessions)
	}
}
