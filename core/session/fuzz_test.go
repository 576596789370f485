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
	"runtime"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
	"github.com/fibrilgo/fibril/core/wire/wiretest"
)

// The network face under arbitrary input (docs/protocol.md#malformed):
// after a valid handshake, a client sends whatever frames the fuzzer makes
// — any op, any body, complete frames (fuzzInput says how the bytes are
// cut; a torn frame only makes the broker wait for the rest, and the frame
// layer has fuzz targets of its own in core/wire) — and the broker must
// not panic, must not hang
// (a PING sent afterwards is answered, unless the broker closed the
// connection, which it may for some inputs), must keep serving other
// connections, and must not allocate beyond a bound per input byte
// (checkAllocBound). FuzzOwnerSession does the same on the owner side of a
// forwarded session (@node, FORWARDED_SESSION first). Seeds: the wire
// vectors' client frames, when ../shared/protocol/wire_vectors.json is
// there, and a few frames built here.
//
//	go test -run '^$' -fuzz FuzzSessionFrames -fuzztime 10m ./core/session
func FuzzSessionFrames(f *testing.F) {
	addFrameSeeds(f)
	srv := fuzzBroker(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := pipeClient(t, srv)
		hello(t, c)
		c.Expect(wire.OpAuthOK, c.Send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "secret"}))
		driveFrames(t, c, data)
	})
}

// FuzzOwnerSession is FuzzSessionFrames on a forwarded session: the
// connection logs in as @node and announces a gateway's client first.
func FuzzOwnerSession(f *testing.F) {
	addFrameSeeds(f)
	srv := fuzzBroker(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := pipeClient(t, srv)
		hello(t, c)
		c.Expect(wire.OpAuthOK, c.Send(wire.OpAuth, &wire.Auth{Username: "@node", Password: "s3cret"}))
		c.Expect(wire.OpForwardedSessionOK, c.Send(wire.OpForwardedSession, &wire.ForwardedSession{V2: true,
			OriginNodeID: "gateway", HopCount: 1, ActingUsername: "alice", ClientID: "0190c0de-0000-7000-8000-000000000009",
			ConnectionID: 1, ClientRemoteAddr: "127.0.0.1:1"}))
		driveFrames(t, c, data)
	})
}

// pipeClient connects a raw client to srv over an in-memory pipe (no
// socket: a long fuzz run opens a connection per input, more than the
// loopback's ports could give).
func pipeClient(t *testing.T, srv *Server) *wiretest.Client {
	ours, theirs := net.Pipe()
	go srv.ServeConn(theirs)
	return wiretest.New(t, ours)
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
	defer nc.Close()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	defer checkAllocBound(t, before.TotalAlloc, len(data))
	const pingID = 1<<63 - 7
	// Written while the answers are read: the pipe holds nothing, and a
	// broker whose answers are not read stops reading (backpressure).
	go func() {
		_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(fuzzFrames(data)); err == nil {
			_, _ = nc.Write(wire.AppendFrame(nil, wire.OpPing, pingID, nil))
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	_ = nc.SetReadDeadline(deadline)
	for {
		h, _, err := wire.ReadFrame(nc, nil, 64<<20)
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed):
			return // the broker closed the connection: allowed
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the broker neither answered a PING nor closed the connection within 10 s after %d fuzz bytes", len(data))
			}
			t.Fatalf("reading the broker's answers: %v", err)
		case h.Op == wire.OpPong && h.RequestID == pingID:
			return
		case h.Op == wire.OpPing:
			go func() { _, _ = nc.Write(wire.AppendFrame(nil, wire.OpPong, h.RequestID, nil)) }()
		}
	}
}

// fuzzAllocBase and fuzzAllocPerByte bound what one input may make the
// process allocate: a frame can claim a large body, but the broker must
// not allocate more than its limits before it has the bytes.
const (
	fuzzAllocBase    = 64 << 20
	fuzzAllocPerByte = 256
)

// checkAllocBound fails t when the process allocated more than the bound
// while it served an input of n bytes (TotalAlloc counts the fuzz engine
// too, which the base covers).
func checkAllocBound(t *testing.T, before uint64, n int) {
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if got, limit := after.TotalAlloc-before, uint64(fuzzAllocBase+fuzzAllocPerByte*n); got > limit {
		t.Fatalf("%d fuzz bytes made the process allocate %d MiB (bound %d MiB)", n, got>>20, limit>>20)
	}
}

// fuzzFrames cuts the fuzzer's bytes into complete frames: each is an op
// byte, a 2-byte big-endian body length (cut to what is left) and the
// body; the request ids count up from 1000.
func fuzzFrames(data []byte) []byte {
	var out []byte
	for id := uint64(1000); len(data) >= 3; id++ {
		op, n := wire.Op(data[0]), int(data[1])<<8|int(data[2])
		data = data[3:]
		n = min(n, len(data))
		out = wire.AppendFrame(out, op, id, rawSeed(data[:n]))
		data = data[n:]
	}
	return out
}

// fuzzInput is fuzzFrames' inverse for the seeds.
func fuzzInput(op wire.Op, body []byte) []byte {
	return append([]byte{byte(op), byte(len(body) >> 8), byte(len(body))}, body...)
}

// fuzzBroker starts one broker (engine and session server, no fsync) for
// the whole fuzz run.
func fuzzBroker(f *testing.F) *Server {
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
	f.Cleanup(func() { _ = qm.Close() })
	return srv
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

// addFrameSeeds adds single frames and sequences of them (in fuzzInput's
// form): the vectors' client bodies with their ops, and frames built here.
func addFrameSeeds(f *testing.F) {
	if raw, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "protocol", "wire_vectors.json")); err == nil {
		var hexes map[string]string
		if json.Unmarshal(raw, &hexes) == nil {
			var all []byte
			for name, op := range clientVectors {
				b, err := hex.DecodeString(hexes[name])
				if err != nil || len(b) == 0 {
					continue
				}
				f.Add(fuzzInput(op, b))
				all = append(all, fuzzInput(op, b)...)
			}
			f.Add(all)
		}
	}
	body := func(e wire.Encoder) []byte { return e.AppendTo(nil) }
	f.Add(fuzzInput(wire.OpPublish, body(&wire.Publish{Topic: "fz", RequireConfirm: true, Payload: []byte("x")})))
	f.Add(append(fuzzInput(wire.OpSubscribe, body(&wire.Subscribe{Topic: "fz", Prefetch: 1})),
		fuzzInput(wire.OpAck, body(&wire.Ack{Topic: "fz", Tags: []uint64{1}}))...))
	f.Add(fuzzInput(wire.Op(250), []byte{1, 2, 3}))
	f.Add(fuzzInput(wire.OpHello, nil))
}

// rawSeed is a body given as bytes.
type rawSeed []byte

func (r rawSeed) AppendTo(b []byte) []byte { return append(b, r...) }
