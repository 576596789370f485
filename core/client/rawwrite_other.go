//go:build !unix

package client

import "syscall"

// rawWrite writes nothing here: every frame goes through the connection's
// writer goroutine.
func rawWrite(syscall.RawConn, []byte) int { return 0 }
