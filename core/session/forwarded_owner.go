package session

import (
	"errors"

	"github.com/fibrilgo/fibril/core/wire"
)

// The owner side of forwarding: a gateway's upstream session arrives as a
// connection authenticated as @node that sends FORWARDED_SESSION. From
// then on it is served like the client it acts for, with two differences:
// it never forwards again (one hop: Conn.route tells the router the
// session is forwarded), and with FFS2's release_on_close an orderly end
// of the stream ends the session at once instead of waiting out its
// reconnect grace (Session.detach). The gateway side, the relay, is
// core/forward.

// ForwardingVersion is the highest forwarding protocol version this broker
// implements as an owner (docs/protocol.md#forwarded-session): 2 = FFS1 and FFS2 (release_on_close).
const ForwardingVersion = 2

// handleForwardedSession is the owner's side of FORWARDED_SESSION
// (docs/protocol.md#owner-side), on a connection already authenticated as @node: the body must
// decode (FFS1 or FFS2), name hop count 1, come once per connection, and —
// when the login carried a verified peer certificate — name the node that
// certificate names. Accepted, the connection acts for the gateway's
// client from then on: logs and the admin view carry its origin node,
// client id and acting user, and it never forwards again (one hop: the
// router is told the session is forwarded).
func (c *Conn) handleForwardedSession(reqID uint64, body []byte) {
	var f wire.ForwardedSession
	if err := f.Decode(body); err != nil {
		c.replyError(reqID, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	if err := f.Validate(); err != nil {
		if errors.Is(err, wire.ErrBadHopCount) {
			c.replyError(reqID, wire.CodeBadRequest, "forwarded session hop count must be 1")
			return
		}
		c.replyError(reqID, wire.CodeBadRequest, err.Error())
		return
	}
	if f.ActingUsername == "" {
		// Permissions are checked for the acting user (docs/admin.md#permissions):
		// a session for nobody would be checked for nobody.
		c.replyError(reqID, wire.CodeForbidden, "forwarded session names no acting user")
		return
	}
	if c.forwarded != nil && !c.forwardedResumed {
		c.replyError(reqID, wire.CodeBadRequest, "session already forwarded")
		return
	}
	if id := c.srv.opts.NodeID; id != "" && f.OriginNodeID == id {
		c.replyError(reqID, wire.CodeBadRequest, "forwarded session from this broker itself: the owner's peer address reaches the gateway (broker.peer_advertise must be each broker's own, not a shared load-balancer address)")
		return
	}
	if c.peerNode != "" && f.OriginNodeID != c.peerNode {
		c.replyError(reqID, wire.CodeForbidden, "forwarded session names origin node "+f.OriginNodeID+
			", but the peer certificate names "+c.peerNode)
		return
	}
	if origin, _ := c.sess.nodeBinding(); origin != "" && f.OriginNodeID != origin {
		// A resumed node session, or one whose @node login carried a
		// certificate: it belongs to that node (docs/protocol.md#resume).
		c.replyError(reqID, wire.CodeForbidden, "forwarded session names origin node "+f.OriginNodeID+
			", but this session belongs to node "+origin)
		return
	}
	if c.forwardedResumed {
		// The gateway announces the session it resumed once more.
		c.forwardedResumed = false
		c.forwarded = &f
		c.sess.setForwarded(&f)
		c.publishIdentity()
		c.releaseOnClose.Store(f.ReleaseOnClose())
		c.log.Info("forwarded session announced again after a resume", "release_on_close", f.ReleaseOnClose())
		c.reply(wire.OpForwardedSessionOK, reqID, &wire.ForwardedSessionOK{ForwardingVersion: ForwardingVersion})
		return
	}
	c.sess.setForwarded(&f)
	c.actFor(&f)
	c.log.Info("forwarded session opened", "release_on_close", f.ReleaseOnClose())
	c.reply(wire.OpForwardedSessionOK, reqID, &wire.ForwardedSessionOK{ForwardingVersion: ForwardingVersion})
}

// actFor makes the connection act for the gateway's client that f names:
// a FORWARDED_SESSION accepted on it, or the session's own when a resume
// proved @node again (Conn.proveNode).
func (c *Conn) actFor(f *wire.ForwardedSession) {
	c.forwarded = f
	c.publishIdentity()
	c.releaseOnClose.Store(f.ReleaseOnClose())
	c.srv.opts.Metrics.ForwardedSessions.Inc()
	c.srv.forwardedOpen.Add(1)
	c.log = c.log.With("origin_node", f.OriginNodeID, "acting_user", f.ActingUsername,
		"client_id", f.ClientID, "client_conn", f.ConnectionID, "client_remote", f.ClientRemoteAddr)
}

// endForwarded counts the end of an accepted forwarded session (terminate).
func (c *Conn) endForwarded() {
	if c.forwarded == nil {
		return
	}
	c.srv.opts.Metrics.ForwardedSessions.Dec()
	c.srv.forwardedOpen.Add(-1)
	c.log.Info("forwarded session closed", "orderly", c.orderly.Load())
}
