//go:build unix

package client

import "syscall"

// rawWrite makes one non-blocking write of b to rc's socket (Go keeps its
// sockets in non-blocking mode) and returns how many bytes the kernel
// took: 0 when the socket buffer is full, the deadline passed or the
// write failed. It never waits.
func rawWrite(rc syscall.RawConn, b []byte) int {
	n := 0
	rc.Write(func(fd uintptr) bool {
		if m, err := syscall.Write(int(fd), b); err == nil && m > 0 {
			n = m
		}
		return true // one attempt: never wait for the socket
	})
	return n
}
