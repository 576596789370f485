package auth

// How a principal proved its identity. The session layer logs it and the
// admin connection view shows it.
const (
	MethodPassword        = "password"         // a stored user's password
	MethodCertificate     = "certificate"      // a verified client certificate naming a stored user (S-154)
	MethodDefaultLoopback = "default-loopback" // the built-in fibril/fibril pair from a loopback peer
	MethodNodeSecret      = "node-secret"      // @node with the cluster secret
)

// Principal is an authenticated identity.
type Principal struct {
	Name   string // the username, or NodePrincipal
	Node   bool   // a peer broker (may use node-only ops, docs/protocol.md#replication-ops, docs/protocol.md#owner-side)
	Method string // one of the Method constants
}

// IsZero reports whether p is the zero Principal (not authenticated).
func (p Principal) IsZero() bool { return p == Principal{} }

// Same reports whether p and o are the same principal, which is the S-9
// rule for AUTH on an already-authenticated (resumed, or certificate-
// authenticated) connection: it succeeds only when the re-presented
// credentials name the same principal. The method may differ (a
// certificate login followed by the same user's password is the same
// user), but the built-in fibril login is not the same principal as a
// stored user who happens to be named fibril, and a user is never the node.
func (p Principal) Same(o Principal) bool {
	if p.IsZero() || o.IsZero() {
		return false
	}
	return p.Name == o.Name && p.Node == o.Node &&
		(p.Method == MethodDefaultLoopback) == (o.Method == MethodDefaultLoopback)
}

// String returns the name with the method, for logs.
func (p Principal) String() string {
	if p.IsZero() {
		return "(unauthenticated)"
	}
	return p.Name + " (" + p.Method + ")"
}

// nodePrincipal is the principal a correct cluster secret yields.
var nodePrincipal = Principal{Name: NodePrincipal, Node: true, Method: MethodNodeSecret}
