package transporttest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// Stream: "one bidirectional byte stream between two brokers"; PeerNode is
// the node the peer's verified certificate names ("" without TLS), and a
// TLS stream reports its handshake (TLSStater).
func testRoundTrip(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	sa, sb := pair(t, a, b, "b")
	if got, want := sb.PeerNode(), s.wantNode("a"); got != want {
		t.Errorf("accepted stream: PeerNode = %q, want %q (the dialer)", got, want)
	}
	if got, want := sa.PeerNode(), s.wantNode("b"); got != want {
		t.Errorf("opened stream: PeerNode = %q, want %q (the dialed node)", got, want)
	}
	if s.tls {
		for name, st := range map[string]core.Stream{"opened": sa, "accepted": sb} {
			ts, ok := st.(core.TLSStater)
			if !ok {
				t.Errorf("%s TLS stream does not implement core.TLSStater", name)
				continue
			}
			if v := ts.ConnectionState().Version; v != tls.VersionTLS13 {
				t.Errorf("%s stream negotiated TLS version %#x, want 1.3", name, v)
			}
		}
	}
	up, down := payload(1, 200<<10), payload(2, 100<<10)
	go func() { sa.SetWriteDeadline(time.Now().Add(wait)); sa.Write(up) }()
	readExactly(t, sb, up)
	go func() { sb.SetWriteDeadline(time.Now().Add(wait)); sb.Write(down) }()
	readExactly(t, sa, down)
	if sa.LocalAddr() == nil || sa.RemoteAddr() == nil || sb.LocalAddr() == nil || sb.RemoteAddr() == nil {
		t.Error("a stream has a nil LocalAddr or RemoteAddr (it is a net.Conn)")
	}
}

// Link: "Streams opened on it are independent" — 64 concurrent streams on
// one link each carry their own bytes, echoed back, and end in order.
func testConcurrentStreams(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	echo(t, b)
	l := dial(t, a, peerOf("b", b))
	const streams = 64
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
			defer cancel()
			st, err := l.OpenStream(ctx)
			if err != nil {
				t.Errorf("stream %d: OpenStream: %v", i, err)
				return
			}
			defer st.Close()
			p := payload(uint64(100+i), 8<<10+i*97)
			st.SetDeadline(time.Now().Add(3 * wait))
			go func() {
				if _, err := st.Write(p); err == nil {
					st.CloseWrite()
				}
			}()
			got, err := io.ReadAll(st)
			if err != nil {
				t.Errorf("stream %d: read the echo: %v after %d bytes", i, err, len(got))
				return
			}
			if !bytes.Equal(got, p) {
				t.Errorf("stream %d: echo of %d bytes came back as %d different bytes", i, len(p), len(got))
			}
		})
	}
	wg.Wait()
}

// Transport: every broker both accepts and dials; streams opened in both
// directions at once work.
func testBothDirections(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	echo(t, a)
	echo(t, b)
	la, lb := dial(t, a, peerOf("b", b)), dial(t, b, peerOf("a", a))
	var wg sync.WaitGroup
	for i := range 8 {
		for _, l := range []core.Link{la, lb} {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				st, err := l.OpenStream(ctx)
				if err != nil {
					t.Errorf("OpenStream to %s: %v", l.Peer().ID, err)
					return
				}
				defer st.Close()
				if err := roundTrip(st, payload(uint64(i), 4096), wait); err != nil {
					t.Errorf("round trip to %s: %v", l.Peer().ID, err)
				}
			})
		}
	}
	wg.Wait()
}

// Stream, CloseWrite: "the peer reads them all and then io.EOF", and the
// other direction stays open (half-close); Close ends it with io.EOF too.
func testHalfClose(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	sa, sb := pair(t, a, b, "b")
	p := payload(3, 100<<10)
	go func() {
		sa.SetWriteDeadline(time.Now().Add(wait))
		if _, err := sa.Write(p); err == nil {
			sa.CloseWrite()
		}
	}()
	readExactly(t, sb, p)
	wantEOF(t, sb)
	// The half-closed side can still read, and the EOF side still writes.
	reply := []byte("reply after your FIN")
	write(t, sb, reply)
	readExactly(t, sa, reply)
	sa.SetWriteDeadline(time.Now().Add(wait))
	if _, err := sa.Write([]byte("x")); err == nil {
		t.Error("Write after CloseWrite succeeded")
	}
	if err := sb.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wantEOF(t, sa)
}

