package transporttest

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/transport/faultproxy"
)

// The failure cases: a peer that dies, and the faults a faultproxy
// injects between two transports (blackhole, one-way loss, reset).

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
	err := testkit.Poll(2*wait, func() error {
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
