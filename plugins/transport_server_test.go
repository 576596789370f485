package plugins

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/internal/frame"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// fakeTransport opens streams that are one end of a net.Pipe and records
// how they ended.
type fakeTransport struct {
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	opened []*fakeStream
}

func (f *fakeTransport) Accept(ctx context.Context) (core.Stream, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.closed:
		return nil, core.ErrClosed
	}
}

func (f *fakeTransport) Dial(_ context.Context, p core.Peer) (core.Link, error) {
	return fakeLink{f, p}, nil
}
func (f *fakeTransport) Addr() net.Addr { return nil }
func (f *fakeTransport) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

type fakeLink struct {
	f *fakeTransport
	p core.Peer
}

func (l fakeLink) OpenStream(context.Context) (core.Stream, error) {
	if l.p.Addr == "refuse" {
		return nil, core.Errorf(core.ErrPeerRefused, "fake: refused")
	}
	a, b := net.Pipe()
	s := &fakeStream{Conn: a, far: b}
	l.f.mu.Lock()
	l.f.opened = append(l.f.opened, s)
	l.f.mu.Unlock()
	return s, nil
}
func (l fakeLink) Peer() core.Peer { return l.p }
func (l fakeLink) Close() error    { return nil }

type fakeStream struct {
	net.Conn
	far     net.Conn
	aborted atomic.Bool
}

func (s *fakeStream) CloseWrite() error     { return nil }
func (s *fakeStream) Abort() error          { s.aborted.Store(true); s.far.Close(); return s.Conn.Close() }
func (s *fakeStream) PeerNode() core.NodeID { return "" }

func configuredServer(t *testing.T, claim time.Duration) (*TransportServer, *fakeTransport, string) {
	t.Helper()
	ft := &fakeTransport{closed: make(chan struct{})}
	srv := NewTransportServer(func(context.Context, TransportEnv) (core.Transport, error) { return ft, nil }, Info{Name: "fake", Version: "test"}, nil)
	srv.claimTimeout = claim
	t.Cleanup(func() { _ = srv.CloseBackend() })
	ctx := context.Background()
	if h, _ := srv.Health(ctx, nil); h.GetOk() {
		t.Fatal("healthy before Configure")
	}
	if _, err := srv.Configure(ctx, &pluginpb.TransportConfigureRequest{EnvJson: []byte(`{}`), ApiVersion: 99}); !errors.Is(contract.FromStatus(ctx, err), core.ErrBadRequest) {
		t.Fatalf("Configure at API version 99: %v", err)
	}
	env, _ := json.Marshal(TransportEnv{NodeID: "n1"})
	resp, err := srv.Configure(ctx, &pluginpb.TransportConfigureRequest{EnvJson: env, ApiVersion: int32(core.TransportAPIVersion)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := srv.Configure(ctx, &pluginpb.TransportConfigureRequest{EnvJson: env, ApiVersion: int32(core.TransportAPIVersion)})
	if err != nil || again.GetDataSocket() != resp.GetDataSocket() || resp.GetListenAddr() != nil {
		t.Fatalf("second Configure: %v, %v (first %v)", again, err, resp)
	}
	if h, _ := srv.Health(ctx, nil); !h.GetOk() {
		t.Fatalf("not healthy after Configure: %s", h.GetDetail())
	}
	return srv, ft, resp.GetDataSocket()
}

func openFake(t *testing.T, srv *TransportServer, addr string) (*pluginpb.TransportStreamInfo, error) {
	ctx := context.Background()
	l, err := srv.Dial(ctx, &pluginpb.TransportDialRequest{PeerId: "n2", PeerAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	return srv.OpenStream(ctx, &pluginpb.TransportOpenStreamRequest{LinkId: l.GetLinkId()})
}

// A stream whose token nobody claims is aborted, and counted.
func TestTransportServerUnclaimedTokenExpires(t *testing.T) {
	srv, ft, _ := configuredServer(t, 200*time.Millisecond)
	if _, err := openFake(t, srv, "x"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ft.opened[0].aborted.Load() {
		if time.Now().After(deadline) {
			t.Fatal("unclaimed stream not aborted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, _ := srv.Stats(context.Background(), nil)
	if st.GetAborts() != 1 || st.GetStreamsOpenOut() != 0 || st.GetOpensOk() != 1 {
		t.Fatalf("stats %v", st)
	}
}

// Unknown tokens, short tokens and silence close the data connection; a
// valid token after them still works.
func TestTransportServerRejectsBadClaims(t *testing.T) {
	_, _, sock := configuredServer(t, time.Second)
	unknown := make([]byte, frame.TokenLen)
	_, _ = rand.Read(unknown)
	for name, send := range map[string][]byte{"unknown token": unknown, "short token": unknown[:5], "nothing": nil} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		if len(send) > 0 {
			_, _ = c.Write(send)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("%s: read %d, %v; want the connection closed", name, n, err)
		}
		c.Close()
	}
	srv, ft, sock := configuredServer(t, 10*time.Second)
	info, err := openFake(t, srv, "x")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(info.GetToken()); err != nil {
		t.Fatal(err)
	}
	// One DATA frame, as the host's stream writes it.
	ping := make([]byte, frame.HeaderLen+4)
	frame.PutHeader(ping, frame.Data, 4)
	copy(ping[frame.HeaderLen:], "ping")
	if _, err := c.Write(ping); err != nil {
		t.Fatal(err)
	}
	far := ft.opened[0].far
	_ = far.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(far, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("transport's stream read %q, %v", buf, err)
	}
	// The token is spent: a second claim with it is refused.
	c2, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = c2.Write(info.GetToken())
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("second claim of a token: %v, want the connection closed", err)
	}
}

// Errors cross as the core sentinels.
func TestTransportServerErrors(t *testing.T) {
	srv, _, _ := configuredServer(t, time.Second)
	ctx := context.Background()
	if _, err := openFake(t, srv, "refuse"); !errors.Is(contract.RefusedError(ctx, "open", err), core.ErrPeerRefused) {
		t.Fatalf("refused OpenStream: %v", err)
	}
	if _, err := srv.OpenStream(ctx, &pluginpb.TransportOpenStreamRequest{LinkId: "nope"}); !errors.Is(contract.RefusedError(ctx, "open", err), core.ErrPeerRefused) {
		t.Fatalf("unknown link: %v", err)
	}
	st, _ := srv.Stats(ctx, nil)
	if st.GetOpensRefused() != 1 {
		t.Fatalf("stats %v", st)
	}
	if err := srv.CloseBackend(); err != nil {
		t.Fatal(err)
	}
	if h, _ := srv.Health(ctx, nil); h.GetOk() {
		t.Fatal("healthy after Close")
	}
	_, err := srv.Dial(ctx, &pluginpb.TransportDialRequest{PeerId: "n2"})
	if err := contract.RefusedError(ctx, "dial", err); !errors.Is(err, core.ErrClosed) || !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("Dial after Close: %v, want ErrClosed and ErrPeerRefused", err)
	}
}