// Orderly close (core.Stream, core/transport.go): Close sends every byte
// written before it, then the peer reads io.EOF — even when Close follows
// the writes at once and the bytes still sit in the transport's buffers.
func testCloseSendsEverything(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	sa, sb := pair(t, a, b, "b")
	p := payload(4, 1<<20)
	type result struct {
		got []byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		sb.SetReadDeadline(time.Now().Add(3 * wait))
		got, err := io.ReadAll(sb) // nil error means it ended with io.EOF
		res <- result{got, err}
	}()
	for off := 0; off < len(p); off += 1000 {
		write(t, sa, p[off:min(off+1000, len(p))])
	}
	if err := sa.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("peer read %d of %d bytes, then %v; want all, then io.EOF", len(r.got), len(p), r.err)
	}
	if !bytes.Equal(r.got, p) {
		t.Fatalf("peer read %d bytes differing from the %d written", len(r.got), len(p))
	}
}

// Stream, Abort: "the peer's next Read fails with an error wrapping
// ErrStreamAborted", and so do this side's Read and Write (Read: "Abort on
// this side"). Checked from both ends.
func testAbort(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	for _, abortOpener := range []bool{true, false} {
		sa, sb := pair(t, a, b, "b")
		x, y := sa, sb
		if !abortOpener {
			x, y = sb, sa
		}
		write(t, x, []byte("x"))
		readExactly(t, y, []byte("x"))
		if err := x.Abort(); err != nil {
			t.Errorf("Abort: %v", err)
		}
		wantAborted(t, "the peer's Read after Abort", readEnd(t, y))
		x.SetReadDeadline(time.Now().Add(wait))
		_, err := x.Read(make([]byte, 1))
		wantAborted(t, "Read after this side's Abort", err)
		x.SetWriteDeadline(time.Now().Add(wait))
		_, err = x.Write([]byte("y"))
		wantAborted(t, "Write after this side's Abort", err)
		x.Close()
		y.Close()
	}
}

// Stream: "A read or write deadline that passes is a timeout
// (net.Error.Timeout, os.ErrDeadlineExceeded), not an abort: the stream
// stays usable." Also a deadline moved into the past wakes a blocked Read.
func testReadDeadline(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	sa, sb := pair(t, a, b, "b")
	sb.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := sb.Read(make([]byte, 8))
	switch {
	case n != 0 || err == nil:
		t.Fatalf("Read with nothing sent: n=%d, %v; want a timeout", n, err)
	case !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("Read past its deadline: %v; want a net.Error timeout wrapping os.ErrDeadlineExceeded", err)
	case errors.Is(err, core.ErrStreamAborted):
		t.Fatalf("Read past its deadline: %v wraps ErrStreamAborted", err)
	}
	sb.SetReadDeadline(time.Time{})
	write(t, sa, []byte("still here"))
	readExactly(t, sb, []byte("still here"))

	errc := make(chan error, 1)
	go func() {
		sb.SetReadDeadline(time.Time{})
		_, err := sb.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the Read block; not an assertion
	sb.SetReadDeadline(time.Now().Add(-time.Second))
	select {
	case err := <-errc:
		if !isTimeout(err) {
			t.Fatalf("blocked Read after the deadline moved to the past: %v, want a timeout", err)
		}
	case <-time.After(wait):
		t.Fatal("a deadline moved into the past did not wake a blocked Read")
	}
	sb.SetReadDeadline(time.Time{})
	write(t, sb, []byte("back"))
	readExactly(t, sa, []byte("back"))
}

// Transport.Accept: "It returns ctx's error when ctx ends."
func testAcceptContext(t *testing.T, s *suite) {
	a := s.open(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	st, err := a.Accept(ctx)
	if st != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept with nobody dialing: %v, %v; want context.DeadlineExceeded", st, err)
	}
	if el := time.Since(start); el > wait {
		t.Fatalf("Accept returned %v after its context ended", el)
	}
}

// Link.OpenStream: a peer nobody listens for gives an error wrapping
// ErrPeerRefused, within DefaultConnectTimeout when ctx has no deadline.
func testDialRefused(t *testing.T, s *suite) {
	a := s.open(t, "a")
	peer := peerAt("b", freeAddr(t, s.cfg.Network))
	start := time.Now()
	l, err := a.Dial(context.Background(), peer)
	if err == nil {
		defer l.Close()
		var st core.Stream
		st, err = l.OpenStream(context.Background())
		if err == nil {
			st.Abort()
			t.Fatal("OpenStream to a port nothing listens on succeeded")
		}
	}
	if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream to a port nothing listens on: %v, want an error wrapping ErrPeerRefused", err)
	}
	if el := time.Since(start); el > core.DefaultConnectTimeout+wait {
		t.Fatalf("the refusal took %v; DefaultConnectTimeout is %v", el, core.DefaultConnectTimeout)
	}
}

