// Command fibril-coord-raft serves the embedded raft backend as an
// external coordination plugin. The broker normally links the backend in
// (coordination.backend = "raft"); this binary exists so the same code can
// run out of process, listed in the plugin catalog like a third party's
// (plugins.toml documents the format). It refuses to run by hand: only a
// Fibril host can start it.
package main

import (
	"github.com/fibrilgo/fibril/coordination/raft"
	"github.com/fibrilgo/fibril/plugins"
)

// version is this binary's release version, reported by PluginInfo.
const version = "0.1.0"

func main() {
	plugins.ServeCoordination(raft.Factory, plugins.Info{
		Name:    "raft",
		Version: version,
		Config:  raft.ConfigKeys,
	})
}
