// Package auth decides who a connection is: the user store (argon2id
// hashes in a JSON file under the data directory), the password decision
// order of S-146 (the @node principal, then stored users, then the built-in
// fibril/fibril pair from loopback), the cluster secret resolution of S-149
// and the startup warnings of S-148.
//
// The package answers with a Principal or an error that wraps
// core.ErrUnauthorized and carries a message the client can act on; the
// session layer puts that message in AUTH_ERR verbatim. Nothing here knows
// about frames or sockets beyond the peer address.
package auth
