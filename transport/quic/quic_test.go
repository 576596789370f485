package quic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/metricstest"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/plugins"
)

// Rule: a stream carries bytes both ways, ends orderly with FIN (io.EOF
// after the bytes), and PeerNode is the node id of the peer's verified
// certificate on both ends (core.Stream: a peer is the node its certificate names).
func TestRoundTrip(t *testing.T) {
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)

	out := openStream(t, a, b)
	in := accept(t, b)
	if got := in.PeerNode(); got != "a" {
		t.Fatalf("accepted PeerNode = %q, want a", got)
	}
	if got := out.PeerNode(); got != "b" {
		t.Fatalf("opened PeerNode = %q, want b", got)
	}
	if _, err := out.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := out.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, in, 10*time.Second); string(got) != "ping" {
		t.Fatalf("read %q", got)
	}
	if _, err := in.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, out, 10*time.Second); string(got) != "pong" {
		t.Fatalf("read %q", got)
	}
	_ = out.Close()

	// net.Conn addresses and the TLS state come from the connection.
	if in.LocalAddr().String() != b.tr.Addr().String() || out.RemoteAddr().String() != b.tr.Addr().String() {
		t.Fatalf("addresses: in local %v, out remote %v, b %v", in.LocalAddr(), out.RemoteAddr(), b.tr.Addr())
	}
	cs := in.(core.TLSStater).ConnectionState()
	if cs.NegotiatedProtocol != ALPN || len(cs.PeerCertificates) == 0 {
		t.Fatalf("TLS state: alpn %q, %d peer certs", cs.NegotiatedProtocol, len(cs.PeerCertificates))
	}
}

// Rule: the transport registers itself as "quic" and the factory binds
// before it returns.
func TestRegistered(t *testing.T) {
	f, ok := plugins.BuiltinTransport("quic")
	if !ok {
		t.Fatal("quic is not registered")
	}
	ca := newTestCA(t)
	tr, err := f(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0", PeerTLS: ca.Node(t, "a")})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if ua, ok := tr.Addr().(*net.UDPAddr); !ok || ua.Port == 0 {
		t.Fatalf("Addr = %v", tr.Addr())
	}
}

// Rule: streams are independent; many at once on one connection each
// carry their own bytes.
func TestManyConcurrentStreams(t *testing.T) {
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)
	const streams, size = 64, 32 << 10

	// b echoes every stream.
	var echo sync.WaitGroup
	echo.Add(1)
	go func() {
		defer echo.Done()
		for i := 0; i < streams; i++ {
			s, err := b.tr.Accept(ctxT(t, 30*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			echo.Add(1)
			go func() {
				defer echo.Done()
				defer s.Close()
				_ = s.SetDeadline(time.Now().Add(60 * time.Second))
				if _, err := io.Copy(s, s); err != nil {
					t.Error("echo:", err)
				}
			}()
		}
	}()
	l, err := a.tr.Dial(context.Background(), b.peer())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := l.OpenStream(ctxT(t, 30*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			want := bytes.Repeat([]byte{byte(i)}, size)
			go func() {
				_, _ = s.Write(want)
				_ = s.CloseWrite()
			}()
			_ = s.SetReadDeadline(time.Now().Add(60 * time.Second))
			got, err := io.ReadAll(s)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("stream %d: %d bytes, err %v", i, len(got), err)
			}
		}()
	}
	wg.Wait()
	echo.Wait()
	if n := len(a.tr.liveConns("b")); n != 1 {
		t.Fatalf("a has %d connections to b, want 1", n)
	}
}

