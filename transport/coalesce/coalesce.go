// Package coalesce batches the small writes of one stream into few large
// writes on the connection underneath, so a stream costs a flush (a TCP
// segment, a TLS record, a syscall) per batch of frames rather than per
// frame.
//
// A Writer copies each Write into a bounded pending buffer and wakes the
// stream's one flusher goroutine, which hands everything pending to the
// underlying writer in a single Write. While that Write is in progress new
// bytes accumulate, so a writer that pipelines frames gets batches as large
// as the connection is slow — and a lone request/response writer, whose
// bytes find the flusher idle, pays no added latency.
//
// The bound is the backpressure: when the peer stops reading, the
// underlying Write blocks, pending fills up, and the next Write blocks until
// there is room or the write deadline passes (os.ErrDeadlineExceeded, a
// net.Error whose Timeout is true). The deadline governs only that wait,
// never the underlying Write, because a timed-out write leaves a TLS
// connection unusable for good while a timed-out wait for room does not.
package coalesce

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// DefaultLimit is the pending-buffer bound of a Writer created with a limit
// <= 0: large enough to fill a 10 Gbit/s link across a flusher wake-up,
// small enough that a thousand stalled streams stay under 512 MiB.
const DefaultLimit = 256 << 10

// keepIdle is the largest buffer a Writer keeps once it has been idle for
// releaseAfter: an idle stream should not pin a batch-sized buffer. A
// stream that is only between two batches keeps its buffers, so that a
// pipelining writer does not grow a new one for every batch.
const (
	keepIdle     = 16 << 10
	releaseAfter = 100 * time.Millisecond
)

// ErrClosed is returned by Write after Close (the orderly end of writing).
var ErrClosed = errors.New("coalesce: writer closed")

// Writer coalesces writes to an underlying io.Writer. Its methods are safe
// for concurrent use; concurrent Writes do not interleave (each Write's
// bytes are pending contiguously, as with a net.Conn).
//
// Memory: at most Limit bytes pending plus one batch (at most Limit bytes)
// in the underlying Write.
type Writer struct {
	w     io.Writer
	limit int

	// wlock serialises Write calls, so a large Write that must wait for
	// room is not interleaved with another's bytes. It is a channel so a
	// waiting Write can give up at its deadline.
	wlock chan struct{}
	// wake tells the flusher there is work (or an end); capacity 1 so a
	// wake-up is never lost and never blocks.
	wake chan struct{}
	// done is closed when the flusher goroutine has returned.
	done chan struct{}

	mu       sync.Mutex
	pending  []byte
	spare    []byte        // the buffer of the previous batch, reused
	flushing bool          // the flusher is in an underlying Write
	err      error         // sticky: a failed underlying Write or Abort
	closing  bool          // Close began: no new Writes, drain then stop
	deadline time.Time     // write deadline (zero: none)
	changed  chan struct{} // closed and replaced on every state change
}

