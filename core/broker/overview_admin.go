package broker

// The admin API's overview of this broker (GET /admin/api/overview): the
// dashboard's first page.

import (
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// processStart is when this process started (close enough: package
// initialisation), the origin of the overview's uptime.
var processStart = time.Now()

// overviewView is GET /admin/api/overview.
type overviewView struct {
	// Node is the node id in a cluster; empty while the broker is still
	// joining, and standalone.
	Node    core.NodeID `json:"node,omitempty"`
	OwnerID string      `json:"owner_id"`
	Mode    string      `json:"mode"` // standalone | cluster
	// Version is the main module's version with its VCS revision when
	// the build recorded them, else "dev".
	Version       string    `json:"version"`
	GoVersion     string    `json:"go_version"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds int64     `json:"uptime_seconds"`
}

func (b *Broker) overview() any {
	v := overviewView{OwnerID: b.ownerID.String(), Mode: "standalone", Version: buildVersion(),
		GoVersion: runtime.Version(), StartedAt: processStart.UTC().Truncate(time.Second),
		UptimeSeconds: int64(time.Since(processStart).Seconds())}
	if !b.cfg.Coordination.Standalone() {
		v.Mode = "cluster"
		if c := b.adminCluster.Load(); c != nil {
			v.Node = c.self.ID
		}
	}
	return v
}

// buildVersion is the main module's version from the build information,
// with the VCS revision (and "+dirty" for a modified tree) when the build
// recorded one and the version does not name it already; "dev" when
// there is no version.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" || strings.Contains(v, rev) { // a pseudo-version names its revision already
		return v
	}
	return v + " (" + rev + dirty + ")"
}