// Rule: one QUIC connection per peer pair; an inbound connection is
// usable as the link back, so streams in both directions share it.
func TestBothDirectionsOneConnection(t *testing.T) {
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)

	ab := openStream(t, a, b)
	abIn := accept(t, b)
	ba := openStream(t, b, a)
	baIn := accept(t, a)
	for _, s := range []core.Stream{ab, abIn, ba, baIn} {
		if d := streamDialer(s); d != "a" {
			t.Fatalf("stream on a connection dialed by %q, want a (the only one)", d)
		}
	}
	if baIn.PeerNode() != "b" || abIn.PeerNode() != "a" {
		t.Fatalf("PeerNode: %q %q", baIn.PeerNode(), abIn.PeerNode())
	}
	roundTrip(t, ab, abIn)
	roundTrip(t, ba, baIn)
	if n, m := len(a.tr.liveConns("b")), len(b.tr.liveConns("a")); n != 1 || m != 1 {
		t.Fatalf("connections: a→b %d, b→a %d; want 1 each", n, m)
	}
}

// roundTrip sends a message each way between the two ends of a stream.
func roundTrip(t testing.TB, x, y core.Stream) {
	t.Helper()
	for _, p := range [][2]core.Stream{{x, y}, {y, x}} {
		msg := []byte("hello " + string(p[0].PeerNode()))
		if _, err := p[0].Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		_ = p[1].SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(p[1], got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("got %q want %q", got, msg)
		}
	}
}

// Rule: the dialer checks the server's certificate names the node it
// dialed; a mismatch is ErrPeerRefused, saying so.
func TestWrongNodeRefused(t *testing.T) {
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)
	l, err := a.tr.Dial(context.Background(), core.Peer{ID: "c", Addr: b.tr.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.OpenStream(ctxT(t, 10*time.Second))
	if !errors.Is(err, core.ErrPeerRefused) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("err = %v, want ErrPeerRefused naming the expected node", err)
	}
	t.Log(err)
	if _, err := a.tr.Dial(context.Background(), core.Peer{Addr: b.tr.Addr().String()}); !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("dial without id: %v", err)
	}
}

// Rule: both ends verify the other's chain against the peer CA: a node
// with a certificate from another CA can neither dial in nor be dialed.
func TestOtherCARefused(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	x := openNode(t, other, "x", "", nil)
	for _, tc := range []struct {
		from, to *node
	}{{a, x}, {x, a}} {
		l, err := tc.from.tr.Dial(context.Background(), tc.to.peer())
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.OpenStream(ctxT(t, 10*time.Second))
		if !errors.Is(err, core.ErrPeerRefused) {
			t.Fatalf("%s → %s: err = %v, want ErrPeerRefused", tc.from.id, tc.to.id, err)
		}
		t.Log(err)
	}
	// The listener checks the client's chain too: y trusts both CAs (so
	// it accepts a's server certificate) but presents a certificate of
	// the other CA, which a refuses. In TLS 1.3 the client finishes its
	// handshake first; the stream handshake's ack is what makes the
	// refusal reach OpenStream.
	ytls := other.Node(t, "y")
	bundle := filepath.Join(t.TempDir(), "both-cas.pem")
	var pem []byte
	for _, f := range []string{a.tls.CAFile, ytls.CAFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	if err := os.WriteFile(bundle, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	y := &node{id: "y", tls: &plugins.PeerTLS{CAFile: bundle, CertFile: ytls.CertFile, KeyFile: ytls.KeyFile}}
	y.tr = reopen(t, y, "")
	l, err := y.tr.Dial(context.Background(), a.peer())
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.OpenStream(ctxT(t, 10*time.Second))
	if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("client with a foreign certificate: err = %v, want ErrPeerRefused", err)
	}
	t.Log(err)
	// Nothing reached the application on either side.
	for _, n := range []*node{a, x} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if s, err := n.tr.Accept(ctx); err == nil {
			t.Fatalf("%s accepted a stream from %s", n.id, s.PeerNode())
		}
		cancel()
	}
}

