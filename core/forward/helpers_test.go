package forward_test

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
	"github.com/fibrilgo/fibril/core/wire/wiretest"
)

// The relay is tested through the session layer that drives it: a real
// session.Server on 127.0.0.1 with a router that says Forward, a raw
// client in front of it, and a scripted fake owner behind it.

// fakeAuth accepts user/secret for "alice" and "bob", and "@node"/"s3cret"
// as the node principal.
type fakeAuth struct{}

func (fakeAuth) Authenticate(_ context.Context, user, pw string, _ netip.Addr) (session.Principal, error) {
	switch {
	case user == "@node" && pw == "s3cret":
		return session.Principal{Name: "@node", Node: true, Method: "node-secret"}, nil
	case (user == "alice" || user == "bob") && pw == "secret":
		return session.Principal{Name: user, Method: "password"}, nil
	}
	return session.Principal{}, core.Errorf(core.ErrUnauthorized, "unknown user or wrong password")
}

// env is one broker (queue engine + session server) on 127.0.0.1.
type env struct {
	t   *testing.T
	qm  *queue.Manager
	srv *session.Server
	ln  net.Listener
}

func newEnv(t *testing.T, mods ...func(*session.Options)) *env {
	t.Helper()
	dir := t.TempDir()
	qm, err := queue.Open(queue.Options{Dir: dir + "/queues", Storage: storage.Options{Fsync: storage.FsyncNone}, AutoCreate: true, MaxMessageBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	opts := session.Options{
		Queues:          qm,
		Auth:            fakeAuth{},
		OwnerID:         wire.UUID{0xab, 1},
		SkeletonDir:     dir + "/sessions",
		Heartbeat:       time.Second,
		Logger:          testLogger(t, slog.LevelDebug),
		MaxFrameBytes:   2 << 20,
		MaxMessageBytes: 1 << 20,
	}
	for _, m := range mods {
		m(&opts)
	}
	srv, err := session.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	e := &env{t: t, qm: qm, srv: srv, ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(ctx, 0, "test over")
		cancel()
		_ = qm.Close()
	})
	return e
}

// client is the strict raw client of core/wire/wiretest with this
// package's conveniences; t and nc are the test and the connection, for
// tests that write raw bytes or end the socket.
type client struct {
	*wiretest.Client
	t  *testing.T
	nc net.Conn
}

func (e *env) dial() *client {
	e.t.Helper()
	wc := wiretest.Dial(e.t, e.ln.Addr().String())
	return &client{Client: wc, t: e.t, nc: wc.Conn()}
}

// login is HELLO + AUTH as alice.
func (c *client) login() {
	c.t.Helper()
	id := c.Send(wire.OpHello, &wire.Hello{ClientName: "test", ClientVersion: "0", ProtocolVersion: 1})
	if ok := c.Expect(wire.OpHelloOK, id).(*wire.HelloOK); ok.Compliance != wire.Compliance || ok.ProtocolVersion != 1 {
		c.t.Fatalf("HELLO_OK = %+v", ok)
	}
	id = c.Send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "secret"})
	c.Expect(wire.OpAuthOK, id)
}

// testLogger logs to t's output until t's cleanup, and nowhere after: an
// upstream's watchdog may still log once the test has returned, and
// writing to a finished test's output panics.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	out := t.Output()
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return len(p), nil
		}
		return out.Write(p)
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
