package session

import (
	"context"
	"strconv"

	"github.com/fibrilgo/fibril/core/wire"
)

// fireAndForget lists the requests that never get an answer once the
// connection is authenticated, not even an error (docs/protocol.md#answers, last row): an
// uncorrelated ERROR would make every SDK drop its connection. They take no
// reply slot. (PONG is never answered either.)
func fireAndForget(op wire.Op) bool {
	switch op {
	case wire.OpAck, wire.OpNack, wire.OpTopologyUpdateAck:
		return true
	}
	return false
}

// dispatch handles one frame after the handshake. Reader goroutine only;
// body is valid until dispatch returns.
func (c *Conn) dispatch(h wire.FrameHeader, body []byte) {
	op := h.Op
	if op != wire.OpAuth && op != wire.OpReconcileClient {
		c.openWindow() // docs/protocol.md#quiet-window: any other frame ends the quiet window
	}
	if op == wire.OpPong {
		return
	}
	if fireAndForget(op) && c.principal != nil {
		c.handleFireAndForget(op, body)
		return
	}
	if !c.acquireSlot() {
		c.stopReading = true
		return
	}
	c.slotPending = true
	c.handleRequest(h, body)
	if c.slotPending { // answered nothing (an unconfirmed publish)
		c.slotPending = false
		c.releaseSlot()
	}
}

func (c *Conn) handleFireAndForget(op wire.Op, body []byte) {
	switch op {
	case wire.OpAck, wire.OpNack:
		c.handleSettle(op, body)
	case wire.OpTopologyUpdateAck:
		var a wire.TopologyUpdateAck
		if a.Decode(body) == nil { // docs/protocol.md#malformed: a malformed ack is dropped silently
			for {
				cur := c.topoAck.Load()
				if a.Generation <= cur || c.topoAck.CompareAndSwap(cur, a.Generation) {
					break
				}
			}
		}
	}
}

func (c *Conn) handleRequest(h wire.FrameHeader, body []byte) {
	op, id := h.Op, h.RequestID
	switch op {
	case wire.OpPing: // answered in every state (docs/protocol.md#heartbeats)
		c.reply(wire.OpPong, id, nil)
		return
	case wire.OpAuth:
		c.handleAuth(id, body)
		return
	}
	if c.principal == nil {
		// docs/protocol.md#answers: any op other than AUTH/PING/PONG before
		// authentication → ERROR 401, then close.
		msg := "authentication required: send AUTH first"
		if c.nodeProof {
			msg = "authentication required: this resumed session belongs to a peer broker; send AUTH as @node first"
		}
		c.replyAndClose(wire.OpError, id, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: msg})
		return
	}
	switch op {
	case wire.OpPublish, wire.OpPublishDelayed:
		c.handlePublish(h, body)
	case wire.OpSubscribe:
		c.handleSubscribe(id, body)
	case wire.OpSubscribeStream:
		c.handleSubscribeStream(id, body)
	case wire.OpDeclareQueue:
		c.handleDeclareQueue(id, body)
	case wire.OpDeclarePlexus:
		c.handleDeclarePlexus(id, body)
	case wire.OpReconcileClient:
		c.handleReconcile(id, body)
	case wire.OpTopology:
		c.handleTopology(id, body)
	default:
		if op.NodeOnly() {
			c.handleNodeOnly(op, id, body)
			return
		}
		// docs/protocol.md#malformed: unknown opcodes, server→client ops and a second
		// HELLO → ERROR 400, connection stays open.
		c.replyError(id, wire.CodeBadRequest, "unknown opcode "+strconv.Itoa(int(op)))
	}
}