// New returns a Writer that writes to w in batches of at most limit bytes
// pending (DefaultLimit when limit <= 0), and starts its flusher. The
// flusher ends with Close or Abort; one of them must be called.
func New(w io.Writer, limit int) *Writer {
	if limit <= 0 {
		limit = DefaultLimit
	}
	cw := &Writer{
		w:       w,
		limit:   limit,
		wlock:   make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	go cw.flusher()
	return cw
}

// broadcast wakes every goroutine waiting on a state change. Callers hold
// mu.
func (cw *Writer) broadcast() {
	close(cw.changed)
	cw.changed = make(chan struct{})
}

func (cw *Writer) kick() {
	select {
	case cw.wake <- struct{}{}:
	default:
	}
}

// SetDeadline sets the write deadline: a Write still waiting for room (or
// for its turn behind another Write) when it passes returns
// os.ErrDeadlineExceeded. Bytes already accepted are still written. A zero
// t means no deadline.
func (cw *Writer) SetDeadline(t time.Time) {
	cw.mu.Lock()
	cw.deadline = t
	cw.broadcast()
	cw.mu.Unlock()
}

// timer returns a channel that fires at the deadline (nil: never) and its
// stop function.
func timer(deadline time.Time) (<-chan time.Time, func() bool) {
	if deadline.IsZero() {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(time.Until(deadline))
	return t.C, t.Stop
}

// Write copies p into the pending buffer and returns once all of it is
// accepted (not yet written). It blocks while the buffer is full. On an
// error it returns how many bytes of p were accepted: those are still
// written unless the Writer fails or is aborted.
func (cw *Writer) Write(p []byte) (int, error) {
	if err := cw.lockWrite(); err != nil {
		return 0, err
	}
	defer func() { <-cw.wlock }()

	n := 0
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for {
		switch {
		case cw.err != nil:
			return n, cw.err
		case cw.closing:
			return n, ErrClosed
		case !cw.deadline.IsZero() && !time.Now().Before(cw.deadline):
			return n, os.ErrDeadlineExceeded
		}
		if room := cw.limit - len(cw.pending); room > 0 {
			k := min(room, len(p))
			if cw.pending == nil && cw.spare != nil {
				cw.pending, cw.spare = cw.spare[:0], nil
			}
			cw.pending = append(cw.pending, p[:k]...)
			n += k
			p = p[k:]
			cw.kick()
			if len(p) == 0 {
				return n, nil
			}
		}
		if err := cw.waitLocked(); err != nil {
			return n, err
		}
	}
}

// lockWrite takes the Write turn, honouring the deadline and an end.
func (cw *Writer) lockWrite() error {
	for {
		select {
		case cw.wlock <- struct{}{}:
			return nil
		default:
		}
		cw.mu.Lock()
		switch {
		case cw.err != nil:
			err := cw.err
			cw.mu.Unlock()
			return err
		case cw.closing:
			cw.mu.Unlock()
			return ErrClosed
		}
		deadline, changed := cw.deadline, cw.changed
		cw.mu.Unlock()
		fire, stop := timer(deadline)
		select {
		case cw.wlock <- struct{}{}:
			stop()
			return nil
		case <-changed: // deadline moved, error or close: look again
		case <-fire:
			return os.ErrDeadlineExceeded
		}
		stop()
	}
}

// waitLocked releases mu until the next state change or the deadline, and
// takes it again. It returns os.ErrDeadlineExceeded at the deadline.
func (cw *Writer) waitLocked() error {
	changed := cw.changed
	fire, stop := timer(cw.deadline)
	cw.mu.Unlock()
	defer cw.mu.Lock()
	defer stop()
	select {
	case <-changed:
		return nil
	case <-fire:
		return os.ErrDeadlineExceeded
	}
}

// flusher writes batches until the Writer ends. It is the only goroutine
// that calls the underlying Write, so batches leave in order.
func (cw *Writer) flusher() {
	defer close(cw.done)
	var idle idleTimer
	defer idle.stop()
	for {
		cw.mu.Lock()
		for len(cw.pending) == 0 && cw.err == nil && !cw.closing {
			big := cap(cw.pending) > keepIdle || cap(cw.spare) > keepIdle
			cw.mu.Unlock()
			if !big {
				<-cw.wake
			} else if idle.wait(cw.wake, releaseAfter) {
				cw.mu.Lock()
				if len(cw.pending) == 0 {
					cw.pending, cw.spare = nil, nil
				}
				cw.mu.Unlock()
			}
			cw.mu.Lock()
		}
		if cw.err != nil || len(cw.pending) == 0 { // aborted, failed, or closed and drained
			cw.pending, cw.spare = nil, nil
			cw.broadcast()
			cw.mu.Unlock()
			return
		}
		batch := cw.pending
		cw.pending = nil
		cw.flushing = true
		cw.broadcast() // room freed
		cw.mu.Unlock()

		_, err := cw.w.Write(batch)

		cw.mu.Lock()
		cw.flushing = false
		if err != nil && cw.err == nil {
			cw.err = err
		}
		switch {
		case cw.pending == nil:
			cw.pending = batch[:0]
		default:
			cw.spare = batch[:0]
		}
		cw.broadcast()
		cw.mu.Unlock()
	}
}

// Flush waits until every accepted byte has been handed to the underlying
// writer and that Write returned. It returns the Writer's error, if any, or
// ctx's error when ctx ends first.
func (cw *Writer) Flush(ctx context.Context) error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for {
		// The state decides before ctx does: a Flush with nothing to
		// wait for succeeds even when ctx has already ended.
		if cw.err != nil {
			return cw.err
		}
		if len(cw.pending) == 0 && !cw.flushing {
			return nil
		}
		changed := cw.changed
		cw.mu.Unlock()
		select {
		case <-changed:
			cw.mu.Lock()
		case <-ctx.Done():
			cw.mu.Lock()
			return ctx.Err()
		}
	}
}

// Close ends writing in order: new Writes fail with ErrClosed, everything
// accepted is written, and the flusher stops. It returns the Writer's error
// if a write failed, or ctx's error when ctx ends before the bytes are out;
// then the flusher is still running and the caller must Abort (and unblock
// the underlying writer, e.g. by closing the connection).
func (cw *Writer) Close(ctx context.Context) error {
	cw.mu.Lock()
	if !cw.closing {
		cw.closing = true
		cw.broadcast()
	}
	cw.mu.Unlock()
	cw.kick()
	if err := cw.Flush(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil
		}
		return err
	}
	// Drained and closing: the flusher is not in a write and was kicked,
	// so it returns at once; no need to race ctx against it.
	<-cw.done
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.err != nil && !errors.Is(cw.err, ErrClosed) {
		return cw.err
	}
	return nil
}

// Abort drops what is pending and ends the Writer: Writes, Flush and Close
// return err from now on (ErrClosed when err is nil). A flusher blocked in
// the underlying Write stays there until the caller unblocks it, typically
// by closing the connection; Done reports when it has returned.
func (cw *Writer) Abort(err error) {
	if err == nil {
		err = ErrClosed
	}
	cw.mu.Lock()
	if cw.err == nil {
		cw.err = err
	}
	cw.pending, cw.spare = nil, nil
	cw.broadcast()
	cw.mu.Unlock()
	cw.kick()
}

// Err returns the error that ended the Writer (a failed underlying Write or
// Abort's), or nil.
func (cw *Writer) Err() error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.err
}

// Buffered is the number of bytes accepted but not yet handed to the
// underlying writer.
func (cw *Writer) Buffered() int {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return len(cw.pending)
}

// Done is closed once the flusher goroutine has returned.
func (cw *Writer) Done() <-chan struct{} { return cw.done }

// idleTimer is the flusher's one reusable timer for releasing buffers.
type idleTimer struct{ t *time.Timer }

// wait blocks until wake fires (false) or d passes (true).
func (it *idleTimer) wait(wake <-chan struct{}, d time.Duration) bool {
	if it.t == nil {
		it.t = time.NewTimer(d)
	} else {
		it.t.Reset(d)
	}
	select {
	case <-wake:
		it.t.Stop()
		return false
	case <-it.t.C:
		return true
	}
}

func (it *idleTimer) stop() {
	if it.t != nil {
		it.t.Stop()
	}
}
