package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

func TestHandshakeHappyPath(t *testing.T) {
	fb := newFake(t, nil)
	cfg := connConfig(t)
	cfg.Username, cfg.Password = "alice", "secret"
	cc, ec := dialConnAsync(t, fb.addr, cfg)
	fc := fb.next(t)
	hello := fc.acceptHello(t, identityA, wire.ResumeNew)
	if hello.ProtocolVersion != 1 || hello.Resume.Present || hello.ClientName != "test" {
		t.Fatalf("HELLO = %+v", hello)
	}
	f := fc.expect(t, wire.OpAuth)
	if f.hdr.RequestID != 2 {
		t.Fatalf("AUTH id %d, want 2", f.hdr.RequestID)
	}
	if a := f.body.(*wire.Auth); a.Username != "alice" || a.Password != "secret" {
		t.Fatalf("AUTH = %+v", a)
	}
	fc.send(wire.OpAuthOK, 2, nil)
	if err := wait(t, ec); err != nil {
		t.Fatal(err)
	}
	c := <-cc
	hs := c.Handshake()
	if got := hs.Hello.Identity(); got != identityA {
		t.Fatalf("identity %+v", got)
	}
	// Later requests count up from 4.
	ch := async(func() error {
		_, err := c.Do(context.Background(), wire.OpTopology, &wire.TopologyRequest{})
		return err
	})
	f = fc.expect(t, wire.OpTopology)
	if f.hdr.RequestID != 4 {
		t.Fatalf("first request id %d, want 4", f.hdr.RequestID)
	}
	fc.send(wire.OpTopologyOK, 4, &wire.TopologyOK{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
}

// Every deviation from the handshake order (docs/protocol.md#quiet-window) must fail the connect.
func TestHandshakeStrictness(t *testing.T) {
	good := helloOK(identityA, wire.ResumeNew)
	badCompliance := *good
	badCompliance.Compliance = wire.Compliance + " "
	badVersion := *good
	badVersion.ProtocolVersion = 2
	cases := []struct {
		name      string
		auth      bool
		reconcile bool
		script    func(t *testing.T, fc *fakeConn)
		want      error
		wantText  string
	}{
		{name: "ping before HELLO_OK", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.send(wire.OpPing, 0, nil)
			fc.send(wire.OpHelloOK, 1, good)
		}, want: ErrProtocol, wantText: "unexpected frame PING during HELLO"},
		{name: "deliver before HELLO_OK", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.send(wire.OpDeliver, 0, &wire.Deliver{SubID: 1, Topic: "t"})
		}, want: ErrProtocol, wantText: "DELIVER during HELLO"},
		{name: "compliance mismatch", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.send(wire.OpHelloOK, 1, &badCompliance)
		}, want: ErrProtocol, wantText: "compliance marker mismatch"},
		{name: "protocol version 2", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.send(wire.OpHelloOK, 1, &badVersion)
		}, want: ErrProtocol, wantText: "protocol_version 2"},
		{name: "HELLO_OK with the wrong id", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.send(wire.OpHelloOK, 7, good)
		}, want: ErrProtocol, wantText: "request id 7"},
		{name: "HELLO_ERR", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.send(wire.OpHelloErr, 1, &wire.ErrorBody{Code: 1, Message: "unsupported protocol version"})
		}, wantText: "HELLO: 1 unsupported protocol version"},
		{name: "ERROR 426", script: func(t *testing.T, fc *fakeConn) {
			fc.expect(t, wire.OpHello)
			fc.sendError(1, 426, "tls required")
		}, want: ErrTLSRequired},
		{name: "topology push between HELLO_OK and AUTH_OK", auth: true, script: func(t *testing.T, fc *fakeConn) {
			fc.acceptHello(t, identityA, wire.ResumeNew)
			fc.expect(t, wire.OpAuth)
			fc.send(wire.OpTopologyUpdate, 0, &wire.TopologyUpdate{})
			fc.send(wire.OpAuthOK, 2, nil)
		}, want: ErrProtocol, wantText: "TOPOLOGY_UPDATE during AUTH"},
		{name: "AUTH_ERR", auth: true, script: func(t *testing.T, fc *fakeConn) {
			fc.acceptHello(t, identityA, wire.ResumeNew)
			fc.expect(t, wire.OpAuth)
			fc.send(wire.OpAuthErr, 2, &wire.ErrorBody{Code: 401, Message: "denied"})
		}, want: core.ErrUnauthorized},
		{name: "ERROR answering AUTH", auth: true, script: func(t *testing.T, fc *fakeConn) {
			fc.acceptHello(t, identityA, wire.ResumeNew)
			fc.expect(t, wire.OpAuth)
			fc.sendError(2, 400, "malformed")
		}, want: core.ErrBadRequest},
		{name: "ping during RECONCILE", reconcile: true, script: func(t *testing.T, fc *fakeConn) {
			fc.acceptHello(t, identityA, wire.ResumeResumed)
			fc.expect(t, wire.OpReconcileClient)
			fc.send(wire.OpPing, 3, nil)
		}, want: ErrProtocol, wantText: "PING during RECONCILE_CLIENT"},
		{name: "deliver during RECONCILE", reconcile: true, script: func(t *testing.T, fc *fakeConn) {
			fc.acceptHello(t, identityA, wire.ResumeResumed)
			fc.expect(t, wire.OpReconcileClient)
			fc.send(wire.OpDeliver, 0, &wire.Deliver{SubID: 1, Topic: "t"})
		}, want: ErrProtocol, wantText: "DELIVER during RECONCILE_CLIENT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fb := newFake(t, nil)
			cfg := connConfig(t)
			if tc.auth {
				cfg.Username, cfg.Password = "u", "p"
			}
			if tc.reconcile {
				cfg.Reconcile = &wire.ReconcileClient{Policy: wire.ReconcileRestore}
			}
			_, ec := dialConnAsync(t, fb.addr, cfg)
			fc := fb.next(t)
			tc.script(t, fc)
			err := wait(t, ec)
			if err == nil {
				t.Fatal("connect succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.wantText)
			}
			fc.expectEOF(t)
		})
	}
}

