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
	"github.com/fibrilgo/fibril/transport/faultproxy"
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

// Link.OpenStream: "a certificate that does not name the peer" refuses
// (a peer's node id must match its certificate, or a stolen address
// could impersonate a node).
// Dialing "b" where "c" listens fails, and c accepts nothing; dialing c as
// "c" works (so the failure is the name, not the setup).
func testWrongNode(t *testing.T, s *suite) {
	a, c := s.open(t, "a"), s.open(t, "c")
	l := dial(t, a, peerAt("b", c.Addr().String()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err == nil {
		st.Abort()
		t.Fatal("OpenStream to node b at an address where node c listens succeeded")
	}
	if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream to the wrong node: %v, want an error wrapping ErrPeerRefused", err)
	}
	expectNoAccept(t, c, 500*time.Millisecond)
	sa, sc := pair(t, a, c, "c")
	sa.Close()
	sc.Close()
}

// ServerConfig/ClientConfig: peers verify each other against the cluster
// CA. A dialer whose certificate comes from another CA is refused (at
// OpenStream, or its stream dies at once) and never Accepted; a listener
// with such a certificate is refused by a cluster dialer.
func testForeignCA(t *testing.T, s *suite) {
	b := s.open(t, "b")
	x := s.openWith(t, "a", NewCA(t).Node(t, "a")) // claims to be a, outside the cluster
	l := dial(t, x, peerOf("b", b))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err == nil {
		// TLS 1.3: the client's handshake ends before the server checks
		// the client certificate, so the refusal arrives as the stream's
		// first read.
		defer st.Abort()
		st.SetWriteDeadline(time.Now().Add(wait))
		st.Write([]byte(hello)) //nolint:errcheck // the read says what happened
		if err := readEnd(t, st); err == io.EOF {
			t.Logf("the refused stream ended with io.EOF")
		}
	} else if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream with a foreign certificate: %v, want an error wrapping ErrPeerRefused", err)
	}
	expectNoAccept(t, b, time.Second)

	a := s.open(t, "a")
	l2 := dial(t, a, peerAt("a", x.Addr().String()))
	st, err = l2.OpenStream(ctx)
	if err == nil {
		st.Abort()
		t.Fatal("OpenStream to a listener whose certificate another CA signed succeeded")
	}
	if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream to a foreign listener: %v, want an error wrapping ErrPeerRefused", err)
	}
	expectNoAccept(t, x, 500*time.Millisecond)
}

// expectNoAccept fails if tr accepts a stream within d.
func expectNoAccept(t testing.TB, tr core.Transport, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := tr.Accept(ctx)
	if err == nil {
		st.Abort()
		t.Fatalf("a refused peer's stream was accepted (PeerNode %q)", st.PeerNode())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept: %v, want its context to end", err)
	}
}

// Stream.Read: a lost link is an abort (or the orderly end the peer's
// Close managed to send); it is reported promptly, and no goroutine
// outlives the streams.
func testPeerKilled(t *testing.T, s *suite) {
	a, b := s.open(t, "a"), s.open(t, "b")
	l := dial(t, a, peerOf("b", b))
	// Warm up once so lazily started machinery is in the baseline.
	w := openStream(t, l)
	write(t, w, []byte(hello))
	wb := accept(t, b)
	readExactly(t, wb, []byte(hello))
	w.Close()
	wb.Close()
	base := settledGoroutines()

	const streams = 16
	var opened []core.Stream
	for range streams {
		st := openStream(t, l)
		write(t, st, []byte(hello))
		opened = append(opened, st)
	}
	for range streams {
		sb := accept(t, b)
		readExactly(t, sb, []byte(hello))
		write(t, sb, []byte("ok"))
	}
	for _, st := range opened {
		readExactly(t, st, []byte("ok"))
	}
	errc := make(chan error, streams)
	for _, st := range opened {
		go func() {
			st.SetReadDeadline(time.Now().Add(3 * wait))
			_, err := st.Read(make([]byte, 8))
			errc <- err
		}()
	}
	start := time.Now()
	closeWithin(t, b)
	for range streams {
		err := <-errc
		if err != io.EOF && !errors.Is(err, core.ErrStreamAborted) {
			t.Fatalf("Read after the peer's transport closed: %v, want ErrStreamAborted or io.EOF", err)
		}
	}
	if el := time.Since(start); el > wait {
		t.Fatalf("reads noticed the dead peer after %v", el)
	}
	for _, st := range opened {
		st.Close()
	}
	l.Close()
	// b's goroutines are gone too, so the count may drop below the baseline.
	const slack = 3
	end := time.Now().Add(wait)
	n := runtime.NumGoroutine()
	for n > base+slack && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base+slack {
		t.Fatalf("%d goroutines after the streams ended, %d before they opened (slack %d): a leak\n%s", n, base, slack, goroutineDump())
	}
}

