package quic

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one transport instance's collectors; a nil *metrics (no
// env.Registerer) records nothing.
type metrics struct {
	reg        prometheus.Registerer
	open       *prometheus.GaugeVec
	opens      *prometheus.CounterVec
	abortedC   prometheus.Counter
	conns      prometheus.Gauge
	blockedC   prometheus.Counter
	collectors []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	lbl := prometheus.Labels{"transport": "quic"}
	m := &metrics{
		reg: reg,
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fibril_transport_streams_open", ConstLabels: lbl,
			Help: "Inter-broker streams open, by direction (in: opened by a peer, out: opened by this broker).",
		}, []string{"direction"}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_transport_stream_opens_total", ConstLabels: lbl,
			Help: "Inter-broker stream opens by result (ok, refused: no stream was opened).",
		}, []string{"result"}),
		abortedC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_transport_streams_aborted_total", ConstLabels: lbl,
			Help: "Inter-broker streams that ended by an abort (reset, lost connection, Abort) instead of an orderly close.",
		}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_transport_quic_connections_open",
			Help: "QUIC connections to peers that are open (one per peer; two briefly after a simultaneous dial).",
		}),
		blockedC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_transport_quic_streams_blocked_total",
			Help: "Stream opens that had to wait because the peer's limit (transport.quic.max_incoming_streams) was reached.",
		}),
	}
	for _, d := range []string{dirIn, dirOut} {
		m.open.WithLabelValues(d)
	}
	for _, r := range []string{"ok", "refused"} {
		m.opens.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.open, m.opens, m.abortedC, m.conns, m.blockedC} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, err
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

// unregister removes the collectors, so a transport opened later with
// the same registerer can register its own.
func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}

func (m *metrics) streamOpened(dir string) {
	if m != nil {
		m.open.WithLabelValues(dir).Inc()
	}
}

func (m *metrics) streamClosed(dir string) {
	if m != nil {
		m.open.WithLabelValues(dir).Dec()
	}
}

func (m *metrics) opened(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.opens.WithLabelValues("ok").Inc()
	} else {
		m.opens.WithLabelValues("refused").Inc()
	}
}

func (m *metrics) aborted() {
	if m != nil {
		m.abortedC.Inc()
	}
}

func (m *metrics) blocked() {
	if m != nil {
		m.blockedC.Inc()
	}
}

func (m *metrics) connOpened() {
	if m != nil {
		m.conns.Inc()
	}
}

func (m *metrics) connClosed() {
	if m != nil {
		m.conns.Dec()
	}
}
