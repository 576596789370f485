// Package forward is how this broker talks to its peers over the
// configured core.Transport: a cache of links, one per peer, re-dialled
// when a peer's advertised address changes, and the peer probe (an upstream
// handshake — HELLO, AUTH as @node with the cluster secret — and one round
// trip) behind GET /admin/api/peers. The forwarder of private-node routing
// (upstream sessions, seed §3) builds on the same links and handshake.
package forward
