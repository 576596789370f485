// Package broker assembles one broker process from its parts — storage and
// the queue engine, users and TLS material, the session server, the admin
// listener, and in coordinated mode the cluster, the inter-broker
// transport and the relay's dialer — and runs it until its context ends,
// then shuts it down gracefully. cmd/fibril is a thin main around it;
// integration tests use the binary, unit tests can use Start directly.
//
// It owns wiring and lifecycle, not behaviour: client frames flow from its
// listeners into core/session; coordinated mode routes them through
// core/routing's SessionRouter over the cluster view (core/cluster) and
// forwards through core/forward, whose upstream sessions it dials over
// core/peer's links. What it adds itself is the process around them:
// start order, the cluster's lifecycle (cluster*.go), the peer side
// (peers.go), the admin API's views, metrics and drain.
//
// It is the top of the core: it may import any core package; none imports
// it.
package broker