// Rule: QUIC needs peer TLS; starting without it is an error naming the
// keys to set. Parse errors name the key.
func TestStartupErrors(t *testing.T) {
	_, err := Open(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0"})
	for _, k := range []string{"tls.inter_broker", "tls.peer_ca_path", "tls.cert_path", "tls.key_path", "tls.auto_self_signed"} {
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Fatalf("no PeerTLS: err = %v, want it to name %s", err, k)
		}
	}
	ca := newTestCA(t)
	tls := ca.Node(t, "a")
	for _, key := range []string{KeyMaxIncomingStreams, KeyStreamReceiveWindow, KeyMaxIdleTimeoutMS} {
		for _, v := range []string{"abc", "0", "99999999999999"} {
			_, err := Open(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0", PeerTLS: tls, Config: map[string]string{key: v}})
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("%s = %q: err = %v, want it to name the key", key, v, err)
			}
		}
	}
	if _, err := Open(context.Background(), plugins.TransportEnv{NodeID: "a", PeerTLS: tls}); err == nil || !strings.Contains(err.Error(), "broker.peer_listener.bind") {
		t.Fatalf("no bind: err = %v", err)
	}
}

// Rule (one connection per broker pair, chosen alike on both ends): when
// two brokers dial each other at once, the connection dialed by the
// smaller node id is kept; both ends
// end up with that one connection and streams work both ways.
func TestSimultaneousDial(t *testing.T) {
	ca := newTestCA(t)
	for round := 0; round < 5; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			a := openNode(t, ca, "a", "", nil)
			b := openNode(t, ca, "b", "", nil)
			la, err := a.tr.Dial(context.Background(), b.peer())
			if err != nil {
				t.Fatal(err)
			}
			lb, err := b.tr.Dial(context.Background(), a.peer())
			if err != nil {
				t.Fatal(err)
			}
			// Hold both handshakes until both dials are under way, so
			// each side really dials (a bounded wait: a dial that is not
			// joined within 5 s proceeds alone and the check below fails).
			var dialing sync.WaitGroup
			dialing.Add(2)
			both := make(chan struct{})
			go func() { dialing.Wait(); close(both) }()
			hook := func(core.NodeID) {
				dialing.Done()
				select {
				case <-both:
				case <-time.After(5 * time.Second):
				}
			}
			a.tr.dialHook, b.tr.dialHook = hook, hook
			var (
				wg     sync.WaitGroup
				start  = make(chan struct{})
				sa, sb core.Stream
				ea, eb error
			)
			wg.Add(2)
			go func() { defer wg.Done(); <-start; sa, ea = la.OpenStream(ctxT(t, 10*time.Second)) }()
			go func() { defer wg.Done(); <-start; sb, eb = lb.OpenStream(ctxT(t, 10*time.Second)) }()
			close(start)
			wg.Wait()
			if ea != nil || eb != nil {
				t.Fatalf("open: %v, %v", ea, eb)
			}
			// Both first streams work, whichever connection they took.
			roundTrip(t, sa, accept(t, b))
			roundTrip(t, sb, accept(t, a))
			_ = sa.Close()
			_ = sb.Close()

			// Both ends settle on the connection a dialed.
			settled := func(n *node, peer core.NodeID) bool {
				cs := n.tr.liveConns(peer)
				return len(cs) == 1 && cs[0].Dialer == "a"
			}
			testkit.Eventually(t, 15*time.Second, "one connection, dialed by a, on both ends", func() bool {
				return settled(a, "b") && settled(b, "a")
			})
			// Each side completed its own dial (the loser's connection may
			// close before the other end registers it, so count dials).
			if a.tr.dialsMadeCount() != 1 || b.tr.dialsMadeCount() != 1 {
				t.Fatalf("connections dialed: a %d, b %d; want 1 each (a simultaneous dial)", a.tr.dialsMadeCount(), b.tr.dialsMadeCount())
			}
			// New streams both ways use it.
			s1, s2 := openStream(t, a, b), openStream(t, b, a)
			in1, in2 := accept(t, b), accept(t, a)
			for _, s := range []core.Stream{s1, s2, in1, in2} {
				if d := streamDialer(s); d != "a" {
					t.Fatalf("new stream on a connection dialed by %q", d)
				}
			}
			roundTrip(t, s1, in1)
			roundTrip(t, s2, in2)
		})
	}
}

