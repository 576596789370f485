// Package transporttest is the conformance suite every core.Transport
// passes — the built-in tcp and quic transports, the external-plugin
// adapter, and third-party transports — plus the test material it needs: a
// throwaway peer CA that mints node certificates.
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Config{Network: "tcp", Open: func(t testing.TB, env plugins.TransportEnv) core.Transport {
//			tr, err := mytransport.Open(context.Background(), env)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return tr
//		}})
//	}
//
// Bench and BenchRTT measure a transport the same way for every
// implementation, so their numbers compare.
//
// Every test dials 127.0.0.1 only. Every wait is bounded (seconds, since
// CI machines are busy), and no sleep stands in for an assertion.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/transport/faultproxy"
)

// Config describes the transport under test.
type Config struct {
	// Network is the transport's wire: "tcp" or "udp". The fault tests put
	// a faultproxy of that network between the two ends.
	Network string
	// Open opens the transport for env. The suite fills env.NodeID,
	// env.Bind ("127.0.0.1:0"), env.PeerTLS (from its CA, unless the test
	// runs without TLS) and env.DataDir; the transport closes with the
	// test unless the test closes it first.
	Open func(t testing.TB, env plugins.TransportEnv) core.Transport
	// Plaintext: the transport also runs with env.PeerTLS nil (tcp).
	Plaintext bool
}

// wait bounds every blocking step of the suite. It is generous because a
// busy two-core CI runner with the race detector is slow; a correct
// transport answers in milliseconds.
const wait = 10 * time.Second

// Run runs the conformance suite: with TLS always, and again in plain text
// when cfg.Plaintext is set.
func Run(t *testing.T, cfg Config) {
	if cfg.Open == nil {
		t.Fatal("transporttest: Config.Open is nil")
	}
	if cfg.Network != "tcp" && cfg.Network != "udp" {
		t.Fatalf("transporttest: Config.Network is %q, want tcp or udp", cfg.Network)
	}
	ca := NewCA(t)
	t.Run("TLS", func(t *testing.T) { runAll(t, &suite{cfg: cfg, ca: ca, tls: true}) })
	if cfg.Plaintext {
		t.Run("Plaintext", func(t *testing.T) { runAll(t, &suite{cfg: cfg, ca: ca}) })
	}
}

func runAll(t *testing.T, s *suite) {
	for _, c := range []struct {
		name    string
		fn      func(*testing.T, *suite)
		tlsOnly bool
	}{
		{"RoundTrip", testRoundTrip, false},
		{"ConcurrentStreams", testConcurrentStreams, false},
		{"BothDirections", testBothDirections, false},
		{"HalfClose", testHalfClose, false},
		{"CloseSendsEverything", testCloseSendsEverything, false},
		{"Abort", testAbort, false},
		{"ReadDeadline", testReadDeadline, false},
		{"AcceptContext", testAcceptContext, false},
		{"DialRefused", testDialRefused, false},
		{"WrongNode", testWrongNode, true},
		{"ForeignCA", testForeignCA, true},
		{"PeerKilled", testPeerKilled, false},
		{"FaultBlackhole", testFaultBlackhole, false},
		{"FaultOneWayLoss", testFaultOneWayLoss, false},
		{"FaultReset", testFaultReset, false},
		{"Backpressure", testBackpressure, false},
		{"TransportClose", testTransportClose, false},
		{"LinkClose", testLinkClose, false},
	} {
		if c.tlsOnly && !s.tls {
			continue
		}
		t.Run(c.name, func(t *testing.T) { c.fn(t, s) })
	}
}

// suite is one run's setting: the transport, TLS or not, and the CA.
type suite struct {
	cfg Config
	ca  *CA
	tls bool
}

// open opens the transport as node id, listening on 127.0.0.1.
func (s *suite) open(t testing.TB, id string) core.Transport {
	t.Helper()
	var pt *plugins.PeerTLS
	if s.tls {
		pt = s.ca.Node(t, id)
	}
	return s.openWith(t, id, pt)
}

// openWith opens the transport as node id with the given peer material.
func (s *suite) openWith(t testing.TB, id string, pt *plugins.PeerTLS) core.Transport {
	t.Helper()
	env := plugins.TransportEnv{
		NodeID:  core.NodeID(id),
		Bind:    "127.0.0.1:0",
		PeerTLS: pt,
		Config:  map[string]string{},
		DataDir: t.TempDir(),
	}
	tr := s.cfg.Open(t, env)
	if tr == nil {
		t.Fatal("transporttest: Open returned a nil transport")
	}
	if tr.Addr() == nil {
		t.Fatal("transporttest: the transport has no listener although env.Bind is set")
	}
	t.Cleanup(func() { closeWithin(t, tr) })
	return tr
}

// closeWithin closes tr and fails the test if Close takes longer than
// wait: Close aborts streams, it does not wait for peers.
func closeWithin(t testing.TB, tr core.Transport) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- tr.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("Close: %v", err)
		}
	case <-time.After(wait):
		t.Errorf("Transport.Close did not return within %v", wait)
	}
}

