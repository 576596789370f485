//go:build !unix

package client

import "net"

// rawWriter is Unix only: elsewhere every frame goes through the
// connection's writer goroutine.
type rawWriter struct{}

func newRawWriter(net.Conn) *rawWriter { return nil }

func (*rawWriter) write([]byte) int { return 0 }
