package consul

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the fibril_consul_* series (coordination/consul/README.md#metrics). They are
// kept without a registerer too, so the code that updates them needs no
// nil checks.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	requests   *prometheus.CounterVec
	reachable  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_consul_requests_total",
			Help: "HTTP requests this node sent to its Consul agent, by operation (get, list, watch, write, delete, session create/renew/destroy, election watch, status) and outcome (ok, error).",
		}, []string{"op", "outcome"}),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_consul_reachable",
			Help: "1 while the last request to the Consul agent got an answer, else 0.",
		}),
	}
	m.reachable.Set(1)
	m.collectors = []prometheus.Collector{m.requests, m.reachable}
	if reg == nil {
		return m, nil
	}
	for i, col := range m.collectors {
		if err := reg.Register(col); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				continue // a second backend in one process (tests): the first one's series stay
			}
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("consul: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, col := range m.collectors {
		m.reg.Unregister(col)
	}
}
