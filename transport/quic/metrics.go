package quic

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/transport/internal/streammetrics"
)

// metrics are the transport's series: the stream series every transport
// has, and the QUIC connection ones (registered only with an
// env.Registerer).
type metrics struct {
	*streammetrics.Streams
	conns    prometheus.Gauge
	blockedC prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	streams, err := streammetrics.New(reg, "quic")
	if err != nil {
		return nil, err
	}
	m := &metrics{Streams: streams}
	if m.conns, err = streammetrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fibril_transport_quic_connections_open",
		Help: "QUIC connections to peers that are open (one per peer; two briefly after a simultaneous dial).",
	})); err != nil {
		return nil, err
	}
	if m.blockedC, err = streammetrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fibril_transport_quic_streams_blocked_total",
		Help: "Stream opens that had to wait because the peer's limit (transport.quic.max_incoming_streams) was reached.",
	})); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) blocked()    { m.blockedC.Inc() }
func (m *metrics) connOpened() { m.conns.Inc() }
func (m *metrics) connClosed() { m.conns.Dec() }
