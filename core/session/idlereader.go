//go:build unix

package session

import (
	"io"
	"net"
	"sync"
	"syscall"
)

// readBufs are the read buffers of plaintext TCP connections (idleReader).
var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// idleReader reads a plaintext TCP connection with a buffer it holds only
// while bytes wait in it. It reads through the socket's syscall.RawConn:
// the read is tried first, and only when the socket has nothing (EAGAIN)
// does the reader wait for input — with the buffer back in its pool. So
// an idle client connection holds no read buffer at all (ten thousand of
// them save 160 MiB), and a busy one makes the same syscalls as through
// net.Conn: one read per buffer's worth, a wait only when empty. Deadlines
// and Close work as on the net.Conn (the poller's wait honours them).
type idleReader struct {
	rc   syscall.RawConn
	m    *Metrics
	buf  *[]byte // from readBufs; nil while nothing is buffered
	r, w int     // unread bytes are (*buf)[r:w]
	err  error   // the read error to report once the buffer is drained
}

// newIdleReader reads tcp from now on, taking over from a reader that may
// still hold bytes the handshake read ahead (pre); false when the socket
// offers no raw access.
func newIdleReader(tcp *net.TCPConn, m *Metrics, pre []byte) (*idleReader, bool) {
	rc, err := tcp.SyscallConn()
	if err != nil {
		return nil, false
	}
	r := &idleReader{rc: rc, m: m}
	if len(pre) > 0 {
		b := make([]byte, max(len(pre), readBufSize))
		r.buf, r.w = &b, copy(b, pre)
	}
	return r, true
}

// Buffered is how many read bytes wait (bufio.Reader's meaning).
func (r *idleReader) Buffered() int { return r.w - r.r }

func (r *idleReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.r == r.w {
		if r.err != nil {
			err := r.err
			r.err = nil
			return 0, err
		}
		if len(p) >= readBufSize { // a large body: straight into it
			return r.read(func() []byte { return p }, false)
		}
		n, err := r.read(func() []byte {
			if r.buf == nil {
				r.buf = readBufs.Get().(*[]byte)
			}
			return *r.buf
		}, true)
		if n == 0 {
			return 0, err
		}
		r.r, r.w, r.err = 0, n, err
	}
	n := copy(p, (*r.buf)[r.r:r.w])
	r.r += n
	if r.r == r.w {
		r.release()
	}
	return n, nil
}

// release gives the drained buffer back.
func (r *idleReader) release() {
	if r.buf != nil {
		if cap(*r.buf) == readBufSize {
			readBufs.Put(r.buf)
		}
		r.buf = nil
	}
	r.r, r.w = 0, 0
}

// read makes one read of the socket into dst(): at once when it has input,
// otherwise after waiting for it, having given a pooled buffer back
// (pooled) for the wait. 0 and io.EOF at the end of the stream.
func (r *idleReader) read(dst func() []byte, pooled bool) (n int, err error) {
	var buf []byte
	rerr := r.rc.Read(func(fd uintptr) bool {
		if buf == nil {
			buf = dst()
		}
		for {
			n, err = syscall.Read(int(fd), buf)
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EAGAIN {
			if pooled {
				r.release()
				buf = nil
			}
			return false // wait until readable, then try again
		}
		return true
	})
	switch {
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	r.m.BytesIn.Add(float64(n))
	return n, nil
}
