package session

// authorize asks Options.Authorize whether this connection's user may do
// action with topic (docs/admin.md#permissions): the logged-in user, or on
// a forwarded session the gateway's client it acts for — so a gateway and
// the owner both check, each with the user the operation is for. A peer
// broker's own operations (dead letters, replays: @node without a
// forwarded session) are not limited.
func (c *Conn) authorize(action, topic string) error {
	check := c.srv.opts.Authorize
	if check == nil || c.principal == nil {
		return nil
	}
	user := c.principal.Name
	if c.forwarded != nil {
		user = c.forwarded.ActingUsername
	} else if c.principal.Node {
		return nil
	}
	return check(user, action, topic)
}
