//go:build unix

package client

import (
	"net"
	"syscall"
)

// rawWriter makes a caller's one non-blocking write on a plaintext TCP
// connection (Go keeps its sockets in non-blocking mode). Its fields are
// the Conn's write lock's: the callback is made once, so a write
// allocates nothing.
type rawWriter struct {
	rc syscall.RawConn
	b  []byte
	n  int
	fn func(fd uintptr) bool
}

// newRawWriter returns nil unless nc is a plain *net.TCPConn.
func newRawWriter(nc net.Conn) *rawWriter {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &rawWriter{rc: rc}
	w.fn = func(fd uintptr) bool {
		if m, err := syscall.Write(int(fd), w.b); err == nil && m > 0 {
			w.n = m
		}
		return true // one attempt: never wait for the socket
	}
	return w
}

// write returns how many bytes of b the kernel took: 0 when the socket
// buffer is full, the write deadline has passed or the write failed. It
// never waits.
func (w *rawWriter) write(b []byte) int {
	w.b, w.n = b, 0
	w.rc.Write(w.fn)
	w.b = nil
	return w.n
}
