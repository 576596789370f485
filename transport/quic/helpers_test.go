package quic

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/transport/transporttest"
)

// testCA is the conformance suite's throwaway cluster CA.
type testCA = transporttest.CA

func newTestCA(t testing.TB) *testCA { return transporttest.NewCA(t) }

// node is one test broker's transport and what reopening it needs.
type node struct {
	id  core.NodeID
	tls *plugins.PeerTLS
	cfg map[string]string
	tr  *Transport
}

func (n *node) peer() core.Peer { return core.Peer{ID: n.id, Addr: n.tr.Addr().String()} }

// openNode opens a transport for id on 127.0.0.1 (bind "" picks a port).
func openNode(t testing.TB, ca *testCA, id string, bind string, cfg map[string]string) *node {
	t.Helper()
	n := &node{id: core.NodeID(id), tls: ca.Node(t, id), cfg: cfg}
	n.tr = reopen(t, n, bind)
	return n
}

func reopen(t testing.TB, n *node, bind string) *Transport {
	t.Helper()
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	tr, err := open(context.Background(), plugins.TransportEnv{NodeID: n.id, Bind: bind, PeerTLS: n.tls, Config: n.cfg})
	if err != nil {
		t.Fatal(err)
	}
	tr.setRetireLinger(50 * time.Millisecond)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// openStream opens a stream from a to b within 10 s.
func openStream(t testing.TB, a, b *node) core.Stream {
	t.Helper()
	l, err := a.tr.Dial(context.Background(), b.peer())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.OpenStream(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func accept(t testing.TB, n *node) core.Stream {
	t.Helper()
	s, err := n.tr.Accept(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitGoroutines waits (bounded) until the goroutine count is back to
// base plus a little slack for the runtime and the test framework.
func waitGoroutines(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d, baseline %d\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readAll reads s until EOF or error within d.
func readAll(t testing.TB, s core.Stream, d time.Duration) []byte {
	t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(s)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	_ = s.SetReadDeadline(time.Time{})
	return b
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func numGoroutine() int { return runtime.NumGoroutine() }
