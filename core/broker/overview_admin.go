package broker

// The admin API's overview of this broker (GET /admin/api/overview): the
// dashboard's first page.

import (
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/buildinfo"
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
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	// Build is the whole build information (core/buildinfo).
	Build         buildinfo.Info `json:"build"`
	StartedAt     time.Time      `json:"started_at"`
	UptimeSeconds int64          `json:"uptime_seconds"`
}

func (b *Broker) overview() any {
	v := overviewView{OwnerID: b.ownerID.String(), Mode: "standalone", Version: buildinfo.Get().Short(), Build: buildinfo.Get(),
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

// buildInfoGauge is fibril_build_info{version,revision,go_version}, always
// 1: which build runs, for dashboards and alerts on mixed versions.
func buildInfoGauge() prometheus.Collector {
	bi := buildinfo.Get()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fibril_build_info",
		Help: "Always 1; the labels name the running build: version, VCS revision and Go version."},
		[]string{"version", "revision", "go_version"})
	g.WithLabelValues(bi.Version, bi.ShortRevision(), bi.GoVersion).Set(1)
	return g
}
