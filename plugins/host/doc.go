// Package host is the broker's side of the plugin system: it opens the
// coordination backend and the transport that configuration names, either
// a built-in registered with the SDK (package plugins) or an external
// plugin binary listed in the run-time catalog.
//
// For an external plugin it verifies the binary against the catalog's
// sha256, launches it with go-plugin, negotiates the API version, sends
// Configure, and supervises the process: restarts with backoff, health
// checks, the fibril_plugin_up and fibril_plugin_restarts_total metrics.
// The clients here (remote coordinator, remote transport, host streams)
// make the process look like a core.Coordinator or core.Transport, and
// keep what must outlive a restart (leases by id, links that re-dial).
// Describe asks any plugin binary what it is.
//
// Data flows from the broker (core/broker) through the clients here, over
// gRPC and the framed data sockets, into the SDK's servers in the plugin
// process. It imports the SDK for the registry, the environment types and
// the logging bridge, and plugins/internal/contract and
// plugins/internal/frame for what both sides must agree on.
package host
