package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/metricstest"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/transport/transporttest"
)

func openT(t testing.TB, env plugins.TransportEnv) core.Transport {
	t.Helper()
	tr, err := Open(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

var conformance = transporttest.Config{Network: "tcp", Open: openT, Plaintext: true}

func TestConformance(t *testing.T) { transporttest.Run(t, conformance) }

func TestRegistered(t *testing.T) {
	if _, ok := plugins.BuiltinTransport("tcp"); !ok {
		t.Fatal(`"tcp" is not registered as a built-in transport`)
	}
}

// Without a bind address there is no listener: Accept waits for Close and
// then returns ErrClosed.
func TestNoListener(t *testing.T) {
	tr := openT(t, plugins.TransportEnv{NodeID: "a"})
	if tr.Addr() != nil {
		t.Fatalf("Addr = %v without a bind address", tr.Addr())
	}
	errc := make(chan error, 1)
	go func() { _, err := tr.Accept(context.Background()); errc <- err }()
	select {
	case err := <-errc:
		t.Fatalf("Accept returned %v before Close", err)
	case <-time.After(100 * time.Millisecond):
	}
	tr.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, core.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

func TestOpenErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Open(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: ln.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "broker.peer_listener.bind") {
		t.Fatalf("Open on a taken port: %v, want an error naming broker.peer_listener.bind", err)
	}
	_, err = Open(context.Background(), plugins.TransportEnv{NodeID: "a", PeerTLS: &plugins.PeerTLS{CAFile: "/nonexistent/ca.pem", CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}})
	if err == nil {
		t.Fatal("Open with missing TLS files succeeded")
	}
}

// A peer that connects and sends nothing (or garbage) does not hold up
// the listener: handshakes run off the accept loop.
func TestSlowPeerDoesNotBlockAccept(t *testing.T) {
	ca := transporttest.NewCA(t)
	b := openT(t, plugins.TransportEnv{NodeID: "b", Bind: "127.0.0.1:0", PeerTLS: ca.Node(t, "b")})
	defer b.Close()
	a := openT(t, plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0", PeerTLS: ca.Node(t, "a")})
	defer a.Close()
	for range 3 {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	g, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.Write([]byte("GET / HTTP/1.0\r\n\r\n"))

	l, err := a.Dial(context.Background(), core.Peer{ID: "b", Addr: b.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err != nil {
		t.Fatalf("OpenStream while silent peers hold connections: %v", err)
	}
	defer st.Close()
	st.Write([]byte("x"))
	sb, err := b.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept while silent peers hold connections: %v", err)
	}
	sb.Close()
	// The garbage peer is dropped (its handshake fails at once).
	g.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(g); err != nil && errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
}

// Refusals say why.
func TestRefusalMessages(t *testing.T) {
	ca := transporttest.NewCA(t)
	a := openT(t, plugins.TransportEnv{NodeID: "a", PeerTLS: ca.Node(t, "a")})
	defer a.Close()
	c := openT(t, plugins.TransportEnv{NodeID: "c", Bind: "127.0.0.1:0", PeerTLS: ca.Node(t, "c")})
	defer c.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	free := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		peer core.Peer
		want string
	}{
		{core.Peer{ID: "b", Addr: free}, "refused"},
		{core.Peer{ID: "b", Addr: c.Addr().String()}, `names node "c", expected "b"`},
	} {
		l, _ := a.Dial(context.Background(), tc.peer)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := l.OpenStream(ctx)
		cancel()
		l.Close()
		if !errors.Is(err, core.ErrPeerRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenStream to %v: %v, want ErrPeerRefused saying %q", tc.peer, err, tc.want)
		}
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := openT(t, plugins.TransportEnv{NodeID: "a", Registerer: reg})
	defer a.Close()
	b := openT(t, plugins.TransportEnv{NodeID: "b", Bind: "127.0.0.1:0", Registerer: reg}) // same registry: no collision
	defer b.Close()
	l, _ := a.Dial(context.Background(), core.Peer{ID: "b", Addr: b.Addr().String()})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	free := ln.Addr().String()
	ln.Close()
	bad, _ := a.Dial(ctx, core.Peer{ID: "z", Addr: free})
	if _, err := bad.OpenStream(ctx); !errors.Is(err, core.ErrPeerRefused) || !errors.Is(err, core.ErrPeerNotListening) {
		t.Fatalf("OpenStream to a port nothing listens on: %v, want ErrPeerRefused and ErrPeerNotListening", err)
	}
	check := func(what, name, label, value string, want float64) {
		t.Helper()
		labels := map[string]string{"transport": transportLabel}
		if label != "" {
			labels[label] = value
		}
		if got := metricstest.Value(t, reg, name, labels); got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("streams_open{out}", "fibril_transport_streams_open", "direction", "out", 1)
	check("streams_open{in}", "fibril_transport_streams_open", "direction", "in", 1)
	check("opens_total{ok}", "fibril_transport_stream_opens_total", "result", "ok", 1)
	check("opens_total{refused}", "fibril_transport_stream_opens_total", "result", "refused", 1)
	st.Abort()
	sb.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := sb.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Read after the peer's Abort: %v", err)
	}
	sb.Close()
	check("streams_open{out}", "fibril_transport_streams_open", "direction", "out", 0)
	check("streams_open{in}", "fibril_transport_streams_open", "direction", "in", 0)
	check("streams_aborted_total", "fibril_transport_streams_aborted_total", "", "", 2) // one per side
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "fibril_transport_") {
			n += len(mf.GetMetric())
		}
	}
	if n != 5 {
		t.Errorf("gathered %d transport series, want 5 (open in/out, opens ok/refused, aborted)", n)
	}
}

// Benchmarks: pipelined 1 KiB frames one way, and 1 KiB request/response
// round trips, over 1 and 256 streams; RawTCP_Echo is the floor, a plain
// loopback net.Conn doing the same round trip.

func BenchmarkTCP_Throughput_1streams(b *testing.B)   { transporttest.Bench(b, conformance, 1) }
func BenchmarkTCP_Throughput_256streams(b *testing.B) { transporttest.Bench(b, conformance, 256) }
func BenchmarkTCP_RTT_1streams(b *testing.B)          { transporttest.BenchRTT(b, conformance, 1) }
func BenchmarkTCP_RTT_256streams(b *testing.B)        { transporttest.BenchRTT(b, conformance, 256) }

func BenchmarkRawTCP_Echo(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, transporttest.FrameSize)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	req, resp := make([]byte, transporttest.FrameSize), make([]byte, transporttest.FrameSize)
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(transporttest.FrameSize)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	transporttest.ReportLatency(b, lat)
}

// Close is orderly only if the pending bytes leave in time: with a peer
// that does not read, Close waits no longer than the write deadline, then
// aborts, says so, and the peer sees the abort after the bytes that made it.
func TestCloseAbortsWhenPeerDoesNotRead(t *testing.T) {
	b := openT(t, plugins.TransportEnv{NodeID: "b", Bind: "127.0.0.1:0"})
	defer b.Close()
	a := openT(t, plugins.TransportEnv{NodeID: "a"})
	defer a.Close()
	l, _ := a.Dial(context.Background(), core.Peer{ID: "b", Addr: b.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		if i == 2000 { // 128 MiB
			t.Fatal("Writes never blocked on a peer that does not read")
		}
		st.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := st.Write(chunk); err != nil {
			break
		}
	}
	st.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	start := time.Now()
	err = st.Close()
	if !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Close with bytes stuck behind a stalled peer: %v, want an abort", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Close took %v with a 300ms write deadline", el)
	}
	sb.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, sb)
	if !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("the peer's read after the aborted Close: %v, want ErrStreamAborted", err)
	}
}

// BenchmarkRawTCP_Throughput is the one-way limit: 1 KiB writes on a plain
// loopback net.Conn, read in bulk, no TLS and no coalescing.
func BenchmarkRawTCP_Throughput(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- 0
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		done <- n
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	frame := make([]byte, transporttest.FrameSize)
	b.SetBytes(transporttest.FrameSize)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	if n := <-done; n != int64(b.N)*transporttest.FrameSize {
		b.Fatalf("received %d bytes, want %d", n, int64(b.N)*transporttest.FrameSize)
	}
}
