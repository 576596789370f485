package peer

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/fibrilgo/fibril/core"
)

// fakeTransport hands out fakeLinks and remembers them.
type fakeTransport struct{ dialed []*fakeLink }

func (f *fakeTransport) Accept(ctx context.Context) (core.Stream, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeTransport) Dial(_ context.Context, p core.Peer) (core.Link, error) {
	if p.Addr == "" {
		return nil, core.Errorf(core.ErrPeerRefused, "no address")
	}
	l := &fakeLink{peer: p}
	f.dialed = append(f.dialed, l)
	return l, nil
}

func (f *fakeTransport) Addr() net.Addr { return nil }
func (f *fakeTransport) Close() error   { return nil }

type fakeLink struct {
	peer   core.Peer
	closed bool
}

func (l *fakeLink) OpenStream(context.Context) (core.Stream, error) {
	return nil, core.Errorf(core.ErrPeerRefused, "fake")
}
func (l *fakeLink) Peer() core.Peer { return l.peer }
func (l *fakeLink) Close() error    { l.closed = true; return nil }

// One link per peer, reused while the peer keeps its address, replaced
// (the old one closed) when it moves, dropped by Retain and Close.
func TestLinks(t *testing.T) {
	ctx := context.Background()
	tr := &fakeTransport{}
	links := NewLinks(tr)
	a1, err := links.Get(ctx, core.Peer{ID: "a", Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := links.Get(ctx, core.Peer{ID: "a", Addr: "127.0.0.1:1"}); again != a1 || len(tr.dialed) != 1 {
		t.Fatalf("same peer, same address: dialled %d times", len(tr.dialed))
	}
	a2, _ := links.Get(ctx, core.Peer{ID: "a", Addr: "127.0.0.1:2"})
	if a2 == a1 || !a1.(*fakeLink).closed || a2.Peer().Addr != "127.0.0.1:2" {
		t.Fatal("a moved peer must get a new link and the old one closed")
	}
	b, _ := links.Get(ctx, core.Peer{ID: "b", Addr: "127.0.0.1:3"})
	if _, err := links.Get(ctx, core.Peer{ID: "c"}); !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("dial error: %v", err)
	}
	links.Retain(map[core.NodeID]bool{"b": true})
	if !a2.(*fakeLink).closed || b.(*fakeLink).closed {
		t.Fatal("Retain must close exactly the links of nodes that left")
	}
	links.Close()
	if !b.(*fakeLink).closed {
		t.Fatal("Close must close every link")
	}
	if _, err := links.Get(ctx, core.Peer{ID: "b", Addr: "127.0.0.1:3"}); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}
