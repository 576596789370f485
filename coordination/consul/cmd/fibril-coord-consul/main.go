// Command fibril-coord-consul serves the Consul backend as an external
// coordination plugin, listed in the plugin catalog like a third party's
// (plugins.toml documents the format). The broker also links the same
// backend in (coordination.backend = "consul"), so a catalog is needed
// only to run it out of process. It refuses to run by hand: only a Fibril
// host can start it.
package main

import (
	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/plugins"
)

// version is this binary's release version, reported by PluginInfo.
const version = "0.1.0"

func main() {
	plugins.ServeCoordination(consul.Factory, plugins.Info{
		Name:    "consul",
		Version: version,
		Config:  consul.ConfigKeys,
	})
}
