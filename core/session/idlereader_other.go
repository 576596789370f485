//go:build !unix

package session

import "net"

// newIdleReader: only Unix sockets are read through their RawConn; other
// systems keep the bufio.Reader.
func newIdleReader(*net.TCPConn, *Metrics, []byte) (frameSource, bool) { return nil, false }
