package session

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// S-4, S-6, docs/protocol.md#handshake: HELLO → HELLO_OK with protocol 1, the exact
// compliance marker, the broker's owner id and fresh session ids.
func TestHelloOK(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ok := c.hello(false)
	if ok.ResumeOutcome != wire.ResumeNew || ok.OwnerID != e.opts.OwnerID || ok.ClientID.IsZero() || ok.ResumeToken.IsZero() {
		t.Fatalf("HELLO_OK = %+v", ok)
	}
	if ok.ClientID[6]>>4 != 7 {
		t.Errorf("client id %s is not a UUIDv7", ok.ClientID)
	}
}

// docs/protocol.md#answers rows 1–2: a first frame that is not HELLO, or a malformed
// HELLO → ERROR 400 and close; protocol ≠ 1 → HELLO_ERR code 1 and close.
func TestHandshakeFailures(t *testing.T) {
	e := newEnv(t)

	c := e.dial()
	c.SendID(wire.OpPing, 9, nil)
	c.ExpectError(wire.OpError, 9, wire.CodeBadRequest)
	c.ExpectClosed(time.Second)

	c = e.dial()
	if _, err := c.nc.Write(append(wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: 3, Version: 1, Op: wire.OpHello, RequestID: 1}), 'F', 'H', 'X')); err != nil {
		t.Fatal(err)
	}
	eb := c.ExpectError(wire.OpError, 1, wire.CodeBadRequest)
	// The decoder's error already names the op; the answer says it once.
	if want := `malformed HELLO: field "magic": truncated at byte 0`; eb.Message != want {
		t.Fatalf("malformed HELLO answered %q, want %q", eb.Message, want)
	}
	c.ExpectClosed(time.Second)

	c = e.dial()
	c.SendID(wire.OpHello, 1, &wire.Hello{ClientName: "x", ProtocolVersion: 2})
	c.ExpectError(wire.OpHelloErr, 1, wire.CodeUnsupportedVersion)
	c.ExpectClosed(time.Second)
}

// docs/protocol.md#answers: a frame header announcing more than max_frame_bytes → ERROR
// 400 with that request id, then close — before and after the handshake.
func TestFrameTooLarge(t *testing.T) {
	e := newEnv(t)
	big := wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: 3 << 20, Version: 1, Op: wire.OpPublish, RequestID: 77})

	c := e.dial()
	c.login()
	if _, err := c.nc.Write(big); err != nil {
		t.Fatal(err)
	}
	c.ExpectError(wire.OpError, 77, wire.CodeBadRequest)
	c.ExpectClosed(time.Second)

	c = e.dial()
	if _, err := c.nc.Write(big); err != nil {
		t.Fatal(err)
	}
	c.ExpectError(wire.OpError, 77, wire.CodeBadRequest)
	c.ExpectClosed(time.Second)
}

// S-7, docs/protocol.md#answers: before authentication only AUTH, PING and PONG are
// allowed; anything else → ERROR 401 and close. PING is answered in every
// state (S-11).
func TestAuthRequired(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.hello(false)
	c.SendID(wire.OpPing, 5, nil)
	c.Expect(wire.OpPong, 5)
	id := c.publish("orders", "x", true)
	c.ExpectError(wire.OpError, id, wire.CodeUnauthorized)
	c.ExpectClosed(time.Second)
}

// S-8, docs/protocol.md#answers: wrong credentials → AUTH_ERR 401 and close.
func TestWrongPassword(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.hello(false)
	id := c.Send(wire.OpAuth, &wire.Auth{Username: "alice", Password: "nope"})
	c.ExpectError(wire.OpAuthErr, id, wire.CodeUnauthorized)
	c.ExpectClosed(time.Second)
}

// D-1 (S-9): AUTH repeated on an authenticated connection re-checks: the
// same principal → AUTH_OK, another one → AUTH_ERR 401 and close.
func TestAuthRecheck(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.auth("alice", "secret")
	id := c.Send(wire.OpAuth, &wire.Auth{Username: "bob", Password: "secret"})
	c.ExpectError(wire.OpAuthErr, id, wire.CodeUnauthorized)
	c.ExpectClosed(time.Second)
}

// S-12, docs/protocol.md#malformed: unknown opcodes, a second HELLO and server→client ops
// → ERROR 400, connection open. Node-only ops from a user → 403 (docs/protocol.md#replication-ops,
// docs/protocol.md#owner-side), connection open.
func TestUnknownAndNodeOnlyOps(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	c.SendID(wire.Op(150), 10, nil)
	c.ExpectError(wire.OpError, 10, wire.CodeBadRequest)
	c.SendID(wire.OpHello, 11, &wire.Hello{ClientName: "again", ProtocolVersion: 1})
	c.ExpectError(wire.OpError, 11, wire.CodeBadRequest)
	c.SendID(wire.OpDeliver, 12, &wire.Deliver{Topic: "t"})
	c.ExpectError(wire.OpError, 12, wire.CodeBadRequest)
	c.SendID(wire.OpForwardedSession, 13, &wire.ForwardedSession{OriginNodeID: "gw", HopCount: 1})
	c.ExpectError(wire.OpError, 13, wire.CodeForbidden)
	c.SendID(wire.OpReplicationRead, 14, nil)
	c.ExpectError(wire.OpError, 14, wire.CodeForbidden)
	c.SendID(wire.OpPing, 15, nil)
	c.Expect(wire.OpPong, 15)
}