// Rule: a link whose connection died re-establishes it on the next
// OpenStream (core.Link.OpenStream) — after an orderly shutdown of the
// peer and after a crash (no CONNECTION_CLOSE; the restarted peer's
// stateless reset, keyed from its stable node key, ends the old
// connection at once).
func TestReconnectAfterPeerRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			ca := newTestCA(t)
			// A long idle timeout: reconnecting must not wait for it.
			cfg := map[string]string{KeyMaxIdleTimeoutMS: "60000"}
			a := openNode(t, ca, "a", "", cfg)
			b := openNode(t, ca, "b", "", cfg)
			addr := b.tr.Addr().String()
			l, err := a.tr.Dial(context.Background(), b.peer())
			if err != nil {
				t.Fatal(err)
			}
			s, err := l.OpenStream(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, s, accept(t, b))

			if crash {
				b.tr.crash()
			} else {
				_ = b.tr.Close()
			}
			b.tr = reopen(t, b, addr)

			start := time.Now()
			s2, err := l.OpenStream(ctxT(t, 20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, s2, accept(t, b))
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("reconnect took %s", d)
			}
			t.Logf("reconnected in %s", time.Since(start))
			// The old stream is dead.
			_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := s.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
				t.Fatalf("old stream read: %v", err)
			}
		})
	}
}

// Rule (core.Stream's orderly close vs abort, core/transport.go): Close ends
// orderly (the peer reads everything, then io.EOF); Abort resets (the
// peer's Read fails with ErrStreamAborted); after a local Close or Abort
// Read fails with ErrStreamAborted; a passed deadline is a timeout and
// the stream stays usable.
func TestCloseAbortDeadline(t *testing.T) {
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)

	// Orderly.
	s := openStream(t, a, b)
	in := accept(t, b)
	payload := bytes.Repeat([]byte("x"), 200<<10)
	go func() { _, _ = s.Write(payload); _ = s.Close() }()
	if got := readAll(t, in, 20*time.Second); !bytes.Equal(got, payload) {
		t.Fatalf("orderly: read %d bytes", len(got))
	}
	_ = in.Close()

	// Deadline: a timeout, then the stream still works.
	s = openStream(t, a, b)
	in = accept(t, b)
	_ = in.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := in.Read(make([]byte, 1))
	if !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("deadline: err = %v", err)
	}
	_ = in.SetReadDeadline(time.Time{})
	roundTrip(t, s, in)

	// Abort.
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(in)
	if !errors.Is(err, core.ErrStreamAborted) || isTimeout(err) {
		t.Fatalf("peer abort: err = %v", err)
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("read after local Abort: %v", err)
	}
	_ = in.Close()

	// Local Close, then Read and Write.
	s = openStream(t, a, b)
	in = accept(t, b)
	_ = s.Close()
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after local Close: %v", err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
	if got := readAll(t, in, 10*time.Second); len(got) != 0 {
		t.Fatalf("read %q after an empty orderly close", got)
	}
	_ = in.Close()

	// Write after CloseWrite fails without being an abort.
	s = openStream(t, a, b)
	_ = accept(t, b)
	_ = s.CloseWrite()
	if _, err := s.Write([]byte("x")); err == nil || errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("write after CloseWrite: %v", err)
	}
	_ = s.Close()
}

