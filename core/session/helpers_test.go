package session

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
	"github.com/fibrilgo/fibril/core/wire/wiretest"
)

// fakeAuth accepts user/secret for "alice" and "bob", and "@node"/"s3cret"
// as the node principal.
type fakeAuth struct{ calls atomic.Int64 }

func (a *fakeAuth) Authenticate(_ context.Context, user, pw string, _ netip.Addr) (Principal, error) {
	a.calls.Add(1)
	switch {
	case user == "@node" && pw == "s3cret":
		return Principal{Name: "@node", Node: true, Method: "node-secret"}, nil
	case (user == "alice" || user == "bob") && pw == "secret":
		return Principal{Name: user, Method: "password"}, nil
	}
	return Principal{}, core.Errorf(core.ErrUnauthorized, "unknown user or wrong password")
}

// env is one broker (queue engine + session server) on 127.0.0.1.
type env struct {
	t       *testing.T
	dir     string
	opts    Options
	qm      *queue.Manager
	srv     *Server
	ln      net.Listener
	grace   atomic.Int64 // ms
	restart atomic.Int64 // ms
	writes  *writeStacks // when set before start, records the stack of every socket write
}

// writeStacks records, for each Write on a broker-side socket, the stack
// of the goroutine that made it: tests use it to see who wrote a frame.
type writeStacks struct {
	mu     sync.Mutex
	stacks []string
}

func (w *writeStacks) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.stacks...)
}

type stackListener struct {
	net.Listener
	w *writeStacks
}

func (l stackListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stackConn{TCPConn: nc.(*net.TCPConn), w: l.w}, nil
}

// stackConn keeps every method of the TCP socket (CloseWrite included).
type stackConn struct {
	*net.TCPConn
	w *writeStacks
}

func (c *stackConn) Write(b []byte) (int, error) {
	buf := make([]byte, 16<<10)
	st := string(buf[:runtime.Stack(buf, false)])
	c.w.mu.Lock()
	c.w.stacks = append(c.w.stacks, st)
	c.w.mu.Unlock()
	return c.TCPConn.Write(b)
}

type envOption func(*Options)

func newEnv(t *testing.T, mods ...envOption) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.grace.Store(5000)
	e.restart.Store(60000)
	e.start(wire.UUID{0xab, 1}, mods...)
	t.Cleanup(e.stop)
	return e
}

func (e *env) start(owner wire.UUID, mods ...envOption) {
	t := e.t
	qm, err := queue.Open(queue.Options{Dir: e.dir + "/queues", Storage: storage.Options{Fsync: storage.FsyncNone}, AutoCreate: true, MaxMessageBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	e.qm = qm
	e.opts = Options{
		Queues:          qm,
		Auth:            &fakeAuth{},
		OwnerID:         owner,
		SkeletonDir:     e.dir + "/sessions",
		Heartbeat:       time.Second,
		Logger:          slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		MaxFrameBytes:   2 << 20,
		MaxMessageBytes: 1 << 20,
		Settings: func() Settings {
			return Settings{ReconnectGrace: time.Duration(e.grace.Load()) * time.Millisecond,
				RestartTTL: time.Duration(e.restart.Load()) * time.Millisecond}
		},
	}
	for _, m := range mods {
		m(&e.opts)
	}
	e.srv, err = New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if e.writes != nil {
		e.ln = stackListener{Listener: e.ln, w: e.writes}
	}
	srv, ln := e.srv, e.ln
	go func() { _ = srv.Serve(ln) }()
}

// stop shuts the server down gracefully and closes the engine.
func (e *env) stop() {
	if e.srv == nil {
		return
	}
	_ = e.ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	e.srv.Shutdown(ctx, 0, "test over")
	cancel()
	_ = e.qm.Close()
	e.srv = nil
}

// restartBroker stops and starts the broker on the same data directory
// and owner id (a restart in place).
func (e *env) restartBroker() {
	owner := e.opts.OwnerID
	e.stop()
	e.start(owner)
}

// client is the strict raw client of core/wire/wiretest with this
// package's conveniences; t and nc are the test and the connection, for
// tests that write raw bytes or end the socket.
type client struct {
	*wiretest.Client
	t     *testing.T
	nc    net.Conn
	ident wire.ResumeIdentity
}

func (e *env) dial() *client {
	e.t.Helper()
	wc := wiretest.Dial(e.t, e.ln.Addr().String())
	return &client{Client: wc, t: e.t, nc: wc.Conn()}
}

// hello sends HELLO (with the stored identity when resume is set) and
// returns HELLO_OK.
func (c *client) hello(resume bool) *wire.HelloOK {
	c.t.Helper()
	h := &wire.Hello{ClientName: "test", ClientVersion: "0", ProtocolVersion: 1}
	if resume {
		h.Resume = wire.Some(c.ident)
	}
	id := c.Send(wire.OpHello, h)
	ok := c.Expect(wire.OpHelloOK, id).(*wire.HelloOK)
	if ok.Compliance != wire.Compliance || ok.ProtocolVersion != 1 {
		c.t.Fatalf("HELLO_OK = %+v", ok)
	}
	c.ident = ok.Identity()
	return ok
}

func (c *client) auth(user, pw string) {
	c.t.Helper()
	id := c.Send(wire.OpAuth, &wire.Auth{Username: user, Password: pw})
	c.Expect(wire.OpAuthOK, id)
}

// login is HELLO + AUTH as alice.
func (c *client) login() *wire.HelloOK {
	c.t.Helper()
	ok := c.hello(false)
	c.auth("alice", "secret")
	return ok
}

func (c *client) publish(topic string, payload string, confirm bool) uint64 {
	c.t.Helper()
	return c.Send(wire.OpPublish, &wire.Publish{Topic: topic, RequireConfirm: confirm, Payload: []byte(payload)})
}

func (c *client) subscribe(topic string, prefetch uint32, autoAck bool) *wire.SubscribeOK {
	c.t.Helper()
	id := c.Send(wire.OpSubscribe, &wire.Subscribe{Topic: topic, Prefetch: prefetch, AutoAck: autoAck})
	return c.Expect(wire.OpSubscribeOK, id).(*wire.SubscribeOK)
}

// nextDeliver reads frames until a DELIVER arrives, answering broker PINGs.
func (c *client) nextDeliver() (wire.FrameHeader, *wire.Deliver) {
	c.t.Helper()
	for {
		h, b := c.Read(5 * time.Second)
		switch h.Op {
		case wire.OpDeliver:
			return h, b.(*wire.Deliver)
		case wire.OpPing:
			c.SendID(wire.OpPong, h.RequestID, nil)
		default:
			c.t.Fatalf("expected DELIVER, got %s id %d: %+v", h.Op, h.RequestID, b)
		}
	}
}

func (c *client) ack(d *wire.Deliver) {
	c.SendID(wire.OpAck, d.DeliveryTag, &wire.Ack{Topic: d.Topic, Group: d.Group, Partition: d.Partition, Tags: []uint64{d.DeliveryTag}})
}

// rawBody is a body sent as given (malformed ones included).
type rawBody []byte

func (r rawBody) AppendTo(b []byte) []byte { return append(b, r...) }

// ffs is a FORWARDED_SESSION body from gateway origin for alice's client.
func ffs(origin string, hop uint8, v2 bool, flags uint8) *wire.ForwardedSession {
	return &wire.ForwardedSession{V2: v2, OriginNodeID: origin, HopCount: hop, ActingUsername: "alice",
		ClientID: "0190c0de-0000-7000-8000-000000000001", ConnectionID: 42, ClientRemoteAddr: "127.0.0.1:5123", Flags: flags}
}