// wantNode is the PeerNode a stream from/to id must report.
func (s *suite) wantNode(id string) core.NodeID {
	if s.tls {
		return core.NodeID(id)
	}
	return ""
}

func peerAt(id string, addr string) core.Peer { return core.Peer{ID: core.NodeID(id), Addr: addr} }

func peerOf(id string, tr core.Transport) core.Peer { return peerAt(id, tr.Addr().String()) }

// dial returns a link from tr to peer; it closes with the test.
func dial(t testing.TB, tr core.Transport, peer core.Peer) core.Link {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := tr.Dial(ctx, peer)
	if err != nil {
		t.Fatalf("Dial %s at %s: %v", peer.ID, peer.Addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// openStream opens a stream on l within wait.
func openStream(t testing.TB, l core.Link) core.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err != nil {
		t.Fatalf("OpenStream to %s: %v", l.Peer().ID, err)
	}
	return st
}

// accept accepts one stream within wait.
func accept(t testing.TB, tr core.Transport) core.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := tr.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	return st
}

const hello = "hello"

// pair opens a stream from a to b (node bID) and accepts it at b. The
// opener writes first, because a transport may announce a stream to the
// peer only with its first bytes (QUIC); the greeting is consumed.
func pair(t testing.TB, a, b core.Transport, bID string) (core.Stream, core.Stream) {
	t.Helper()
	sa := openStream(t, dial(t, a, peerOf(bID, b)))
	write(t, sa, []byte(hello))
	sb := accept(t, b)
	readExactly(t, sb, []byte(hello))
	return sa, sb
}

func write(t testing.TB, st core.Stream, p []byte) {
	t.Helper()
	st.SetWriteDeadline(time.Now().Add(wait))
	defer st.SetWriteDeadline(time.Time{})
	if n, err := st.Write(p); err != nil || n != len(p) {
		t.Fatalf("Write of %d bytes: n=%d, %v", len(p), n, err)
	}
}

// readExactly reads len(want) bytes within wait and compares them.
func readExactly(t testing.TB, st core.Stream, want []byte) {
	t.Helper()
	got, err := readN(st, len(want), wait)
	if err != nil {
		t.Fatalf("read %d bytes: got %d, %v", len(want), len(got), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from those written", len(want))
	}
}

func readN(st core.Stream, n int, d time.Duration) ([]byte, error) {
	st.SetReadDeadline(time.Now().Add(d))
	defer st.SetReadDeadline(time.Time{})
	buf := make([]byte, n)
	k, err := io.ReadFull(st, buf)
	return buf[:k], err
}

// readEnd reads within wait and returns the error that ends the stream;
// it fails the test on data or a timeout.
func readEnd(t testing.TB, st core.Stream) error {
	t.Helper()
	st.SetReadDeadline(time.Now().Add(wait))
	defer st.SetReadDeadline(time.Time{})
	n, err := st.Read(make([]byte, 64))
	if n > 0 {
		t.Fatalf("read %d unexpected bytes, want the end of the stream", n)
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("the stream did not end within %v: %v", wait, err)
	}
	return err
}

func wantEOF(t testing.TB, st core.Stream) {
	t.Helper()
	if err := readEnd(t, st); err != io.EOF {
		t.Fatalf("read at the end: %v, want io.EOF (an orderly end)", err)
	}
}

func wantAborted(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("%s: %v, want an error wrapping core.ErrStreamAborted", what, err)
	}
	if isTimeout(err) {
		t.Fatalf("%s: %v is a timeout; an abort is not", what, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// echo serves b: every accepted stream's bytes are written back, and the
// opener's orderly end is answered with one. It stops with the test.
func echo(t testing.TB, tr core.Transport) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var streams []core.Stream
	wg.Go(func() {
		for {
			st, err := tr.Accept(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			streams = append(streams, st)
			mu.Unlock()
			wg.Go(func() {
				if _, err := io.Copy(st, st); err != nil {
					st.Abort()
					return
				}
				st.Close()
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		mu.Lock()
		for _, st := range streams {
			st.Abort()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// roundTrip writes msg on an echoed stream and reads it back within d.
func roundTrip(st core.Stream, msg []byte, d time.Duration) error {
	st.SetWriteDeadline(time.Now().Add(d))
	_, err := st.Write(msg)
	st.SetWriteDeadline(time.Time{})
	if err != nil {
		return err
	}
	got, err := readN(st, len(msg), d)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("the echo differs from what was written")
	}
	return nil
}

// freeAddr is a 127.0.0.1 address of the network that nothing listens on
// (it was bound and released).
func freeAddr(t testing.TB, network string) string {
	t.Helper()
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		return pc.LocalAddr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proxy puts a faultproxy of the suite's network in front of target.
func (s *suite) proxy(t testing.TB, target net.Addr) *faultproxy.Proxy {
	t.Helper()
	if s.cfg.Network == "udp" {
		return faultproxy.NewUDP(t, target.String())
	}
	return faultproxy.NewTCP(t, target.String())
}