// Rule (core.Transport): Close aborts open streams on both ends, a
// blocked Accept returns ErrClosed, OpenStream on an old link is refused.
func TestTransportClose(t *testing.T) {
	base := numGoroutine()
	func() {
		ca := newTestCA(t)
		a := openNode(t, ca, "a", "", nil)
		b := openNode(t, ca, "b", "", nil)
		s := openStream(t, a, b)
		in := accept(t, b)
		roundTrip(t, s, in)

		acceptErr := make(chan error, 1)
		go func() { _, err := a.tr.Accept(context.Background()); acceptErr <- err }()
		readErr := make(chan error, 1)
		go func() { _, err := in.Read(make([]byte, 1)); readErr <- err }()

		l, _ := a.tr.Dial(context.Background(), b.peer())
		_ = a.tr.Close()
		select {
		case err := <-acceptErr:
			if !errors.Is(err, core.ErrClosed) {
				t.Fatalf("Accept after Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Accept did not return after Close")
		}
		select {
		case err := <-readErr:
			if !errors.Is(err, core.ErrStreamAborted) {
				t.Fatalf("peer read after Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the peer's stream did not abort")
		}
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
			t.Fatalf("local read after Close: %v", err)
		}
		if _, err := l.OpenStream(ctxT(t, 5*time.Second)); !errors.Is(err, core.ErrPeerRefused) {
			t.Fatalf("OpenStream after Close: %v", err)
		}
		if _, err := a.tr.Accept(context.Background()); !errors.Is(err, core.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
		_ = b.tr.Close()
	}()
	waitGoroutines(t, base)
}

// Rule (core.Link): Link.Close aborts the streams opened on it and
// leaves the connection to other links.
func TestLinkClose(t *testing.T) {
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)
	l1, _ := a.tr.Dial(context.Background(), b.peer())
	l2, _ := a.tr.Dial(context.Background(), b.peer())
	s1, err := l1.OpenStream(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	in1 := accept(t, b)
	s2, err := l2.OpenStream(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	in2 := accept(t, b)
	_ = l1.Close()
	_ = in1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := in1.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("stream of the closed link: %v", err)
	}
	if _, err := l1.OpenStream(ctxT(t, 5*time.Second)); !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream on a closed link: %v", err)
	}
	roundTrip(t, s2, in2)
	_ = s1
}

// Rule: the metrics exist per transport instance, with the transport
// label, and count opens, streams and connections.
func TestMetrics(t *testing.T) {
	ca := newTestCA(t)
	reg := prometheus.NewRegistry()
	n := &node{id: "a", tls: ca.Node(t, "a")}
	tr, err := open(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0", PeerTLS: n.tls, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	n.tr = tr
	defer tr.Close()
	b := openNode(t, ca, "b", "", nil)
	s := openStream(t, n, b)
	_ = accept(t, b)
	if v := gauge(t, reg, "fibril_transport_stream_opens_total", "result", "ok"); v != 1 {
		t.Fatalf("opens ok = %v", v)
	}
	if v := gauge(t, reg, "fibril_transport_streams_open", "direction", "out"); v != 1 {
		t.Fatalf("streams open out = %v", v)
	}
	if v := gauge(t, reg, "fibril_transport_quic_connections_open", "", ""); v != 1 {
		t.Fatalf("connections = %v", v)
	}
	_ = s.Abort()
	if v := gauge(t, reg, "fibril_transport_streams_aborted_total", "", ""); v != 1 {
		t.Fatalf("aborted = %v", v)
	}
	if v := gauge(t, reg, "fibril_transport_streams_open", "direction", "out"); v != 0 {
		t.Fatalf("streams open out after abort = %v", v)
	}
	l, _ := tr.Dial(context.Background(), core.Peer{ID: "zz", Addr: b.tr.Addr().String()})
	_, _ = l.OpenStream(ctxT(t, 10*time.Second))
	if v := gauge(t, reg, "fibril_transport_stream_opens_total", "result", "refused"); v != 1 {
		t.Fatalf("opens refused = %v", v)
	}
	if v := gauge(t, reg, "fibril_transport_quic_streams_blocked_total", "", ""); v != 0 {
		t.Fatalf("blocked = %v", v)
	}
	_ = tr.Close()
	// A new instance with the same registerer adopts the series.
	tr2, err := open(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0", PeerTLS: n.tls, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	_ = tr2.Close()
}

// gauge reads one sample of the quic transport's series from reg.
func gauge(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	labels := map[string]string{}
	if label != "" {
		labels[label] = value
	}
	if strings.HasPrefix(name, "fibril_transport_stream") {
		labels["transport"] = "quic"
	}
	return metricstest.Value(t, reg, name, labels)
}