// settledGoroutines waits briefly for the count to stop falling (earlier
// tests' goroutines ending) and returns it.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(25 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return m
		}
		n = m
	}
	return n
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// A link through a faultproxy to b (which echoes).
func (s *suite) faultSetup(t *testing.T) (core.Transport, core.Transport, *faultproxy.Proxy, core.Link) {
	a, b := s.open(t, "a"), s.open(t, "b")
	p := s.proxy(t, b.Addr())
	return a, b, p, dial(t, a, peerAt("b", p.Addr()))
}

// newStreamWorks opens a stream on l and round-trips through b's echo,
// retrying within 2×wait: a transport whose connection died must
// re-establish it (Link.OpenStream: "A link whose connection died
// re-establishes it here").
func newStreamWorks(t *testing.T, l core.Link, what string) {
	t.Helper()
	err := eventually(2*wait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), wait/2)
		defer cancel()
		st, err := l.OpenStream(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		return roundTrip(st, []byte("new stream"), wait/2)
	})
	if err != nil {
		t.Fatalf("%s: a new stream does not work: %v", what, err)
	}
}

// Faults, blackhole: nothing crosses while it lasts; a stream opened
// during it fails (ErrPeerRefused) or completes after the restore; after
// the restore new streams work.
func testFaultBlackhole(t *testing.T, s *suite) {
	_, b, p, l := s.faultSetup(t)
	echo(t, b)
	st := openStream(t, l)
	if err := roundTrip(st, []byte("before"), wait); err != nil {
		t.Fatalf("round trip through the proxy: %v", err)
	}
	p.Set(faultproxy.Faults{Blackhole: true})
	write(t, st, []byte("lost"))
	expectNothing(t, st, 500*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	during, err := l.OpenStream(ctx)
	cancel()
	if err != nil && !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream during a blackhole: %v, want success or ErrPeerRefused", err)
	}
	p.Set(faultproxy.Faults{})
	if during != nil {
		defer during.Abort()
		err := roundTrip(during, []byte("after the restore"), wait)
		if err != nil && isTimeout(err) {
			t.Fatalf("a stream opened during the blackhole neither completed nor failed after the restore: %v", err)
		}
	}
	newStreamWorks(t, l, "after a blackhole")
}

// expectNothing fails if st reads anything within d.
func expectNothing(t testing.TB, st core.Stream, d time.Duration) {
	t.Helper()
	st.SetReadDeadline(time.Now().Add(d))
	defer st.SetReadDeadline(time.Time{})
	n, err := st.Read(make([]byte, 64))
	if n > 0 {
		t.Fatalf("read %d bytes through a fault that drops them", n)
	}
	if err != nil && !isTimeout(err) && err != io.EOF && !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("read during a fault: %v", err)
	}
}

// Faults, one-way loss: bytes A→B are dropped, so B reads nothing of a
// stream A opens (B may not even see it); restoring lets new streams work.
func testFaultOneWayLoss(t *testing.T, s *suite) {
	_, b, p, l := s.faultSetup(t)
	p.Set(faultproxy.Faults{DropAToB: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	st, err := l.OpenStream(ctx)
	cancel()
	switch {
	case err == nil:
		defer st.Abort()
		st.SetWriteDeadline(time.Now().Add(wait))
		if _, err := st.Write([]byte("dropped on the way")); err != nil && !errors.Is(err, core.ErrStreamAborted) {
			t.Fatalf("Write during one-way loss: %v", err)
		}
	case !errors.Is(err, core.ErrPeerRefused):
		t.Fatalf("OpenStream during one-way loss: %v, want success or ErrPeerRefused", err)
	}
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	sb, err := b.Accept(actx)
	acancel()
	if err == nil {
		expectNothing(t, sb, 500*time.Millisecond)
		sb.Abort()
	}
	p.Set(faultproxy.Faults{})
	echo(t, b)
	newStreamWorks(t, l, "after one-way loss")
}

// Faults, reset: a stream whose connection is reset ends with an abort (or
// an orderly end) on Read; new streams work. Over UDP a reset only
// forgets the proxy's sessions, which a transport may survive: there the
// stream must either fail the same way or keep working — never hang.
func testFaultReset(t *testing.T, s *suite) {
	_, b, p, l := s.faultSetup(t)
	echo(t, b)
	st := openStream(t, l)
	defer st.Abort()
	if err := roundTrip(st, []byte("before"), wait); err != nil {
		t.Fatalf("round trip through the proxy: %v", err)
	}
	p.Reset()
	if s.cfg.Network == "udp" {
		err := roundTrip(st, []byte("after"), wait)
		if err != nil && err != io.EOF && !errors.Is(err, core.ErrStreamAborted) {
			t.Fatalf("stream after the proxy forgot its sessions: %v, want it to work, be aborted or end", err)
		}
	} else {
		err := readEnd(t, st)
		if err != io.EOF && !errors.Is(err, core.ErrStreamAborted) {
			t.Fatalf("Read after a reset: %v, want ErrStreamAborted or io.EOF", err)
		}
	}
	newStreamWorks(t, l, "after a reset")
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
