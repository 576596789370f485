package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
	"github.com/fibrilgo/fibril/plugins/plugintest"
	"github.com/fibrilgo/fibril/transport/tcp"
)

var tcpwrapInfo = plugins.Info{Name: "tcpwrap", Version: "test"}

// tcpEnv is a plaintext tcp transport environment on 127.0.0.1.
func tcpEnv(t testing.TB, node string) plugins.TransportEnv {
	dir := t.TempDir()
	return plugins.TransportEnv{NodeID: core.NodeID(node), Bind: "127.0.0.1:0", Config: map[string]string{}, DataDir: dir}
}

// pair opens two tcp transports through the plugin protocol.
func pair(t testing.TB) (a, b core.Transport) {
	a = plugintest.Transport(t, tcp.Open, tcpwrapInfo, tcpEnv(t, "node-a"))
	b = plugintest.Transport(t, tcp.Open, tcpwrapInfo, tcpEnv(t, "node-b"))
	return a, b
}

// connect opens a stream from a to b and accepts it on b.
func connect(t testing.TB, ctx context.Context, a, b core.Transport, bID core.NodeID) (out, in core.Stream) {
	t.Helper()
	l, err := a.Dial(ctx, core.Peer{ID: bID, Addr: b.Addr().String()})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	out, err = l.OpenStream(ctx)
	if err != nil {
		t.Fatalf("OpenStream: %v", err)
	}
	t.Cleanup(func() { _ = out.Close() })
	// tcp may connect lazily: the first bytes make the peer see it.
	if _, err := out.Write([]byte("hi")); err != nil {
		t.Fatalf("first Write: %v", err)
	}
	in, err = b.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { _ = in.Close() })
	buf := make([]byte, 2)
	_ = in.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("first Read: %q, %v", buf, err)
	}
	_ = in.SetReadDeadline(time.Time{})
	return out, in
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// readAll reads s to its end under a deadline.
func readAll(t testing.TB, s core.Stream) ([]byte, error) {
	_ = s.SetReadDeadline(time.Now().Add(60 * time.Second))
	return io.ReadAll(s)
}

// Bytes both ways, then the ends: CloseWrite reaches the other side as
// io.EOF after every byte, Close too.
func TestTransportOrderlyThroughProtocol(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	out, in := connect(t, ctx, a, b, "node-b")
	if in.PeerNode() != "" || out.RemoteAddr() == nil || in.LocalAddr() == nil {
		t.Fatalf("plaintext stream: peer %q, addrs %v %v", in.PeerNode(), out.RemoteAddr(), in.LocalAddr())
	}
	if in.LocalAddr().String() != b.Addr().String() {
		t.Errorf("accepted stream's local address %v, want the listener's %v", in.LocalAddr(), b.Addr())
	}
	// 3 MiB each way at once: more than any buffer on the path.
	big := bytes.Repeat([]byte("fibril-"), 3<<20/7)
	errs := make(chan error, 2)
	go func() {
		_, err := out.Write(big)
		if err == nil {
			err = out.CloseWrite()
		}
		errs <- err
	}()
	go func() {
		_, err := in.Write(big)
		if err == nil {
			err = in.CloseWrite()
		}
		errs <- err
	}()
	gotIn, err := readAll(t, in)
	if err != nil || !bytes.Equal(gotIn, big) {
		t.Fatalf("accepting side read %d bytes, %v; want %d and EOF", len(gotIn), err, len(big))
	}
	gotOut, err := readAll(t, out)
	if err != nil || sha256.Sum256(gotOut) != sha256.Sum256(big) {
		t.Fatalf("opening side read %d bytes, %v; want %d and EOF", len(gotOut), err, len(big))
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Both directions ended: Close is orderly on both sides.
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("x")); err == nil {
		t.Fatal("Write after CloseWrite succeeded")
	}
	st, err := a.(host.TransportStatser).TransportStats(ctx)
	if err != nil || st.OpensOK != 1 || st.BytesOut < uint64(len(big)) || st.BytesIn < uint64(len(big)) {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

// Abort on either side reaches the other as ErrStreamAborted, never EOF.
func TestTransportAbortThroughProtocol(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	for _, dir := range []string{"opener aborts", "acceptor aborts"} {
		out, in := connect(t, ctx, a, b, "node-b")
		aborter, reader := out, in
		if dir == "acceptor aborts" {
			aborter, reader = in, out
		}
		if _, err := aborter.Write([]byte("")); err != nil {
			t.Fatal(err)
		}
		if err := aborter.Abort(); err != nil {
			t.Fatal(err)
		}
		if _, err := aborter.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
			t.Errorf("%s: Read on the aborted side: %v, want ErrStreamAborted", dir, err)
		}
		_, err := readAll(t, reader)
		if !errors.Is(err, core.ErrStreamAborted) {
			t.Errorf("%s: peer's Read ended with %v, want ErrStreamAborted", dir, err)
		}
	}
	testkit.Eventually(t, 30*time.Second, "the aborts counted", func() bool {
		st, err := b.(host.TransportStatser).TransportStats(ctx)
		return err == nil && st.Aborts >= 2 && st.StreamsOpenIn == 0
	})
}

// A deadline is a timeout; the stream stays usable.
func TestTransportDeadlineThroughProtocol(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	out, in := connect(t, ctx, a, b, "node-b")
	_ = in.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := in.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Read past its deadline: %v, want a timeout", err)
	}
	if _, err := out.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	_ = in.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 10)
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("Read after the timeout: %q, %v", buf, err)
	}
}

