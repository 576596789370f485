package session

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
	"github.com/fibrilgo/fibril/core/wire/wiretest"
)

// The network face under arbitrary input (docs/protocol.md#malformed):
// after a valid handshake, a client writes whatever the fuzzer makes — any
// bytes, read as frames — and the broker must not panic, must not hang
// (a PING sent afterwards is answered, unless the broker closed the
// connection, which it may for some inputs), and must keep serving other
// connections. FuzzOwnerSession does the same on the owner side of a
// forwarded session (@node, FORWARDED_SESSION first). Seeds: the wire
// vectors' client frames, when ../shared/protocol/wire_vectors.json is
// there, and a few frames built here.
//
//	go test -run '^$' -fuzz FuzzSessionFrames -fuzztime 10m ./core/session
func FuzzSessionFrames(f *testing.F) {
	addFrameSeeds(f)
	addr := fuzzBroker(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := wiretest.Dial(t, addr)
		defer c.Conn().Close()
		hello(t, c)
		c.Expect(wire.OpAuthOK, c.Send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "secret"}))
		driveFrames(t, c, data)
	})
}

// FuzzOwnerSession is FuzzSessionFrames on a forwarded session: the
// connection logs in as @node and announces a gateway's client first.
func FuzzOwnerSession(f *testing.F) {
	addFrameSeeds(f)
	addr := fuzzBroker(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := wiretest.Dial(t, addr)
		defer c.Conn().Close()
		hello(t, c)
		c.Expect(wire.OpAuthOK, c.Send(wire.OpAuth, &wire.Auth{Username: "@node", Password: "s3cret"}))
		c.Expect(wire.OpForwardedSessionOK, c.Send(wire.OpForwardedSession, &wire.ForwardedSession{V2: true,
			OriginNodeID: "gateway", HopCount: 1, ActingUsername: "alice", ClientID: "0190c0de-0000-7000-8000-000000000009",
			ConnectionID: 1, ClientRemoteAddr: "127.0.0.1:1"}))
		driveFrames(t, c, data)
	})
}

func hello(t *testing.T, c *wiretest.Client) {
	t.Helper()
	c.Expect(wire.OpHelloOK, c.Send(wire.OpHello, &wire.Hello{ClientName: "fuzz", ClientVersion: "0", ProtocolVersion: 1}))
}

// driveFrames writes data to the connection, then a PING, and reads until
// the PONG comes (the broker went on serving) or the connection ends (the
// broker may close it, say after an oversized frame); anything else
// within the deadline is a hang.
func driveFrames(t *testing.T, c *wiretest.Client, data []byte) {
	nc := c.Conn()
	_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(data); err != nil {
		return // the broker closed the connection on what it read: allowed
	}
	const pingID = 1<<63 - 7
	if _, err := nc.Write(wire.AppendFrame(nil, wire.OpPing, pingID, nil)); err != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_ = nc.SetReadDeadline(deadline)
		h, _, err := wire.ReadFrame(nc, nil, 64<<20)
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err):
			return
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the broker neither answered a PING nor closed the connection within 10 s after %d fuzz bytes", len(data))
			}
			return // a frame the broker wrote that this reader cannot take: the body is checked elsewhere
		case h.Op == wire.OpPong && h.RequestID == pingID:
			return
		case h.Op == wire.OpPing:
			_, _ = nc.Write(wire.AppendFrame(nil, wire.OpPong, h.RequestID, nil))
		}
	}
	t.Fatalf("no PONG within 10 s after %d fuzz bytes", len(data))
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// fuzzBroker starts one broker (engine and session server, no fsync) for
// the whole fuzz run and returns its address.
func fuzzBroker(f *testing.F) string {
	dir := f.TempDir()
	qm, err := queue.Open(queue.Options{Dir: dir + "/queues", Storage: storage.Options{Fsync: storage.FsyncNone}, AutoCreate: true, MaxMessageBytes: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(Options{Queues: qm, Auth: &fakeAuth{}, OwnerID: wire.UUID{0xf, 2}, SkeletonDir: dir + "/sessions",
		Heartbeat: time.Second, Logger: slog.New(slog.DiscardHandler), MaxFrameBytes: 2 << 20, MaxMessageBytes: 1 << 20,
		Settings: func() Settings { return Settings{ReconnectGrace: 0} }})
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	f.Cleanup(func() { _ = ln.Close(); _ = qm.Close() })
	return ln.Addr().String()
}

// clientVectors names the wire vectors of ops a client sends.
var clientVectors = map[string]wire.Op{
	"ack": wire.OpAck, "nack": wire.OpNack, "nack_no_nb": wire.OpNack, "declare": wire.OpDeclareQueue, "declare_min": wire.OpDeclareQueue,
	"declare_plexus": wire.OpDeclarePlexus, "declare_plexus_min": wire.OpDeclarePlexus, "publish": wire.OpPublish,
	"publish_custom_ct": wire.OpPublish, "publish_no_ttl": wire.OpPublish, "publish_delayed": wire.OpPublishDelayed,
	"reconcile_client": wire.OpReconcileClient, "subscribe": wire.OpSubscribe, "subscribe_min": wire.OpSubscribe,
	"subscribe_stream": wire.OpSubscribeStream, "subscribe_stream_min": wire.OpSubscribeStream,
	"topology_req": wire.OpTopology, "topology_update_ack": wire.OpTopologyUpdateAck,
}

// addFrameSeeds adds single frames and short sequences: the vectors'
// client bodies framed with their ops, and frames built here.
func addFrameSeeds(f *testing.F) {
	frame := func(op wire.Op, id uint64, body []byte) []byte {
		return wire.AppendFrame(nil, op, id, rawSeed(body))
	}
	if raw, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "protocol", "wire_vectors.json")); err == nil {
		var hexes map[string]string
		if json.Unmarshal(raw, &hexes) == nil {
			var all []byte
			for name, op := range clientVectors {
				b, err := hex.DecodeString(hexes[name])
				if err != nil || len(b) == 0 {
					continue
				}
				fr := frame(op, 7, b)
				f.Add(fr)
				all = append(all, fr...)
			}
			f.Add(all)
		}
	}
	f.Add(wire.AppendFrame(nil, wire.OpPublish, 3, &wire.Publish{Topic: "fz", RequireConfirm: true, Payload: []byte("x")}))
	f.Add(append(wire.AppendFrame(nil, wire.OpSubscribe, 4, &wire.Subscribe{Topic: "fz", Prefetch: 1}),
		wire.AppendFrame(nil, wire.OpAck, 5, &wire.Ack{Topic: "fz", Tags: []uint64{1}})...))
	f.Add([]byte{0, 0, 0, 1, 2, 3})
	f.Add(frame(wire.Op(250), 1, []byte{1, 2, 3}))
}

// rawSeed is a body given as bytes.
type rawSeed []byte

func (r rawSeed) AppendTo(b []byte) []byte { return append(b, r...) }
