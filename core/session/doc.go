// Package session serves Fibril v1 client connections: the handshake
// (HELLO, AUTH, resume, the quiet window), the logical sessions that outlive
// sockets (reconnect grace, dormant sessions, durable skeletons), reconcile,
// heartbeats, and the dispatch of every client operation to the queue
// engine. The rules it keeps are docs/protocol.md#handshake,
// docs/protocol.md#reconcile and the rules S-1…S-14 and S-100…S-113 of
// docs/semantics.md; docs/protocol.md#answers is the one table of answers
// it cites.
//
// Data flows in on a connection's reader (frames decoded and handled one
// at a time, in order) and out through its writer (answers and pushes); to
// the queue engine (core/queue) for what is served here, to the Router
// (coordinated mode: core/routing's SessionRouter) for where an operation
// goes, and to the relay (core/forward) for what is forwarded. It imports
// core/forward, never core/routing or core/broker.
//
// # Connections and sessions
//
// A Conn is one socket. It has exactly two goroutines: a reader that
// decodes and handles frames one at a time, and a writer that owns the
// socket's write side. A Session is the logical client: it holds the
// subscriptions, the authenticated principal and the queue of pushes
// (deliveries and notices), and survives its socket for the reconnect
// grace. At any moment a session follows at most one Conn, the newest: a
// resume moves it at once, and the late end of a superseded Conn leaves the
// session alone (S-104). The one exception is a node session (@node): its
// resume moves it only once the new Conn has proven @node again from the
// same origin node (docs/protocol.md#resume), since a resume token is not a
// peer's credential.
//
// # Backpressure
//
// Every request that can be answered takes a reply slot before the reader
// handles it; the writer returns the slot when the answer is on the wire.
// When a client stops reading, its slots run out and the reader stops
// reading it: memory stays bounded by the slot count. Pushes are bounded by
// the engine's prefetch credit (deliveries) and by construction (notices).
//
// # Locks
//
// Three levels, always taken in this order and never the other way:
// Session.transition (serialises subscribe/pause/resume/close against the
// engine), then the engine's own locks, then Session.mu (quick state: the
// current Conn, the push queue, the subscription maps) and Conn.mu (the
// reply queue). The engine calls Consumer.Deliver with its locks held, and
// Deliver takes Session.mu; so no code may call into the engine while
// holding Session.mu or Conn.mu.
//
// # Forwarding
//
// When the Router answers Forward, the operation is not served here: the
// connection hands it to its forward.Relay (core/forward), the gateway side
// of forwarding, which relays it to the partition's owner over an upstream
// session and answers the client through relayPort (relay.go), the small
// view of a Conn that forward.ClientConn describes. Everything about upstream
// sessions, relayed answers, limits and the 503/504 decisions lives there
// (core/forward/README.md).
//
// The owner side is here, in forwarded_owner.go: a gateway's upstream
// session arrives as a connection authenticated as @node that sends
// FORWARDED_SESSION; it is then served like the client it acts for, never
// forwards again (one hop), and with release_on_close ends its session as
// soon as the gateway closes it in order.
package session
