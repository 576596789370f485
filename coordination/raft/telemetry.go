package raft

import (
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// hashicorp/raft reports its timings through go-metrics' process-wide
// sink, which is a blackhole until a program installs one. Three of them
// are worth a Prometheus series; the rest are either per peer (which
// NoLegacyTelemetry already drops) or covered by the fibril_raft_* gauges.
//
// The sink below is installed once per process (go-metrics has one
// global) and keeps only those three keys, compared without allocating.
// Each open member attaches its own histograms to it, registered with its
// other series, so they come and go with the member like the rest.
// A process normally runs one member; when it runs several (tests), every
// member's histograms see every member's samples, because raft's samples
// do not say which member they come from.
// go-metrics' own Prometheus sink is not used: it names series after the
// keys (fibril_raft_commitTime), keeps milliseconds in summaries, and
// describes none of them to the registry, so they could not be listed
// with the others (docs/metrics.md keeps that list).

// raftTelemetry is one member's share of raft's timings.
type raftTelemetry struct {
	commit      prometheus.Histogram
	fsmApply    prometheus.Histogram
	lastContact prometheus.Histogram
}

func newRaftTelemetry() *raftTelemetry {
	return &raftTelemetry{
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_raft_commit_seconds",
			Help:    "On the raft leader: time from dispatching a log entry to its commit (stored by a quorum).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16), // 100 µs … ~3.3 s
		}),
		fsmApply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_raft_fsm_apply_seconds",
			Help:    "Time to apply one committed log entry to this member's state machine.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16), // 10 µs … ~0.33 s
		}),
		lastContact: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_raft_leader_last_contact_seconds",
			Help:    "On the raft leader, at each lease check: time since each follower last answered (whole milliseconds).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12), // 5 ms … ~10 s
		}),
	}
}

func (t *raftTelemetry) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.commit, t.fsmApply, t.lastContact}
}

// telemetry is the process's sink and the members attached to it.
var telemetry struct {
	install sync.Once
	mu      sync.RWMutex
	members []*raftTelemetry
}

// attach installs the sink on first use and routes raft's timings to t.
func (t *raftTelemetry) attach() {
	telemetry.install.Do(func() {
		// No service prefix, no host name, no runtime sampling goroutine;
		// every key reaches the sink, which drops all but three.
		_, _ = gometrics.NewGlobal(&gometrics.Config{FilterDefault: true, TimerGranularity: timerGranularity}, telemetrySink{})
	})
	telemetry.mu.Lock()
	telemetry.members = append(telemetry.members, t)
	telemetry.mu.Unlock()
}

// detach stops routing timings to t; the sink stays installed.
func (t *raftTelemetry) detach() {
	telemetry.mu.Lock()
	defer telemetry.mu.Unlock()
	for i, m := range telemetry.members {
		if m == t {
			telemetry.members = append(telemetry.members[:i], telemetry.members[i+1:]...)
			return
		}
	}
}

// timerGranularity is the unit go-metrics divides MeasureSince durations
// by; raft's own samples (leader.lastContact) are milliseconds too.
const timerGranularity = time.Millisecond

// telemetrySink is a gometrics.MetricSink that keeps three sample keys.
type telemetrySink struct{}

func (telemetrySink) SetGauge([]string, float32)                                 {}
func (telemetrySink) SetGaugeWithLabels([]string, float32, []gometrics.Label)    {}
func (telemetrySink) EmitKey([]string, float32)                                  {}
func (telemetrySink) IncrCounter([]string, float32)                              {}
func (telemetrySink) IncrCounterWithLabels([]string, float32, []gometrics.Label) {}

func (s telemetrySink) AddSample(key []string, val float32) {
	s.AddSampleWithLabels(key, val, nil)
}

func (telemetrySink) AddSampleWithLabels(key []string, ms float32, _ []gometrics.Label) {
	var pick func(*raftTelemetry) prometheus.Histogram
	switch {
	case len(key) == 2 && key[0] == "raft" && key[1] == "commitTime":
		pick = func(t *raftTelemetry) prometheus.Histogram { return t.commit }
	case len(key) == 3 && key[0] == "raft" && key[1] == "fsm" && key[2] == "apply":
		pick = func(t *raftTelemetry) prometheus.Histogram { return t.fsmApply }
	case len(key) == 3 && key[0] == "raft" && key[1] == "leader" && key[2] == "lastContact":
		pick = func(t *raftTelemetry) prometheus.Histogram { return t.lastContact }
	default:
		return
	}
	seconds := float64(ms) / 1e3
	telemetry.mu.RLock()
	for _, t := range telemetry.members {
		pick(t).Observe(seconds)
	}
	telemetry.mu.RUnlock()
}
