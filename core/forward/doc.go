// Package forward is the relay: the gateway side of forwarding. A broker
// that is asked about a partition another broker owns, and cannot send
// the client there (the owner is private, or reached only through this
// broker's shared address), relays the client's operations to the owner
// over an upstream session and hands the owner's answers back.
//
// It owns the upstream sessions — one per (client session, owner),
// opened on first use by a Dialer (PeerDialer: a stream over core/peer's
// links, the @node login, FORWARDED_SESSION) — the relayed operations and
// their answers (publishes, subscriptions, deliveries, settles, the
// reconcile of forwarded subscriptions), the limits and their accounting,
// and the 503/504 decisions when an owner cannot be reached or is lost.
// The design and the numbers behind it are in README.md beside this file.
//
// # Data flow
//
// Client to owner: core/session's reader decodes a frame, its router says
// Forward, and it calls Relay.Publish, Subscribe or Settle; the relay
// sends the body unchanged on the upstream session to the owner.
//
// Owner to client: the upstream's reader goroutine receives the owner's
// answers and pushes; the relay rewrites subscription ids where needed and
// queues them on the client connection through ClientConn, the small interface
// core/session's connection implements (answer, confirm, push, defer a
// reply, drop, route, find a subscription). The client's writer reports
// written relayed bytes back with Relay.Written, which is what bounds the
// relay's memory.
//
// # Imports
//
// core/session imports this package, never the other way round. It
// imports core, core/client (the upstream speaks the client protocol),
// core/lograte, core/peer and core/wire.
package forward
