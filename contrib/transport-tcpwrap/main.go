// Command fibril-transport-tcpwrap serves the built-in tcp inter-broker
// transport (transport/tcp) as an external transport plugin named
// "tcpwrap". It exists as the example of a third-party transport and as
// the test of the external-transport path: the same tcp code runs once
// linked in (transport.backend = "tcp") and once behind the plugin
// boundary (transport.backend = "tcpwrap", with a catalog entry), so any
// difference between the two is the boundary's. README.md says how to
// build it and list it in a catalog. Like every plugin it refuses to run
// by hand: only a Fibril host can start it.
package main

import (
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/transport/tcp"
)

// version is this binary's release version, reported by PluginInfo.
const version = "0.1.0"

func main() {
	plugins.ServeTransport(tcp.Open, plugins.Info{
		Name:    "tcpwrap",
		Version: version,
	})
}
