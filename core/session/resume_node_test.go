package session

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// peerCerts stands in for inter-broker TLS in these tests: the node whose
// peer certificate each test connection presents, by the connection's
// address as the broker sees it. A connection that is not listed has no
// peer certificate.
type peerCerts struct {
	mu    sync.Mutex
	nodes map[string]string
}

func (p *peerCerts) present(c *client, node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nodes == nil {
		p.nodes = map[string]string{}
	}
	p.nodes[c.nc.LocalAddr().String()] = node
}

func (p *peerCerts) identity(nc net.Conn) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.nodes[nc.RemoteAddr().String()]; ok {
		return n, nil
	}
	return "", errors.New("no peer certificate was presented")
}

// nodeSessionEnv starts a broker with inter-broker TLS on (peer
// certificates from certs) and opens a forwarded session from node-b: a
// subscription holding one unacknowledged delivery. The upstream
// connection is then aborted, so the session waits for a resume.
func nodeSessionEnv(t *testing.T) (*env, *peerCerts, wire.ResumeIdentity, *wire.Deliver) {
	t.Helper()
	certs := &peerCerts{}
	e := newEnv(t, func(o *Options) {
		o.NodeIdentity = certs.identity
		o.NodeID = "node-a"
	})
	e.grace.Store(60_000) // a grace no test waits out
	g := e.dial()
	certs.present(g, "node-b")
	g.hello(false)
	g.auth("@node", "s3cret")
	g.SendID(wire.OpForwardedSession, 50, ffs("node-b", 1, true, 0))
	g.Expect(wire.OpForwardedSessionOK, 50)
	g.subscribe("held", 10, false)
	pub := e.dial()
	pub.login()
	pub.Expect(wire.OpPublishOK, pub.publish("held", "m1", true))
	_, d := g.nextDeliver()
	if err := g.nc.(*net.TCPConn).SetLinger(0); err != nil { // an abort (RST), not an orderly close
		t.Fatal(err)
	}
	g.nc.Close()
	return e, certs, g.ident, d
}

// resumeAs resumes the node session on a fresh connection that presents
// the peer certificate of node ("" = none).
func resumeAs(t *testing.T, e *env, certs *peerCerts, ident wire.ResumeIdentity, node string) *client {
	t.Helper()
	c := e.dial()
	c.t = t // failures belong to the subtest
	if node != "" {
		certs.present(c, node)
	}
	c.ident = ident
	if ok := c.hello(true); ok.ResumeOutcome != wire.ResumeResumed {
		t.Fatalf("resume outcome %s, want resumed", ok.ResumeOutcome)
	}
	return c
}

// docs/protocol.md#resume: resuming a session that holds @node (and
// forwarded) state restores nothing until the new connection proves
// @node again, from the same origin node. Before that proof every
// operation but AUTH and PING is ERROR 401 and a close, and no push
// reaches the connection.
func TestResumedNodeSessionNeedsProofBeforeAnyOp(t *testing.T) {
	e, certs, ident, held := nodeSessionEnv(t)
	ops := []struct {
		name string
		send func(c *client) uint64
	}{
		{"PUBLISH", func(c *client) uint64 { return c.publish("held", "forged", true) }},
		{"ACK", func(c *client) uint64 { c.ack(held); return held.DeliveryTag }},
		{"FORWARDED_SESSION", func(c *client) uint64 { return c.Send(wire.OpForwardedSession, ffs("node-c", 1, true, 0)) }},
		{"RECONCILE_CLIENT", func(c *client) uint64 {
			return c.Send(wire.OpReconcileClient, &wire.ReconcileClient{Policy: wire.ReconcileRestore})
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			c := resumeAs(t, e, certs, ident, "")
			c.SendID(wire.OpPing, 900, nil) // answered in every state; ends the quiet window
			c.Expect(wire.OpPong, 900)
			id := op.send(c)
			eb := c.ExpectError(wire.OpError, id, wire.CodeUnauthorized)
			if !strings.Contains(eb.Message, "@node") {
				t.Fatalf("the 401 should say what to send: %q", eb.Message)
			}
			c.ExpectClosed(time.Second)
		})
	}

	// Nothing happened to the session: the right node resumes it with
	// its subscription and its delivery still held.
	n := resumeAs(t, e, certs, ident, "node-b")
	n.auth("@node", "s3cret")
	n.ack(held)
	pub := e.dial()
	pub.login()
	pub.Expect(wire.OpPublishOK, pub.publish("held", "m2", true))
	if _, d := n.nextDeliver(); string(d.Payload) != "m2" {
		t.Fatalf("delivered %q after the resume, want m2 (m1 was acknowledged)", d.Payload)
	}
}

// The re-proof is AUTH as @node with a certificate of the node the session
// belongs to: an ordinary user, @node without a certificate and @node with
// another node's certificate all get AUTH_ERR 401 and a close; the right
// certificate resumes the session, which still acts for the forwarded
// client (it never forwards again) and takes a repeated FORWARDED_SESSION
// only from the same origin.
func TestResumedNodeSessionReproof(t *testing.T) {
	e, certs, ident, held := nodeSessionEnv(t)
	refusals := []struct {
		name, node, user, pw, why string
	}{
		{"ordinary user", "", "alice", "secret", "@node"},
		{"ordinary user with a node certificate", "node-b", "alice", "secret", "@node"},
		{"@node without a certificate", "", "@node", "s3cret", "inter-broker TLS"},
		{"@node with another node's certificate", "node-c", "@node", "s3cret", "node-b"},
		{"@node with a wrong secret", "node-b", "@node", "guess", "unknown user or wrong password"},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			c := resumeAs(t, e, certs, ident, r.node)
			id := c.Send(wire.OpAuth, &wire.Auth{Username: r.user, Password: r.pw})
			eb := c.ExpectError(wire.OpAuthErr, id, wire.CodeUnauthorized)
			if !strings.Contains(eb.Message, r.why) {
				t.Fatalf("refusal %q does not mention %q", eb.Message, r.why)
			}
			c.ExpectClosed(time.Second)
		})
	}

	n := resumeAs(t, e, certs, ident, "node-b")
	n.auth("@node", "s3cret")
	n.auth("@node", "s3cret") // a re-check on the proven connection
	n.SendID(wire.OpForwardedSession, 60, ffs("node-c", 1, true, 0))
	n.ExpectError(wire.OpError, 60, wire.CodeForbidden)
	n.SendID(wire.OpForwardedSession, 61, ffs("node-b", 1, true, 0))
	n.Expect(wire.OpForwardedSessionOK, 61)
	n.SendID(wire.OpForwardedSession, 62, ffs("node-b", 1, true, 0))
	n.ExpectError(wire.OpError, 62, wire.CodeBadRequest) // once per connection, as ever
	n.ack(held)
	infos := e.srv.Connections()
	var found bool
	for _, ci := range infos {
		if ci.Forwarded != nil && ci.Forwarded.OriginNode == "node-b" && ci.User == "@node" {
			found = true
		}
	}
	if !found {
		t.Fatalf("the resumed connection does not act for the forwarded client: %+v", infos)
	}
}
