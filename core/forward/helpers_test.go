package forward_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
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
		Logger:          slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
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

// client is a strict raw Fibril client: every frame it reads is checked by
// the test.
type client struct {
	t      *testing.T
	nc     net.Conn
	nextID uint64
	open   bool // the quiet window is over from this client's side
}

func (e *env) dial() *client {
	e.t.Helper()
	nc, err := net.Dial("tcp", e.ln.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	return &client{t: e.t, nc: nc, nextID: 1}
}

func (c *client) send(op wire.Op, body wire.Encoder) uint64 {
	c.t.Helper()
	id := c.nextID
	c.nextID++
	c.sendID(op, id, body)
	return id
}

func (c *client) sendID(op wire.Op, id uint64, body wire.Encoder) {
	c.t.Helper()
	if op != wire.OpHello && op != wire.OpAuth && op != wire.OpReconcileClient {
		c.open = true
	}
	if _, err := c.nc.Write(wire.AppendFrame(nil, op, id, body)); err != nil {
		c.t.Fatalf("write %s: %v", op, err)
	}
}

// read returns the next frame, failing the test after d.
func (c *client) read(d time.Duration) (wire.FrameHeader, wire.Body) {
	c.t.Helper()
	h, b, err := c.tryRead(d)
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	return h, b
}

func (c *client) tryRead(d time.Duration) (wire.FrameHeader, wire.Body, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	h, raw, err := wire.ReadFrame(c.nc, nil, 64<<20)
	if err != nil {
		return h, nil, err
	}
	if len(raw) == 0 {
		return h, nil, nil
	}
	body, err := wire.DecodeBody(h.Op, raw)
	if err != nil {
		c.t.Fatalf("broker sent an undecodable %s: %v", h.Op, err)
	}
	return h, body, nil
}

// expect reads the next frame and requires op and request id. Once the
// quiet window is over, broker PINGs may come first: they are answered
// and skipped, as SDKs do.
func (c *client) expect(op wire.Op, id uint64) wire.Body {
	c.t.Helper()
	h, b := c.read(5 * time.Second)
	for h.Op == wire.OpPing && op != wire.OpPing && c.open {
		c.sendID(wire.OpPong, h.RequestID, nil)
		h, b = c.read(5 * time.Second)
	}
	if h.Op != op || h.RequestID != id {
		c.t.Fatalf("got %s id %d (%+v), want %s id %d", h.Op, h.RequestID, b, op, id)
	}
	return b
}

// expectError reads an error-bodied frame with the given op, id and code.
func (c *client) expectError(op wire.Op, id uint64, code uint16) *wire.ErrorBody {
	c.t.Helper()
	b := c.expect(op, id)
	eb, ok := b.(*wire.ErrorBody)
	if !ok || eb.Code != code {
		c.t.Fatalf("%s id %d = %+v, want code %d", op, id, b, code)
	}
	return eb
}

// expectSilence requires that nothing arrives within d.
func (c *client) expectSilence(d time.Duration) {
	c.t.Helper()
	h, b, err := c.tryRead(d)
	if err == nil {
		c.t.Fatalf("unexpected frame %s id %d: %+v", h.Op, h.RequestID, b)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("connection ended while expecting silence: %v", err)
	}
}

// login is HELLO + AUTH as alice.
func (c *client) login() {
	c.t.Helper()
	id := c.send(wire.OpHello, &wire.Hello{ClientName: "test", ClientVersion: "0", ProtocolVersion: 1})
	if ok := c.expect(wire.OpHelloOK, id).(*wire.HelloOK); ok.Compliance != wire.Compliance || ok.ProtocolVersion != 1 {
		c.t.Fatalf("HELLO_OK = %+v", ok)
	}
	id = c.send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "secret"})
	c.expect(wire.OpAuthOK, id)
}
