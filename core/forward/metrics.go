package forward

import "github.com/prometheus/client_golang/prometheus"

// RelayMetrics are the relay's series (docs/metrics.md).
type RelayMetrics struct {
	Requests       *prometheus.CounterVec // op, outcome
	BytesIn        prometheus.Counter
	BytesOut       prometheus.Counter
	InflightBytes  prometheus.Gauge
	Rejected       *prometheus.CounterVec // limit
	Confirms       prometheus.Counter
	ConfirmLatency prometheus.Counter     // microseconds, summed
	ConfirmSeconds prometheus.Histogram   // the same latencies, bucketed
	Resumes        *prometheus.CounterVec // outcome
}

// NewRelayMetrics creates the series and registers them with reg (nil: not
// registered, for tests). fibril_forward_upstream_sessions is registered
// by RegisterUpstreamSessions, which knows whether it is split by owner.
func NewRelayMetrics(reg prometheus.Registerer) *RelayMetrics {
	m := &RelayMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_forward_requests_total", Help: "Client requests relayed to owners, by op and outcome."}, []string{"op", "outcome"}),
		BytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_bytes_in_total", Help: "Frame bytes relayed from owners to clients (answers and pushes)."}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_bytes_out_total", Help: "Frame bytes relayed from clients to owners."}),
		InflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_forward_inflight_bytes", Help: "Bytes of relayed confirmed publishes waiting for the owner's answer (bounded by routing.max_inflight_forward_bytes)."}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_forward_rejected_total", Help: "Forwarded operations answered 503 by a limit, by limit."}, []string{"limit"}),
		Confirms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_confirms_total", Help: "Owners' PUBLISH_OKs relayed to clients."}),
		ConfirmLatency: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_confirm_latency_microseconds_total", Help: "Sum of the time from reading a forwarded confirmed publish to relaying the owner's PUBLISH_OK, in microseconds (divide by fibril_forward_confirms_total)."}),
		// The pair above stays for the dashboards that divide it; the
		// histogram gives quantiles, with one more network hop than
		// fibril_publish_confirm_latency_seconds, hence buckets from 100 µs.
		ConfirmSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_forward_confirm_latency_seconds",
			Help:    "Time from reading a forwarded confirmed publish to relaying the owner's PUBLISH_OK.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16), // 100 µs … ~3.3 s
		}),
		Resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_forward_upstream_resumes_total", Help: "Upstream sessions whose link dropped, by what resuming them gave: resumed (everything kept), partly_lost (some subscriptions closed), lost (a new session, or none)."}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.BytesIn, m.BytesOut, m.InflightBytes, m.Rejected, m.Confirms, m.ConfirmLatency, m.ConfirmSeconds, m.Resumes)
	}
	return m
}

// RegisterUpstreamSessions exports fibril_forward_upstream_sessions: the
// total, or with perOwner (admin.metrics_per_channel) one series per owner
// labelled owner, both read at scrape time from the limit accounting (the
// one count of upstream sessions, those being dialled included). One name
// with two label sets cannot share a registry, hence the choice.
func RegisterUpstreamSessions(reg prometheus.Registerer, g *Gateway, perOwner bool) {
	if !perOwner {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_forward_upstream_sessions",
			Help: "Upstream sessions this broker has open to owners, as a gateway."},
			func() float64 { return float64(g.Open()) }))
		return
	}
	reg.MustRegister(upstreamsByOwner{g: g, desc: prometheus.NewDesc("fibril_forward_upstream_sessions",
		"Upstream sessions this broker has open to each owner, as a gateway.", []string{"owner"}, nil)})
}

type upstreamsByOwner struct {
	g    *Gateway
	desc *prometheus.Desc
}

func (u upstreamsByOwner) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

func (u upstreamsByOwner) Collect(ch chan<- prometheus.Metric) {
	for owner, n := range u.g.ByOwner() {
		ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, float64(n), string(owner))
	}
}