// S-146, docs/protocol.md#owner-side: with inter-broker TLS on, @node needs
// the peer certificate as well as the cluster secret. The secret alone is
// refused with AUTH_ERR 401 and the connection closes; with an identity the
// login succeeds and node-only ops pass the 403 check. Users are unaffected.
func TestNodeLoginNeedsPeerIdentity(t *testing.T) {
	var verified atomic.Bool
	e := newEnv(t, func(o *Options) {
		o.NodeIdentity = func(net.Conn) (string, error) {
			if !verified.Load() {
				return "", errors.New("no client certificate was presented")
			}
			return "node-b", nil
		}
	})
	c := e.dial()
	c.hello(false)
	id := c.Send(wire.OpAuth, &wire.Auth{Username: "@node", Password: "s3cret"})
	eb := c.ExpectError(wire.OpAuthErr, id, wire.CodeUnauthorized)
	if !strings.Contains(eb.Message, "inter-broker TLS") {
		t.Fatalf("refusal should say why: %q", eb.Message)
	}
	c.ExpectClosed(time.Second)

	u := e.dial()
	u.login() // a user never needs a peer identity
	u.SendID(wire.OpReplicationRead, 7, nil)
	u.ExpectError(wire.OpError, 7, wire.CodeForbidden)

	verified.Store(true)
	n := e.dial()
	n.hello(false)
	n.auth("@node", "s3cret")
	n.SendID(wire.OpReplicationRead, 8, nil)
	n.ExpectError(wire.OpError, 8, wire.CodeBadRequest) // past the 403: the op itself is not served yet
}

// S-11, docs/protocol.md#heartbeats: the broker PINGs about one interval after the handshake
// and closes a connection that sent nothing for 3 intervals, silently.
func TestHeartbeatAndIdleTimeout(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Heartbeat = 100 * time.Millisecond })
	c := e.dial()
	c.login()
	c.SendID(wire.OpPing, 3, nil) // ends the quiet window, like an SDK's first PING
	c.Expect(wire.OpPong, 3)
	h, _ := c.Read(time.Second)
	if h.Op != wire.OpPing {
		t.Fatalf("expected a broker PING, got %s", h.Op)
	}
	// Say nothing more: the broker must close within ~3–4 intervals.
	deadline := time.Now().Add(2 * time.Second)
	for {
		h, _, err := c.TryRead(time.Until(deadline))
		if err != nil {
			break
		}
		if h.Op != wire.OpPing {
			t.Fatalf("unexpected %s while idle", h.Op)
		}
	}
	if time.Now().After(deadline) {
		t.Fatal("idle connection was not closed")
	}
}

// docs/protocol.md#quiet-window: broker PINGs wait for the quiet window to end; a client that
// says nothing after AUTH is closed after 3 intervals without a single
// PING written.
func TestNoPingDuringQuietWindow(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Heartbeat = 50 * time.Millisecond })
	c := e.dial()
	c.login()
	c.ExpectClosed(2 * time.Second)
}

// A client that keeps answering PINGs stays connected.
func TestHeartbeatKeepsAlive(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Heartbeat = 50 * time.Millisecond })
	c := e.dial()
	c.login()
	c.SendID(wire.OpPing, 3, nil)
	c.Expect(wire.OpPong, 3)
	for i := 0; i < 10; i++ {
		h, _ := c.Read(time.Second)
		if h.Op != wire.OpPing {
			t.Fatalf("got %s", h.Op)
		}
		c.SendID(wire.OpPong, h.RequestID, nil)
	}
}

// S-14: a socket that sends nothing is closed after the first-frame
// timeout.
func TestFirstFrameTimeout(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FirstFrame = 100 * time.Millisecond })
	c := e.dial()
	c.ExpectClosed(2 * time.Second)
}

// A reader whose client stops reading stops taking requests once its
// reply slots are used up, and resumes when the client reads again: every
// answer arrives, in order, and nothing is lost.
func TestSlowReaderBackpressure(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ReplySlots = 4 })
	c := e.dial()
	c.login()
	const n = 2000
	var batch []byte
	for i := 0; i < n; i++ {
		batch = wire.AppendFrame(batch, wire.OpPing, uint64(1000+i), nil)
	}
	go func() { _, _ = c.nc.Write(batch) }()
	for i := 0; i < n; i++ {
		h, _ := c.Read(5 * time.Second)
		if h.Op != wire.OpPong || h.RequestID != uint64(1000+i) {
			t.Fatalf("answer %d: %s id %d", i, h.Op, h.RequestID)
		}
	}
}

// docs/protocol.md#frames: version and flags are never checked on receipt.
func TestHeaderVersionAndFlagsIgnored(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.login()
	f := wire.AppendFrame(nil, wire.OpPing, 42, nil)
	binary.BigEndian.PutUint16(f[4:], 9)
	binary.BigEndian.PutUint32(f[8:], 0xdeadbeef)
	if _, err := c.nc.Write(f); err != nil {
		t.Fatal(err)
	}
	c.Expect(wire.OpPong, 42)
}

// S-11 counts the time the client sent nothing, not the time this broker
// spent on a frame it had read: a connection whose reader is held up in
// the handling of a frame (here a slow permission check; in CI, storage
// backpressure under a loaded disk) is not closed as idle, and its
// request is answered.
func TestIdleTimeoutIgnoresTimeSpentOnAFrame(t *testing.T) {
	var slow atomic.Bool
	e := newEnv(t, func(o *Options) {
		o.Heartbeat = 50 * time.Millisecond
		o.Authorize = func(_, _, topic string) error {
			if slow.Load() && topic == "slow" {
				time.Sleep(400 * time.Millisecond) // 8 intervals
			}
			return nil
		}
	})
	c := e.dial()
	c.login()
	slow.Store(true)
	id := c.publish("slow", "x", true)
	c.Expect(wire.OpPublishOK, id)
}
