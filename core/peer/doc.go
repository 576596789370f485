// Package peer is how this broker reaches its peers over the configured
// core.Transport: a cache of links, one per peer node, re-dialled when a
// peer's advertised address changes; the @node login (HELLO, AUTH as @node
// with the cluster secret) that opens a stream as a peer; the
// FORWARDED_SESSION request with its FFS2-then-FFS1 fallback; and the peer
// probe behind GET /admin/api/peers.
//
// Data flows outwards only: callers (core/forward's dialer, core/broker's
// probe) ask for a link, then log in on a stream of it; nothing here
// accepts connections or keeps sessions. It imports core, core/client and
// core/wire, never the session or relay layers above it.
package peer
