package main

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
)

// runCLI runs the command line args with environ and returns its exit code
// and what it wrote.
func runCLI(t *testing.T, args []string, environ ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, environ, &out, &errOut)
	return code, out.String(), errOut.String()
}

// syncBuffer is a bytes.Buffer safe for the broker's logger and the test
// to use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freePort returns a loopback TCP port that was free a moment ago: the
// kernel picks it from the ephemeral range, so it is never a default port
// that a broker on the developer's machine may hold.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
