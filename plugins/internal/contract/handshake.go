// Package contract is what both sides of the plugin boundary must agree
// on beyond the generated gRPC code: the go-plugin handshake, the names of
// the plugin sets, the log level a host passes to its plugins, and how
// errors cross as gRPC statuses. The SDK (package plugins, running in the
// plugin process) and the host (package plugins/host, running in the
// broker) both import it, so the two can never drift apart; plugin authors
// never see it.
package contract

import (
	"github.com/hashicorp/go-plugin"
)

// The go-plugin handshake. The cookie is not a secret: it only stops a
// plugin binary from being run by hand (it then prints a hint and exits)
// and stops the host from talking to an executable that is not a Fibril
// plugin. It never changes; compatibility is carried by the per-kind API
// versions instead, so ProtocolVersion stays 1 for ever.
const (
	MagicCookieKey   = "FIBRIL_PLUGIN"
	MagicCookieValue = "fibril-plugin-3b1f9c0e6a4d4e2f"
)

// Handshake is the go-plugin handshake both sides configure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   MagicCookieKey,
	MagicCookieValue: MagicCookieValue,
}

// InfoPluginName is the go-plugin name under which every plugin serves
// the Plugin service (PluginInfo), whatever its kind. A kind's own service
// is served under the kind's name ("coordination", "transport").
const InfoPluginName = "info"

// EnvLogLevel is the environment variable through which the host tells a
// plugin the lowest level it will keep (trace, debug, info, warn, error),
// so the plugin does not format lines that would be dropped.
const EnvLogLevel = "FIBRIL_PLUGIN_LOG_LEVEL"
