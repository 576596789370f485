// Package core holds what every part of the broker shares and nothing
// that runs: the contracts between the engine and its plugins, the value
// types that cross those contracts, and the errors that cross the wire.
//
//   - coordinator.go: Coordinator, the cluster's shared memory (a
//     versioned key space with compare-and-set, node records bound to a
//     Lease, level-triggered watches, leader election through Leadership),
//     implemented by the coordination plugins (raft built in) and by
//     core/memcoord in tests.
//   - transport.go: Transport, how a broker reaches a peer (Link, Stream,
//     Peer), implemented by the transport plugins (tcp, quic).
//   - document.go: Document, one versioned document kept in the
//     coordinator (users, runtime settings), with LoadOrSeed and Follow.
//   - types.go: NodeID, NodeInfo and its Labels, Visibility (public or
//     private), Endpoint (an advertised client address), PartitionRef and
//     Owner.
//   - errors.go: the sentinel errors (ErrNotFound, ErrUnavailable, …) and
//     Code, which maps them to the Fibril error code a client receives
//     (docs/protocol.md#answers).
//
// Data flows through core only as types: the engine lives in the
// sub-packages (wire, config, storage, queue, session, auth, cluster,
// routing, forward, admin, client, …) and the plugins in plugins/,
// coordination/ and transport/. docs/ARCHITECTURE.md has the map.
package core
