package session

import (
	"bytes"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// handleNodeAdmin answers NODE_ADMIN (docs/protocol.md#node-admin) on an
// @node connection. The action runs on its own goroutine (a purge or a
// stats walk may take a while) and its answer takes the request's reply
// slot like any other. Reader goroutine; body is valid until it returns.
func (c *Conn) handleNodeAdmin(id uint64, body []byte) {
	var req wire.NodeAdmin
	if err := req.Decode(body); err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	run := c.srv.opts.NodeAdmin
	if run == nil {
		c.replyError(id, wire.CodeBadRequest, "NODE_ADMIN is not supported by this broker")
		return
	}
	action, args, peer := req.Action, bytes.Clone(req.Args), c.peerNode
	if peer == "" && c.principal != nil {
		peer = c.principal.Name
	}
	ctx := c.replStreams().ctx // ends with the connection
	c.deferReply()
	go func() {
		res, err := run(ctx, peer, action, args)
		if err != nil {
			c.enqueue(outFrame{op: wire.OpError, reqID: id, body: &wire.ErrorBody{Code: core.Code(err), Message: err.Error()}, slot: true})
			return
		}
		c.enqueue(outFrame{op: wire.OpNodeAdminOK, reqID: id, body: &wire.NodeAdminOK{Result: res}, slot: true})
	}()
}
