package tcp

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the transport's Prometheus series. Every transport has its
// own; when two share a registry (tests, or a host running two), the
// second adopts the first one's collectors, so the series add up instead
// of colliding.
type metrics struct {
	open    *prometheus.GaugeVec
	opens   *prometheus.CounterVec
	aborted prometheus.Counter
}

const transportLabel = "tcp"

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name:        "fibril_transport_streams_open",
		Help:        "Inter-broker streams open now, by direction (in: accepted, out: opened).",
		ConstLabels: prometheus.Labels{"transport": transportLabel},
	}, []string{"direction"})
	opens := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "fibril_transport_stream_opens_total",
		Help:        "OpenStream calls by result (ok, refused: the peer was unreachable or its handshake failed).",
		ConstLabels: prometheus.Labels{"transport": transportLabel},
	}, []string{"result"})
	aborted := prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "fibril_transport_streams_aborted_total",
		Help:        "Inter-broker streams that ended by an abort (reset, lost connection, Abort or transport Close) rather than an orderly close.",
		ConstLabels: prometheus.Labels{"transport": transportLabel},
	})
	m := &metrics{open: open, opens: opens, aborted: aborted}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.open, err = register(reg, open); err != nil {
		return nil, err
	}
	if m.opens, err = register(reg, opens); err != nil {
		return nil, err
	}
	if m.aborted, err = register(reg, aborted); err != nil {
		return nil, err
	}
	// Pre-create the label values, so dashboards see zeros, not gaps.
	m.open.WithLabelValues("in")
	m.open.WithLabelValues("out")
	m.opens.WithLabelValues("ok")
	m.opens.WithLabelValues("refused")
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *metrics) opened(result string)    { m.opens.WithLabelValues(result).Inc() }
func (m *metrics) streamOpen(dir string)   { m.open.WithLabelValues(dir).Inc() }
func (m *metrics) streamClosed(dir string) { m.open.WithLabelValues(dir).Dec() }

// countAbort counts a stream that ended by an abort.
func (m *metrics) countAbort() { m.aborted.Inc() }
