// Package session serves Fibril v1 client connections: the handshake
// (HELLO, AUTH, resume, the quiet window), the logical sessions that outlive
// sockets (reconnect grace, dormant sessions, durable skeletons), reconcile,
// heartbeats, and the dispatch of every client operation to the queue
// engine. WIRE_V1.md §8 and §16 and BROKER_SEMANTICS S-1…S-14 and
// S-100…S-113 are the rules it keeps; WIRE_V1.md §7.3 is the one table of
// answers it cites.
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
// session alone (S-104).
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
package session
