// Package routing decides, for one partition operation on one broker,
// whether to serve it, forward it, redirect the client, or refuse it for
// now (core/routing/README.md#handler-rule; docs/protocol.md#answers holds
// the answers), and builds every client-facing endpoint list from the
// cluster snapshot — topology answers, pushes, redirects and the
// partitioning-version fence all go through ClientEndpoints, so no other
// path can leak an address. Topology answers alone may add a private
// owner's own addresses after the gateway's, tagged private, when the
// operator turns routing.expose_private_endpoints on (TopologyEndpoints).
//
// Data flows one way: a cluster.Snapshot and a partition in, a Decision
// out. SessionRouter adapts that to core/session's Router for coordinated
// mode, adding what serving needs (the lease check, the local channel, the
// first-write mark) and the cluster-wide declarations. It imports core,
// core/cluster, core/queue, core/session (for the Router it implements) and
// core/wire; session does not import it.
package routing
