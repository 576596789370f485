package coalesce

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// gateWriter records what it is written; while gated, every Write blocks
// until the gate opens, like a socket whose peer stopped reading.
type gateWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	gate    chan struct{} // nil: never blocks
	entered chan struct{} // receives once per Write that reached the gate
	err     error
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if g.gate != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return 0, g.err
	}
	g.writes++
	return g.buf.Write(p)
}

func (g *gateWriter) snapshot() ([]byte, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return bytes.Clone(g.buf.Bytes()), g.writes
}

func waitDone(t *testing.T, w *Writer) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the flusher goroutine did not end within 10s")
	}
}

// All bytes arrive, in order, and Close waits for them (the orderly end
// sends everything first).
func TestWriteCloseDeliversInOrder(t *testing.T) {
	g := &gateWriter{}
	w := New(g, 1024)
	var want bytes.Buffer
	for i := range 1000 {
		p := bytes.Repeat([]byte{byte(i)}, 1+i%300)
		want.Write(p)
		if n, err := w.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write %d: n=%d err=%v", i, n, err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitDone(t, w)
	got, _ := g.snapshot()
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("underlying got %d bytes, want %d (or content differs)", len(got), want.Len())
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
}

// While the flusher is in an underlying Write, further Writes accumulate
// and leave as one batch: a flush per batch of frames, not per frame.
func TestBatchesWhileFlushing(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := New(g, DefaultLimit)
	if _, err := w.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the flusher never wrote")
	}
	for range 100 {
		if _, err := w.Write(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Buffered(); got != 100*100 {
		t.Fatalf("Buffered = %d while the flusher is blocked, want 10000", got)
	}
	close(g.gate)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, writes := g.snapshot()
	if len(got) != 5+100*100 {
		t.Fatalf("got %d bytes, want %d", len(got), 5+100*100)
	}
	if writes != 2 {
		t.Fatalf("%d underlying writes for 101 Writes, want 2 (one batch behind the first)", writes)
	}
}

// A Write that would exceed the bound blocks, and gives up at the write
// deadline with a timeout error: backpressure, not unbounded buffering.
func TestBackpressureHonoursDeadline(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	const limit = 4096
	w := New(g, limit)
	defer func() { close(g.gate); w.Abort(nil); waitDone(t, w) }()

	w.SetDeadline(time.Now().Add(200 * time.Millisecond))
	chunk := make([]byte, 1000)
	total := 0
	start := time.Now()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		var n int
		n, err = w.Write(chunk)
		total += n
	}
	if err == nil {
		t.Fatalf("100 KB accepted by a writer bounded at %d with a stalled peer", limit)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v is not a timeout net.Error", err)
	}
	// One batch may sit in the blocked underlying Write, one more pending.
	if total > 2*limit {
		t.Fatalf("accepted %d bytes, more than 2×limit (%d)", total, 2*limit)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("gave up after %v, before the deadline", el)
	}
	// The writer is still usable after a timeout: release and it drains.
	w.SetDeadline(time.Time{})
}

// Moving the deadline wakes a blocked Write.
func TestSetDeadlineWakesBlockedWrite(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := New(g, 10)
	defer func() { close(g.gate); w.Abort(nil); waitDone(t, w) }()
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write(make([]byte, 1000))
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("Write returned %v with no room and no deadline", err)
	case <-time.After(100 * time.Millisecond):
	}
	w.SetDeadline(time.Now().Add(-time.Second))
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a past deadline did not wake the blocked Write")
	}
}

// After the underlying Write fails, later Writes (and Close) return that
// error, and the flusher ends.
func TestUnderlyingErrorIsSticky(t *testing.T) {
	boom := errors.New("boom")
	g := &gateWriter{err: boom}
	w := New(g, 64)
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatalf("first Write: %v (it is only accepted)", err)
	}
	waitDone(t, w)
	if _, err := w.Write([]byte("y")); !errors.Is(err, boom) {
		t.Fatalf("Write after failure: %v, want boom", err)
	}
	if err := w.Flush(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Flush after failure: %v, want boom", err)
	}
	if err := w.Close(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Close after failure: %v, want boom", err)
	}
}

