package quic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/plugins"
)

// fillUntilBlocked writes chunks to s until a write times out (the peer's
// stream window is full) and returns the bytes written. Bounded: at most
// limit bytes, each write waiting at most wait.
func fillUntilBlocked(t testing.TB, s core.Stream, wait time.Duration, limit int) int {
	chunk := make([]byte, 16<<10)
	total := 0
	for total < limit {
		_ = s.SetWriteDeadline(time.Now().Add(wait))
		n, err := s.Write(chunk)
		total += n
		if err != nil {
			if !isTimeout(err) {
				t.Errorf("write: %v", err)
			}
			_ = s.SetWriteDeadline(time.Time{})
			return total
		}
	}
	t.Errorf("wrote %d bytes without blocking: no backpressure", total)
	return 0
}

// Rule (core.Link: "one that stalls never stops another"; DESIGN of this
// package): K streams whose receiver never reads fill their own stream
// windows only; a healthy stream on the same connection keeps moving.
// The connection window is max_incoming_streams × stream window, so even
// K × window beyond quic-go's default connection window (15 MB max) does
// not block it. With quic-go's default windows this test fails: the
// stalled streams use up the connection window and the healthy stream
// moves 0 bytes.
func TestStalledStreamsDoNotBlockHealthy(t *testing.T) {
	for _, k := range []int{4, 20} { // 20 × 1 MiB > 15 MB
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ca := newTestCA(t)
			a := openNode(t, ca, "a", "", nil)
			b := openNode(t, ca, "b", "", nil)
			l, err := a.tr.Dial(context.Background(), b.peer())
			if err != nil {
				t.Fatal(err)
			}
			// The healthy stream is opened first, so that what is
			// measured is its flow, not whether it can still be opened.
			healthy, err := l.OpenStream(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			in := accept(t, b)
			stalled := make([]core.Stream, k)
			for i := range stalled {
				if stalled[i], err = l.OpenStream(ctxT(t, 10*time.Second)); err != nil {
					t.Fatal(err)
				}
				_ = accept(t, b) // held, never read
			}
			// Fill them all at once until every one blocks.
			var fill sync.WaitGroup
			took := make([]int, k)
			for i, s := range stalled {
				fill.Add(1)
				go func() {
					defer fill.Done()
					took[i] = fillUntilBlocked(t, s, time.Second, 8*DefaultStreamReceiveWindow)
				}()
			}
			fill.Wait()
			t.Logf("stalled streams took %v bytes", took)
			const want = 8 << 20
			var got atomic.Int64
			done := make(chan error, 1)
			go func() {
				_ = in.SetReadDeadline(time.Now().Add(60 * time.Second))
				buf := make([]byte, 64<<10)
				for {
					n, err := in.Read(buf)
					got.Add(int64(n))
					if err != nil {
						if err == io.EOF {
							err = nil
						}
						done <- err
						return
					}
				}
			}()
			start := time.Now()
			_ = healthy.SetWriteDeadline(time.Now().Add(30 * time.Second))
			chunk := make([]byte, 64<<10)
			for sent := 0; sent < want; sent += len(chunk) {
				if _, err := healthy.Write(chunk); err != nil {
					t.Fatalf("healthy stream stuck: %d bytes written, %d read in %s: %v", sent, got.Load(), time.Since(start), err)
				}
			}
			_ = healthy.CloseWrite()
			select {
			case err := <-done:
				if err != nil || got.Load() != want {
					t.Fatalf("healthy stream: read %d of %d bytes: %v", got.Load(), want, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("healthy stream not drained within 60 s")
			}
			t.Logf("healthy stream moved %d MiB in %s next to %d stalled streams", want>>20, time.Since(start), k)
		})
	}
}

// Rule (transport.quic.max_incoming_streams; core.Link.OpenStream): a
// peer admits at most max_incoming_streams streams per connection; more
// opens wait and fail with ErrPeerRefused when their context ends, the
// wait costs no memory that grows with the attempts, a freed slot lets
// the next open through, and nothing leaks.
func TestStreamOpenFlood(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		ca := newTestCA(t)
		cfg := map[string]string{KeyMaxIncomingStreams: "8"}
		reg := prometheus.NewRegistry()
		a := &node{id: "a", tls: ca.Node(t, "a")}
		tr, err := open(context.Background(), plugins.TransportEnv{NodeID: "a", Bind: "127.0.0.1:0", PeerTLS: a.tls, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		a.tr = tr
		defer tr.Close()
		b := openNode(t, ca, "b", "", cfg)
		defer b.tr.Close()
		l, _ := a.tr.Dial(context.Background(), b.peer())
		var open []core.Stream
		for i := 0; i < 8; i++ {
			s, err := l.OpenStream(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatalf("stream %d within the limit: %v", i, err)
			}
			open = append(open, s)
		}
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const attempts = 40
		for i := 0; i < attempts; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err := l.OpenStream(ctx)
			cancel()
			if !errors.Is(err, core.ErrPeerRefused) {
				t.Fatalf("open %d beyond the limit: err = %v, want ErrPeerRefused", i, err)
			}
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		delta := int64(after.HeapInuse) - int64(before.HeapInuse)
		t.Logf("HeapInuse delta after %d refused opens: %d bytes", attempts, delta)
		if delta > 4<<20 {
			t.Fatalf("HeapInuse grew by %d bytes over %d refused opens", delta, attempts)
		}
		if v := gauge(t, reg, "fibril_transport_quic_streams_blocked_total", "", ""); v != attempts {
			t.Fatalf("streams_blocked_total = %v, want %d", v, attempts)
		}
		// b's application takes one stream and closes it: its slot frees
		// and the next open goes through.
		in := accept(t, b)
		_ = in.Close()
		s, err := l.OpenStream(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatalf("open after a slot freed: %v", err)
		}
		open = append(open, s)
		for _, s := range open {
			_ = s.Close()
		}
	}()
	waitGoroutines(t, base)
}

// Rule (core.Stream: backpressure shows as a Write that blocks): a peer
// that does not read stops the writer after about one stream window; the
// write deadline turns that into a timeout, and the stream stays usable.
func TestBackpressure(t *testing.T) {
	const window = 64 << 10
	ca := newTestCA(t)
	cfg := map[string]string{KeyStreamReceiveWindow: strconv.Itoa(window)}
	a := openNode(t, ca, "a", "", cfg)
	b := openNode(t, ca, "b", "", cfg)
	s := openStream(t, a, b)
	in := accept(t, b)
	n := fillUntilBlocked(t, s, 500*time.Millisecond, 64*window)
	t.Logf("writer blocked after %d bytes (stream window %d)", n, window)
	// quic-go holds at most about one packet beyond the window.
	if n > window+16<<10 || n < window/2 {
		t.Fatalf("writer blocked after %d bytes, want about the stream window (%d)", n, window)
	}
	// Drain, then the stream still carries bytes.
	got := make([]byte, n)
	_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(in, got); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, s, in)
}

// Rule (core.Stream's orderly close vs abort, core/transport.go; README "failure
// behaviour"): when the peer dies, its streams fail with ErrStreamAborted
// — at once when it closed orderly (CONNECTION_CLOSE), within the idle
// timeout when it crashed — and nothing leaks.
func TestPeerKilledMidStream(t *testing.T) {
	for _, crash := range []bool{true, false} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			base := runtime.NumGoroutine()
			func() {
				ca := newTestCA(t)
				cfg := map[string]string{KeyMaxIdleTimeoutMS: "2000"}
				a := openNode(t, ca, "a", "", cfg)
				b := openNode(t, ca, "b", "", cfg)
				defer a.tr.Close()
				reader := openStream(t, a, b)
				_ = accept(t, b)
				writer := openStream(t, a, b)
				_ = accept(t, b)
				readErr := make(chan error, 1)
				go func() { _, err := reader.Read(make([]byte, 1)); readErr <- err }()
				writeErr := make(chan error, 1)
				go func() {
					chunk := make([]byte, 64<<10)
					for i := 0; i < 1000; i++ { // 64 MiB at most: beyond the window
						if _, err := writer.Write(chunk); err != nil {
							writeErr <- err
							return
						}
					}
					writeErr <- nil
				}()
				start := time.Now()
				if crash {
					b.tr.crash()
				} else {
					_ = b.tr.Close()
				}
				bound := 10 * time.Second // idle timeout 2 s, generous for a busy machine
				for _, ch := range []chan error{readErr, writeErr} {
					select {
					case err := <-ch:
						if !errors.Is(err, core.ErrStreamAborted) || isTimeout(err) {
							t.Fatalf("err = %v, want an abort (not a timeout)", err)
						}
					case <-time.After(bound):
						t.Fatalf("stream did not fail within %s of the peer's death", bound)
					}
				}
				t.Logf("streams failed %s after the peer died", time.Since(start))
				if !crash && time.Since(start) > 1500*time.Millisecond {
					t.Fatalf("an orderly shutdown took %s to reach the peer's streams", time.Since(start))
				}
				testkit.Eventually(t, 10*time.Second, "the dead connection is dropped", func() bool { return len(a.tr.liveConns("b")) == 0 })
			}()
			waitGoroutines(t, base)
		})
	}
}

// Rule (README "memory bound"): an idle stream costs little on the
// accepting side, because quic-go allocates receive buffers only as data
// arrives; the connection window is a bound, not an allocation. Both ends
// run in this process, so the figure is an upper bound for one side.
func TestIdleStreamMemory(t *testing.T) {
	const n = 500
	ca := newTestCA(t)
	a := openNode(t, ca, "a", "", nil)
	b := openNode(t, ca, "b", "", nil)
	l, _ := a.tr.Dial(context.Background(), b.peer())
	warm, err := l.OpenStream(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	warmIn := accept(t, b)
	roundTrip(t, warm, warmIn)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	outs := make([]core.Stream, 0, n)
	ins := make([]core.Stream, 0, n)
	for i := 0; i < n; i++ {
		s, err := l.OpenStream(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, s)
		ins = append(ins, accept(t, b))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)) / n
	t.Logf("idle stream: %d bytes of heap and stacks per stream (both ends, %d streams)", per, n)
	if per > 64<<10 {
		t.Fatalf("an idle stream costs %d bytes of heap, want < 64 KiB", per)
	}
	runtime.KeepAlive(outs)
	runtime.KeepAlive(ins)
}
