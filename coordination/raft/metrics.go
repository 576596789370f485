package raft

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the fibril_raft_* series (documented in README.md). Counters
// and the leader gauge are kept even without a registerer, so the code
// that updates them needs no nil checks; they are simply not exported.
type metrics struct {
	reg         prometheus.Registerer
	collectors  []prometheus.Collector
	isLeader    prometheus.Gauge
	forwarded   *prometheus.CounterVec
	expirations prometheus.Counter
	telemetry   *raftTelemetry // raft's own timings (telemetry.go)
}

func newMetrics(reg prometheus.Registerer, c *Coordinator) (*metrics, error) {
	m := &metrics{
		reg: reg,
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_raft_is_leader",
			Help: "1 while this member is the raft leader, else 0.",
		}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_raft_forwarded_total",
			Help: "Requests this member sent to the raft leader over the RPC channel, by operation (apply, renew, read).",
		}, []string{"op"}),
		expirations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_raft_lease_expirations_total",
			Help: "Leases this member, as leader, expired because they were not renewed in time.",
		}),
	}
	applied := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fibril_raft_applied_index",
		Help: "Raft log index last applied to this member's state machine.",
	}, func() float64 { return float64(c.raft.AppliedIndex()) })
	peers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fibril_raft_peers",
		Help: "Members in the raft configuration as this member knows it (voters and non-voters).",
	}, func() float64 {
		f := c.raft.GetConfiguration()
		if f.Error() != nil {
			return 0
		}
		return float64(len(f.Configuration().Servers))
	})
	m.telemetry = newRaftTelemetry()
	m.collectors = append([]prometheus.Collector{m.isLeader, m.forwarded, m.expirations, applied, peers}, m.telemetry.collectors()...)
	if reg != nil {
		for i, col := range m.collectors {
			if err := reg.Register(col); err != nil {
				for _, done := range m.collectors[:i] {
					reg.Unregister(done)
				}
				return nil, fmt.Errorf("raft: register metrics: %w", err)
			}
		}
	}
	m.telemetry.attach()
	return m, nil
}

// unregister removes the series, so a member reopened in the same
// process can register them again, and stops feeding raft's timings to
// this member.
func (m *metrics) unregister() {
	if m == nil {
		return
	}
	m.telemetry.detach()
	if m.reg == nil {
		return
	}
	for _, col := range m.collectors {
		m.reg.Unregister(col)
	}
}

// Collectors returns the fibril_raft_* collectors, for a host that opened
// the member without a Registerer and registers them itself.
func (c *Coordinator) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector(nil), c.metrics.collectors...)
}
