// Package streammetrics holds the stream series every built-in transport
// exports (fibril_transport_streams_open, fibril_transport_stream_opens_total,
// fibril_transport_streams_aborted_total, labelled transport=<name>), so
// that tcp and quic describe and count them alike.
package streammetrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Stream directions, the values of the direction label.
const (
	In  = "in"  // accepted from a peer
	Out = "out" // opened by this broker
)

// Streams is one transport's stream series.
type Streams struct {
	open    *prometheus.GaugeVec
	opens   *prometheus.CounterVec
	aborted prometheus.Counter
}

// New creates the series for transport and registers them with reg (none
// when reg is nil). When two transports share a registry (tests, or a host
// that opens a transport again) the second adopts the first one's
// collectors, so the series add up instead of colliding.
func New(reg prometheus.Registerer, transport string) (*Streams, error) {
	lbl := prometheus.Labels{"transport": transport}
	s := &Streams{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fibril_transport_streams_open", ConstLabels: lbl,
			Help: "Inter-broker streams open now, by direction (in: accepted from a peer, out: opened by this broker).",
		}, []string{"direction"}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_transport_stream_opens_total", ConstLabels: lbl,
			Help: "Inter-broker stream opens by result (ok; refused: no stream was opened, the peer was unreachable or its handshake failed).",
		}, []string{"result"}),
		aborted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_transport_streams_aborted_total", ConstLabels: lbl,
			Help: "Inter-broker streams that ended by an abort (reset, lost connection, Abort or transport Close) instead of an orderly close.",
		}),
	}
	var err error
	if s.open, err = Register(reg, s.open); err != nil {
		return nil, err
	}
	if s.opens, err = Register(reg, s.opens); err != nil {
		return nil, err
	}
	if s.aborted, err = Register(reg, s.aborted); err != nil {
		return nil, err
	}
	// Pre-create the label values, so dashboards see zeros, not gaps.
	s.open.WithLabelValues(In)
	s.open.WithLabelValues(Out)
	s.opens.WithLabelValues("ok")
	s.opens.WithLabelValues("refused")
	return s, nil
}

// Register registers c with reg, or returns the collector already
// registered under the same description. With a nil reg it returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
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

// Opened counts a stream opened in direction dir (In or Out).
func (s *Streams) Opened(dir string) { s.open.WithLabelValues(dir).Inc() }

// Closed counts the end of a stream opened in direction dir.
func (s *Streams) Closed(dir string) { s.open.WithLabelValues(dir).Dec() }

// OpenResult counts an OpenStream call: ok, or refused (no stream).
func (s *Streams) OpenResult(ok bool) {
	if ok {
		s.opens.WithLabelValues("ok").Inc()
	} else {
		s.opens.WithLabelValues("refused").Inc()
	}
}

// Aborted counts a stream that ended by an abort.
func (s *Streams) Aborted() { s.aborted.Inc() }