// Nothing listens: OpenStream fails with ErrPeerRefused, through gRPC.
func TestTransportRefusedThroughProtocol(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a := plugintest.Transport(t, tcp.Open, tcpwrapInfo, tcpEnv(t, "node-a"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	l, err := a.Dial(ctx, core.Peer{ID: "node-x", Addr: dead})
	if err != nil {
		if !errors.Is(err, core.ErrPeerRefused) {
			t.Fatalf("Dial: %v, want ErrPeerRefused", err)
		}
		return
	}
	defer l.Close()
	if l.Peer().Addr != dead {
		t.Fatalf("link peer %+v", l.Peer())
	}
	if _, err := l.OpenStream(ctx); !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream to a closed port: %v, want ErrPeerRefused", err)
	}
	st, err := a.(host.TransportStatser).TransportStats(ctx)
	if err != nil || st.OpensRefused != 1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

// Close: a blocked Accept returns ErrClosed, open streams abort, later
// calls fail.
func TestTransportCloseThroughProtocol(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	out, in := connect(t, ctx, a, b, "node-b")
	accepted := make(chan error, 1)
	go func() {
		_, err := b.Accept(ctx)
		accepted <- err
	}()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, core.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Accept still blocked after Close")
	}
	if _, err := in.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Read of a stream of the closed transport: %v", err)
	}
	if _, err := readAll(t, out); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("the peer's Read: %v, want ErrStreamAborted", err)
	}
	if _, err := b.Dial(ctx, core.Peer{ID: "node-a", Addr: a.Addr().String()}); !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("Dial after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Link.Close aborts the link's streams.
func TestTransportLinkCloseThroughProtocol(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	l, err := a.Dial(ctx, core.Peer{ID: "node-b", Addr: b.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Read after Link.Close: %v", err)
	}
	if _, err := l.OpenStream(ctx); !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream on a closed link: %v", err)
	}
}

// An Abort by a host whose peer does not read: the plugin is stuck
// writing the host's bytes to the transport's stream, and must still
// notice the host went away and abort the stream, so the peer sees the
// abort rather than a stream that stays open for ever.
func TestTransportAbortWhilePeerNotReading(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	out, in := connect(t, ctx, a, b, "node-b")
	// Fill every buffer on the way: the host's write times out once the
	// plugin is blocked on the peer.
	chunk := make([]byte, 256<<10)
	for i := 0; i < 256; i++ { // at most 64 MiB
		_ = out.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := out.Write(chunk); err != nil {
			if !isTimeoutErr(err) {
				t.Fatalf("Write: %v", err)
			}
			break
		}
	}
	if err := out.Abort(); err != nil {
		t.Fatal(err)
	}
	// The peer still reads nothing: the plugin must end the stream on its
	// own (reading lets the stuck write go on, which would hide the bug).
	testkit.Eventually(t, 30*time.Second, "the plugin to abort the stream", func() bool {
		st, err := a.(host.TransportStatser).TransportStats(ctx)
		return err == nil && st.StreamsOpenOut == 0 && st.Aborts >= 1
	})
	_ = in.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 1<<20)
	var err error
	for i := 0; i < 1000 && err == nil; i++ { // bounded: at most ~1 GiB read
		_, err = in.Read(buf)
	}
	if !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("the peer's Read ended with %v, want ErrStreamAborted", err)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close while a Write is blocked on a peer that does not read cannot end
// the stream in order: it returns promptly, resets the stream, and the
// blocked Write returns.
func TestTransportCloseDuringBlockedWrite(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := pair(t)
	out, in := connect(t, ctx, a, b, "node-b")
	wrote := make(chan error, 1)
	go func() {
		_, err := out.Write(make([]byte, 64<<20)) // more than every buffer on the way
		wrote <- err
	}()
	testkit.Eventually(t, 30*time.Second, "bytes reaching the plugin", func() bool {
		st, err := a.(host.TransportStatser).TransportStats(ctx)
		return err == nil && st.BytesOut > 1<<20 // past the "hi" of connect: the Write runs
	})
	closed := make(chan error, 1)
	go func() { closed <- out.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked behind a Write")
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the blocked Write succeeded after Close")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked Write did not return after Close")
	}
	_ = in.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 1<<20)
	var err error
	for i := 0; i < 1000 && err == nil; i++ { // bounded: at most ~1 GiB read
		_, err = in.Read(buf)
	}
	if !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("the peer's Read ended with %v, want ErrStreamAborted", err)
	}
}
