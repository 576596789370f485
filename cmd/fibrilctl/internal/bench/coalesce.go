package bench

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// maxPending bounds the bytes a coalescing connection holds before
// writers wait for the flusher.
const maxPending = 4 << 20

// coalescingConn combines the client's many small writes (one per frame:
// every publish and every ack is its own write(2) in core/client) into few
// large ones: Write copies into a pending buffer and a single flusher
// goroutine writes whatever accumulated while its previous write ran.
// Under load that is one syscall for many frames; when idle it costs one
// goroutine handoff per write. A write error is returned by the next
// Write and closes the connection.
//
// It exists so that --coalesce can measure the broker with a client that
// batches its writes (as NATS clients do); without it the bench measures
// the Go SDK as it is.
type coalescingConn struct {
	net.Conn
	mu        sync.Mutex
	cond      *sync.Cond
	buf       []byte
	spare     []byte
	err       error
	kick      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// Counters for the report: Write calls, write(2) calls, bytes.
	writes, flushes, bytes atomic.Uint64
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, kick: make(chan struct{}, 1), done: make(chan struct{})}
	cc.cond = sync.NewCond(&cc.mu)
	go cc.flushLoop()
	return cc
}

// coalescingDial is a client.Options.Dial that wraps every connection
// and keeps it for the report.
func (r *run) coalescingDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := newCoalescingConn(c)
	r.connsMu.Lock()
	r.conns = append(r.conns, cc)
	r.connsMu.Unlock()
	return cc, nil
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for len(c.buf) >= maxPending && c.err == nil {
		c.cond.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.buf = append(c.buf, p...)
	c.mu.Unlock()
	c.writes.Add(1)
	select {
	case c.kick <- struct{}{}:
	default: // a flush is already due and will take these bytes too
	}
	return len(p), nil
}

func (c *coalescingConn) flushLoop() {
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		c.mu.Lock()
		if len(c.buf) == 0 { // its bytes went out with the previous flush
			c.mu.Unlock()
			continue
		}
		// Swap buffers: writers fill the spare while b is written. spare
		// is cleared so that it can never alias the buffer in use.
		b := c.buf
		c.buf, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		_, err := c.Conn.Write(b)
		c.flushes.Add(1)
		c.bytes.Add(uint64(len(b)))
		c.mu.Lock()
		if cap(b) <= maxPending*2 {
			c.spare = b[:0]
		} else {
			c.spare = nil
		}
		if err != nil && c.err == nil {
			c.err = err
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		if err != nil {
			c.Close()
			return
		}
	}
}

func (c *coalescingConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		close(c.done)
		c.mu.Lock()
		if c.err == nil {
			c.err = net.ErrClosed
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	return err
}