// handleNodeOnly answers replication and forwarding ops. They are only for
// a connection authenticated as @node (docs/protocol.md#replication-ops, docs/protocol.md#owner-side);
// replication ops are served by Options.Replication when set.
func (c *Conn) handleNodeOnly(op wire.Op, id uint64, body []byte) {
	if !c.principal.Node {
		c.replyError(id, wire.CodeForbidden, "node principal required for "+op.String())
		return
	}
	if op == wire.OpForwardedSession {
		c.handleForwardedSession(id, body)
		return
	}
	if op == wire.OpNodeAdmin {
		c.handleNodeAdmin(id, body)
		return
	}
	if c.srv.opts.Replication != nil {
		c.handleReplication(op, id, body)
		return
	}
	c.replyError(id, wire.CodeBadRequest, op.String()+" is not supported by this broker yet")
}

// handleAuth answers AUTH (docs/protocol.md#authentication with semantics D-1: on an
// authenticated connection AUTH is a re-check that succeeds for the same
// principal). On a connection that resumed a node session it is the proof
// the resume waits for (proveNode).
func (c *Conn) handleAuth(id uint64, body []byte) {
	var a wire.Auth
	if err := a.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	p, err := c.srv.opts.Auth.Authenticate(context.Background(), a.Username, a.Password, c.clientAddr)
	switch {
	case err != nil:
		c.refuseAuth(id, a.Username, err.Error())
		return
	case c.principal != nil && !p.Same(*c.principal):
		c.refuseAuth(id, a.Username, "this connection is authenticated as "+c.principal.Name+"; AUTH must name the same principal")
		return
	case c.nodeProof && !p.Node:
		c.refuseAuth(id, a.Username, "this resumed session belongs to a peer broker and only AUTH as @node resumes it; reconnect without resuming to log in as a user")
		return
	}
	if p.Node && c.srv.opts.NodeIdentity != nil && c.peerNode == "" {
		// With inter-broker TLS on, @node also needs the peer certificate
		// a leaked secret alone does not make a peer.
		node, err := c.srv.opts.NodeIdentity(c.nc)
		if err != nil {
			c.refuseAuth(id, a.Username, "@node login refused: inter-broker TLS is on and "+err.Error())
			return
		}
		c.peerNode = node
		c.log = c.log.With("peer_node", node)
	}
	if c.nodeProof {
		c.proveNode(id, p)
		return
	}
	if c.principal == nil {
		c.principal = &p
		c.sess.setPrincipal(&p)
		if p.Node && c.peerNode != "" {
			c.sess.bindNode(c.peerNode)
		}
		c.log = c.log.With("user", p.Name)
		c.publishIdentity()
	}
	c.reply(wire.OpAuthOK, id, nil)
}

// proveNode completes the resume of a node session once AUTH named @node
// (docs/protocol.md#resume): with a verified peer certificate, it must name
// the node the session belongs to. Proven, the connection takes the
// session over — its principal, its forwarded client, its subscriptions
// and pushes — exactly as a resume of a user session does at HELLO. AUTH_OK
// is queued before the session attaches, so no push can precede it.
func (c *Conn) proveNode(id uint64, p Principal) {
	origin, f := c.sess.nodeBinding()
	if c.peerNode != "" && origin != "" && c.peerNode != origin {
		c.refuseAuth(id, p.Name, "@node login refused: the peer certificate names node "+c.peerNode+
			", but this resumed session belongs to node "+origin)
		return
	}
	c.nodeProof = false
	c.principal = &p
	c.log = c.log.With("user", p.Name)
	if f != nil {
		c.actFor(f)
		c.forwardedResumed = true
	}
	c.publishIdentity()
	c.reply(wire.OpAuthOK, id, nil)
	c.sess.attach(c)
	c.log.Info("node session resumed", "origin_node", origin)
}

// refuseAuth answers AUTH_ERR 401 and closes the connection.
func (c *Conn) refuseAuth(id uint64, user, msg string) {
	c.srv.opts.Metrics.AuthFailures.Inc()
	c.log.Info("auth refused", "user", user, "reason", msg)
	c.replyAndClose(wire.OpAuthErr, id, &wire.ErrorBody{Code: wire.CodeUnauthorized, Message: msg})
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
