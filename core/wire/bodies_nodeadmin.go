package wire

// NODE_ADMIN and NODE_ADMIN_OK (docs/protocol.md#node-admin): how one
// broker's admin API asks another for what only that broker knows — the
// live state of the partitions it owns — or asks it to act on them.

const (
	magicNodeAdmin   = "FNA1"
	magicNodeAdminOK = "FNO1"
)

// NodeAdmin is one request: an action name and its JSON argument.
type NodeAdmin struct {
	Action string
	Args   []byte // JSON
}

// AppendTo encodes an FNA1 body.
func (n *NodeAdmin) AppendTo(b []byte) []byte {
	b = append(b, magicNodeAdmin...)
	b = appendStr(b, n.Action)
	return appendBytes(b, n.Args)
}

// Decode parses an FNA1 body.
func (n *NodeAdmin) Decode(b []byte) error {
	var r reader
	r.begin(b, OpNodeAdmin)
	for r.next() {
		r.magic(magicNodeAdmin)
		n.Action = r.str("action")
		n.Args = r.bytes("args")
		r.end()
	}
	return r.result()
}

// NodeAdminOK is the answer: the action's JSON result. A refusal is an
// ERROR frame instead.
type NodeAdminOK struct {
	Result []byte // JSON
}

// AppendTo encodes an FNO1 body.
func (n *NodeAdminOK) AppendTo(b []byte) []byte {
	return appendBytes(append(b, magicNodeAdminOK...), n.Result)
}

// Decode parses an FNO1 body.
func (n *NodeAdminOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpNodeAdminOK)
	for r.next() {
		r.magic(magicNodeAdminOK)
		n.Result = r.bytes("result")
		r.end()
	}
	return r.result()
}
