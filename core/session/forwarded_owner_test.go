package session

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// docs/protocol.md#owner-side, in order: 403 without @node (connection stays open), 400 on
// a malformed body, 400 on a hop count other than 1, FFO1 with forwarding
// version 2 on acceptance, 400 on a second one; with a verified peer
// certificate the origin must be that node.
func TestForwardedSessionOwnerChecks(t *testing.T) {
	e := newEnv(t)
	u := e.dial()
	u.login()
	u.SendID(wire.OpForwardedSession, 5, ffs("gw", 1, true, wire.FlagReleaseOnClose))
	u.ExpectError(wire.OpError, 5, wire.CodeForbidden)
	u.SendID(wire.OpPing, 6, nil)
	u.Expect(wire.OpPong, 6)

	n := e.dial()
	n.hello(false)
	n.auth("@node", "s3cret")
	n.SendID(wire.OpForwardedSession, 7, rawBody("FFS9junk"))
	if eb := n.ExpectError(wire.OpError, 7, wire.CodeBadRequest); !strings.Contains(eb.Message, "malformed") {
		t.Fatalf("malformed body: %q", eb.Message)
	}
	n.SendID(wire.OpForwardedSession, 8, ffs("gw", 2, true, 0))
	if eb := n.ExpectError(wire.OpError, 8, wire.CodeBadRequest); !strings.Contains(eb.Message, "hop count must be 1") {
		t.Fatalf("hop count: %q", eb.Message)
	}
	n.SendID(wire.OpForwardedSession, 9, ffs("gw", 1, true, wire.FlagReleaseOnClose))
	ok := n.Expect(wire.OpForwardedSessionOK, 9).(*wire.ForwardedSessionOK)
	if ok.ForwardingVersion != 2 {
		t.Fatalf("forwarding version %d", ok.ForwardingVersion)
	}
	n.SendID(wire.OpForwardedSession, 10, ffs("gw", 1, false, 0))
	if eb := n.ExpectError(wire.OpError, 10, wire.CodeBadRequest); eb.Message != "session already forwarded" {
		t.Fatalf("second: %q", eb.Message)
	}

	// With a verified peer identity, the origin must match it.
	ev := newEnv(t, func(o *Options) {
		o.NodeIdentity = func(net.Conn) (string, error) { return "node-b", nil }
	})
	p := ev.dial()
	p.hello(false)
	p.auth("@node", "s3cret")
	p.SendID(wire.OpForwardedSession, 11, ffs("node-c", 1, true, 0))
	p.ExpectError(wire.OpError, 11, wire.CodeForbidden)
	p.SendID(wire.OpForwardedSession, 12, ffs("node-b", 1, true, 0))
	p.Expect(wire.OpForwardedSessionOK, 12)

	// A forwarded session from this broker itself (a peer address that
	// loops back, e.g. a shared load-balancer address) is refused.
	es := newEnv(t, func(o *Options) { o.NodeID = "me" })
	l := es.dial()
	l.hello(false)
	l.auth("@node", "s3cret")
	l.SendID(wire.OpForwardedSession, 13, ffs("me", 1, true, 0))
	if eb := l.ExpectError(wire.OpError, 13, wire.CodeBadRequest); !strings.Contains(eb.Message, "itself") {
		t.Fatalf("loop: %q", eb.Message)
	}
}

// docs/protocol.md#forwarded-session (an orderly close ends the session, an abort keeps its grace): with FFS2
// release_on_close, an orderly close ends the forwarded session at once,
// so what its subscription held is redelivered without waiting for the
// reconnect grace; an FFS1 session (and any abort) keeps the grace.
func TestReleaseOnClose(t *testing.T) {
	for _, release := range []bool{true, false} {
		t.Run(map[bool]string{true: "FFS2 release_on_close", false: "FFS1"}[release], func(t *testing.T) {
			e := newEnv(t)
			e.grace.Store(60_000) // a grace no test waits out
			n := e.dial()
			n.hello(false)
			n.auth("@node", "s3cret")
			n.SendID(wire.OpForwardedSession, 3, ffs("gw", 1, release, wire.FlagReleaseOnClose))
			n.Expect(wire.OpForwardedSessionOK, 3)
			n.subscribe("held", 10, false)
			pub := e.dial()
			pub.login()
			pub.publish("held", "m1", true)
			n.nextDeliver() // held, never acked

			// The gateway's orderly close: FIN at a frame boundary.
			if err := n.nc.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			other := e.dial()
			other.login()
			other.subscribe("held", 10, false)
			if release {
				_, d := other.nextDeliver()
				if string(d.Payload) != "m1" {
					t.Fatalf("redelivered %q", d.Payload)
				}
			} else {
				other.ExpectSilence(500 * time.Millisecond)
			}
		})
	}
}