// Close gives up at its context when the peer does not read; Abort then
// drops what is pending and the flusher ends once the write is unblocked.
func TestCloseBoundedThenAbort(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := New(g, 1024)
	if _, err := w.Write(make([]byte, 500)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if _, err := w.Write(make([]byte, 500)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a stalled writer: %v, want deadline exceeded", err)
	}
	aborted := errors.New("aborted")
	w.Abort(aborted)
	if w.Buffered() != 0 {
		t.Fatalf("Abort left %d bytes pending", w.Buffered())
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, aborted) {
		t.Fatalf("Write after Abort: %v", err)
	}
	close(g.gate) // what closing the connection does to a blocked write
	waitDone(t, w)
	got, _ := g.snapshot()
	if len(got) != 500 {
		t.Fatalf("underlying got %d bytes, want only the 500 in flight before Abort", len(got))
	}
}

// Concurrent Writes do not interleave, even when each must wait for room.
func TestConcurrentWritesDoNotInterleave(t *testing.T) {
	g := &gateWriter{}
	w := New(g, 512)
	const writers, size, rounds = 8, 3000, 20
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			p := bytes.Repeat([]byte{byte('a' + i)}, size)
			for range rounds {
				if _, err := w.Write(p); err != nil {
					t.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := g.snapshot()
	if len(got) != writers*size*rounds {
		t.Fatalf("got %d bytes, want %d", len(got), writers*size*rounds)
	}
	for off := 0; off < len(got); off += size {
		run := got[off : off+size]
		if bytes.Count(run, run[:1]) != size {
			t.Fatalf("bytes of different Writes interleave at offset %d", off)
		}
	}
}

// A Write waiting for its turn behind a blocked Write honours its deadline.
func TestQueuedWriteHonoursDeadline(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := New(g, 10)
	defer func() { close(g.gate); w.Abort(nil); waitDone(t, w) }()
	go w.Write(make([]byte, 100)) //nolint:errcheck // blocks until Abort
	time.Sleep(50 * time.Millisecond)
	w.SetDeadline(time.Now().Add(100 * time.Millisecond))
	done := make(chan error, 1)
	go func() { _, err := w.Write([]byte("x")); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("queued Write: %v, want deadline exceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a queued Write ignored its deadline")
	}
}

// An idle writer gives back a large batch buffer once it has been idle for
// releaseAfter (a writer between two batches keeps it).
func TestIdleReleasesLargeBuffer(t *testing.T) {
	g := &gateWriter{}
	w := New(g, DefaultLimit)
	defer func() { w.Abort(nil); waitDone(t, w) }()
	if _, err := w.Write(make([]byte, 200<<10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return cap(w.pending) + cap(w.spare)
	}
	for deadline := time.Now().Add(5 * time.Second); held() > keepIdle; {
		if time.Now().After(deadline) {
			t.Fatalf("an idle writer holds %d bytes of buffers after 5 s, want <= %d", held(), keepIdle)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// It still writes afterwards.
	if _, err := w.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

var sink io.Writer = io.Discard

func BenchmarkWrite1KiBDiscard(b *testing.B) {
	w := New(sink, 0)
	p := make([]byte, 1024)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, err := w.Write(p); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// benchLoopback writes 64-byte frames over loopback TCP, coalesced or not,
// with a reader draining the other end.
func benchLoopback(b *testing.B, coalesced bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	var w io.Writer = c
	var cw *Writer
	if coalesced {
		cw = New(c, 0)
		w = cw
	}
	p := make([]byte, 64)
	b.SetBytes(int64(len(p)))
	var frames int64
	for b.Loop() {
		if _, err := w.Write(p); err != nil {
			b.Fatal(err)
		}
		frames++
	}
	if cw != nil {
		if err := cw.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	if n := <-got; n != frames*64 {
		b.Fatalf("reader got %d bytes, want %d", n, frames*64)
	}
	c.Close()
}

func BenchmarkLoopback64B_Direct(b *testing.B)    { benchLoopback(b, false) }
func BenchmarkLoopback64B_Coalesced(b *testing.B) { benchLoopback(b, true) }

// With nothing pending, Close succeeds even with an ended context: an
// orderly end must not turn into an abort because a deadline passed.
func TestCloseIdleWithEndedContext(t *testing.T) {
	for range 50 {
		g := &gateWriter{}
		w := New(g, 64)
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Close(ctx); err != nil {
			t.Fatalf("Close of a drained writer with an ended context: %v", err)
		}
		waitDone(t, w)
	}
}