func TestHandshakeReconcileExchange(t *testing.T) {
	fb := newFake(t, nil)
	cfg := connConfig(t)
	cfg.Resume = &identityA
	cfg.Reconcile = &wire.ReconcileClient{Policy: wire.ReconcileRestore, Subscriptions: []wire.ReconcileSub{{SubID: 9, Topic: "t", Prefetch: 4}}}
	cc, ec := dialConnAsync(t, fb.addr, cfg)
	fc := fb.next(t)
	hello := fc.acceptHello(t, identityA, wire.ResumeResumed)
	if !hello.Resume.Present || hello.Resume.Value != identityA {
		t.Fatalf("HELLO resume = %+v", hello.Resume)
	}
	f := fc.expect(t, wire.OpReconcileClient)
	if f.hdr.RequestID != 3 {
		t.Fatalf("RECONCILE_CLIENT id %d, want 3", f.hdr.RequestID)
	}
	res := &wire.ReconcileResult{Entries: []wire.ReconcileEntry{{
		Client: wire.Some(wire.ReconcileSub{SubID: 9, Topic: "t", Prefetch: 4}),
		Server: wire.Some(wire.ReconcileSub{SubID: 12, Topic: "t", Prefetch: 4}),
		Action: wire.ActionKeep, Reason: "server_id_changed", Code: wire.ReasonServerIDChanged,
	}}}
	fc.send(wire.OpReconcileResult, 3, res)
	if err := wait(t, ec); err != nil {
		t.Fatal(err)
	}
	c := <-cc
	if r := c.Handshake().Reconcile; r == nil || len(r.Entries) != 1 || r.Entries[0].Server.Value.SubID != 12 {
		t.Fatalf("reconcile result = %+v", r)
	}
}

// Dial tries every bootstrap address and reports all failures.
func TestDialFallsBackToNextAddress(t *testing.T) {
	bad := newFake(t, nil)
	good := newFake(t, nil)
	opts := testOptions(t, bad.addr, good.addr)
	ch := make(chan error, 1)
	var c *Client
	go func() {
		var err error
		c, err = Dial(context.Background(), opts)
		ch <- err
	}()
	fc := bad.next(t)
	fc.expect(t, wire.OpHello)
	bad2 := *helloOK(identityA, wire.ResumeNew)
	bad2.Compliance = "v=1;x"
	fc.send(wire.OpHelloOK, 1, &bad2)
	fc2 := good.next(t)
	fc2.acceptHello(t, identityA, wire.ResumeNew)
	fc2.answerTopology(t, wire.Topology{})
	if err := wait(t, ch); err != nil {
		t.Fatal(err)
	}
	c.Close()

	// All addresses failing: the error names each failure.
	ch2 := async(func() error { _, err := Dial(context.Background(), testOptions(t, bad.addr)); return err })
	fc = bad.next(t)
	fc.expect(t, wire.OpHello)
	fc.send(wire.OpHelloOK, 1, &bad2)
	err := wait(t, ch2)
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "compliance marker mismatch") {
		t.Fatalf("err = %v", err)
	}
}