// Stream: "backpressure from a peer that does not read shows as a Write
// that blocks (bounded by the write deadline)" — the transport does not
// buffer without bound, and no byte is lost or doubled by the timeout.
func testBackpressure(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	sa, sb := pair(t, a, b, "b")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const limit = 64 << 20
	chunk := payload(5, 1024)
	var written int
	var werr error
	end := time.Now().Add(6 * wait)
	for written < limit && time.Now().Before(end) {
		sa.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := sa.Write(chunk)
		written += n
		if err != nil {
			werr = err
			break
		}
	}
	if werr == nil {
		t.Fatalf("wrote %d bytes to a peer that does not read without a Write blocking", written)
	}
	if !isTimeout(werr) || errors.Is(werr, core.ErrStreamAborted) {
		t.Fatalf("Write to a peer that does not read: %v, want a timeout (not an abort)", werr)
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("heap in use grew by %d MiB while %d KiB were buffered for a stalled peer", grew>>20, written>>10)
	}
	t.Logf("a Write blocked after %d KiB were accepted", written>>10)

	// The stream is still usable: the peer reads everything that was
	// accepted, exactly once, then the orderly end.
	total := make(chan int64, 1)
	go func() {
		sb.SetReadDeadline(time.Now().Add(6 * wait))
		n, err := io.Copy(io.Discard, sb)
		if err != nil {
			n = -n - 1
		}
		total <- n
	}()
	sa.SetWriteDeadline(time.Time{})
	if err := sa.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite after the peer resumed reading: %v", err)
	}
	if n := <-total; n != int64(written) {
		t.Fatalf("the peer read %d bytes (negative: then an error), %d were accepted", n, written)
	}
}

// Transport.Close: "Close ends the listener, every link and every stream
// (aborting those still open) and makes a blocked Accept return
// ErrClosed".
func testTransportClose(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	sa, sb := pair(t, a, b, "b")
	l := dial(t, b, peerOf("a", a))
	acc := make(chan error, 1)
	go func() {
		_, err := b.Accept(context.Background())
		acc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Accept block; not an assertion
	closeWithin(t, b)
	select {
	case err := <-acc:
		if !errors.Is(err, core.ErrClosed) {
			t.Fatalf("blocked Accept after Close: %v, want an error wrapping core.ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("a blocked Accept did not return after Close")
	}
	actx, acancel := context.WithTimeout(context.Background(), wait)
	defer acancel()
	if _, err := b.Accept(actx); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want core.ErrClosed", err)
	}
	sb.SetReadDeadline(time.Now().Add(wait))
	_, err := sb.Read(make([]byte, 1))
	wantAborted(t, "Read of a stream of a closed transport", err)
	wantAborted(t, "the peer's Read after the transport closed", readEnd(t, sa))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if st, err := l.OpenStream(ctx); err == nil {
		st.Abort()
		t.Fatal("OpenStream on a closed transport succeeded")
	} else if !errors.Is(err, core.ErrPeerRefused) {
		t.Errorf("OpenStream on a closed transport: %v, want an error wrapping ErrPeerRefused", err)
	}
	closeWithin(t, b) // a second Close must not panic or hang
}

// Link.Close: "aborts every stream opened on the link"; another link to the
// same peer is not affected.
func testLinkClose(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	l1, l2 := dial(t, a, peerOf("b", b)), dial(t, a, peerOf("b", b))
	var mine, theirs []core.Stream
	for i := range 2 {
		st := openStream(t, l1)
		write(t, st, fmt.Appendf(nil, "l1-%d", i))
		mine = append(mine, st)
		sb := accept(t, b)
		readExactly(t, sb, fmt.Appendf(nil, "l1-%d", i))
		theirs = append(theirs, sb)
	}
	other := openStream(t, l2)
	write(t, other, []byte("l2"))
	otherB := accept(t, b)
	readExactly(t, otherB, []byte("l2"))

	if err := l1.Close(); err != nil {
		t.Errorf("Link.Close: %v", err)
	}
	for i := range mine {
		mine[i].SetReadDeadline(time.Now().Add(wait))
		_, err := mine[i].Read(make([]byte, 1))
		wantAborted(t, "Read of a stream of a closed link", err)
		wantAborted(t, "the peer's Read after the link closed", readEnd(t, theirs[i]))
	}
	write(t, otherB, []byte("still"))
	readExactly(t, other, []byte("still"))
}
