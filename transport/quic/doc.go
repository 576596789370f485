// Package quic is the built-in "quic" inter-broker transport
// (transport.backend = "quic"): one QUIC connection per broker pair,
// carried by one UDP socket per broker that both listens and dials, and
// one bidirectional QUIC stream per core.Stream.
//
// Why QUIC: flow control is per stream, so an upstream session whose
// consumer stalls fills only its own stream window and never holds up the
// other sessions to the same peer. That only holds when the connection
// window can never be used up by stalled streams, so the transport sizes
// it to max_incoming_streams × stream window (quic-go's defaults would
// let two stalled streams block every other stream; see README.md).
//
// Identity is the node id in the peer certificate's URI SAN
// (core/tlsconf): a dialer checks that the server names the node it
// dialed, a listener requires a client certificate naming some node and
// reports it as Stream.PeerNode. When two brokers dial each other at once
// the connection dialed by the smaller node id is kept (both ends decide
// alike from the ids alone); the other is closed by its dialer once no
// stream uses it.
package quic
