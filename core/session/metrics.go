package session

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the session layer's Prometheus series. Every name is listed
// with its meaning in docs/metrics.md.
type Metrics struct {
	ConnectionsTotal  prometheus.Counter
	ConnectionsOpen   prometheus.Gauge
	SessionsLive      prometheus.Gauge
	SessionsDormant   prometheus.Gauge
	SubscriptionsOpen prometheus.Gauge
	BytesIn, BytesOut prometheus.Counter
	ConnErrors        *prometheus.CounterVec // reason
	ResumeNew         prometheus.Counter
	ResumeAccepted    prometheus.Counter
	ResumeRejected    prometheus.Counter
	GraceEntered      prometheus.Counter
	GraceExpired      prometheus.Counter
	ReconcileRequests prometheus.Counter
	ReconcileOutcomes *prometheus.CounterVec // outcome
	AuthFailures      prometheus.Counter
	Dropped           *prometheus.CounterVec // reason: fire-and-forget requests that failed (WIRE §7.3 last row)
	ConfirmLatency    prometheus.Histogram
	TopologyPushes    prometheus.Counter
	ForwardedSessions prometheus.Gauge // connections with an accepted FORWARDED_SESSION

	// The gateway (gateway.go).
	ForwardRequests       *prometheus.CounterVec // op, outcome
	ForwardBytesIn        prometheus.Counter
	ForwardBytesOut       prometheus.Counter
	ForwardInflightBytes  prometheus.Gauge
	ForwardRejected       *prometheus.CounterVec // limit
	ForwardConfirms       prometheus.Counter
	ForwardConfirmLatency prometheus.Counter // microseconds, summed
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered, for tests). fibril_forward_upstream_sessions is registered
// by RegisterUpstreamSessions, which knows whether it is split by owner.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_connections_total", Help: "Client connections accepted."}),
		ConnectionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_tcp_connections_open", Help: "Client connections currently open."}),
		SessionsLive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_sessions_live", Help: "Sessions with a connected socket."}),
		SessionsDormant: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_sessions_dormant", Help: "Sessions waiting out their reconnect grace without a socket."}),
		SubscriptionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_subscriptions_open", Help: "Queue subscriptions currently registered (live and dormant sessions)."}),
		BytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_bytes_in_total", Help: "Bytes read from client connections."}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_bytes_out_total", Help: "Bytes written to client connections."}),
		ConnErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_tcp_errors_total", Help: "Client connections that ended abnormally, by reason."}, []string{"reason"}),
		ResumeNew: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_resume_new_total", Help: "HELLOs without a resume identity."}),
		ResumeAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_resume_accepted_total", Help: "Resumes answered resumed or resumed_after_restart."}),
		ResumeRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_resume_rejected_total", Help: "Resumes answered resume_rejected or resume_not_found."}),
		GraceEntered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_reconnect_grace_entered_total", Help: "Sessions that went dormant when their socket ended."}),
		GraceExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_reconnect_grace_expired_total", Help: "Dormant sessions cleaned up because their grace ran out."}),
		ReconcileRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_tcp_reconcile_requests_total", Help: "RECONCILE_CLIENT requests answered."}),
		ReconcileOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_tcp_reconcile_outcomes_total", Help: "Reconcile verdicts, by outcome."}, []string{"outcome"}),
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_auth_failures_total", Help: "AUTH requests refused."}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_requests_dropped_total", Help: "Fire-and-forget requests that failed; they are never answered (WIRE §7.3)."}, []string{"op", "reason"}),
		ConfirmLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_publish_confirm_latency_seconds",
			Help:    "From reading a confirmed PUBLISH to queueing its PUBLISH_OK (durability included).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50 µs … ~1.6 s
		}),
		ForwardedSessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_forwarded_sessions", Help: "Connections open here on which a gateway accepted FORWARDED_SESSION (upstream sessions of clients of other brokers)."}),
		ForwardRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_forward_requests_total", Help: "Client requests relayed to owners, by op and outcome."}, []string{"op", "outcome"}),
		ForwardBytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_bytes_in_total", Help: "Frame bytes relayed from owners to clients (answers and pushes)."}),
		ForwardBytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_bytes_out_total", Help: "Frame bytes relayed from clients to owners."}),
		ForwardInflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_forward_inflight_bytes", Help: "Bytes of relayed confirmed publishes waiting for the owner's answer (bounded by routing.max_inflight_forward_bytes)."}),
		ForwardRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_forward_rejected_total", Help: "Forwarded operations answered 503 by a limit, by limit."}, []string{"limit"}),
		ForwardConfirms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_confirms_total", Help: "Owners' PUBLISH_OKs relayed to clients."}),
		ForwardConfirmLatency: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_forward_confirm_latency_microseconds_total", Help: "Sum of the time from reading a forwarded confirmed publish to relaying the owner's PUBLISH_OK, in microseconds (divide by fibril_forward_confirms_total)."}),
		TopologyPushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_topology_pushes_total", Help: "TOPOLOGY_UPDATE pushes queued to sessions (coordinated mode, S-119)."}),
	}
	if reg != nil {
		reg.MustRegister(m.ConnectionsTotal, m.ConnectionsOpen, m.SessionsLive, m.SessionsDormant,
			m.SubscriptionsOpen, m.BytesIn, m.BytesOut, m.ConnErrors, m.ResumeNew, m.ResumeAccepted,
			m.ResumeRejected, m.GraceEntered, m.GraceExpired, m.ReconcileRequests, m.ReconcileOutcomes,
			m.AuthFailures, m.Dropped, m.ConfirmLatency, m.TopologyPushes, m.ForwardedSessions,
			m.ForwardRequests, m.ForwardBytesIn, m.ForwardBytesOut, m.ForwardInflightBytes,
			m.ForwardRejected, m.ForwardConfirms, m.ForwardConfirmLatency)
	}
	return m
}

// RegisterUpstreamSessions exports fibril_forward_upstream_sessions: the
// total, or with perOwner (admin.metrics_per_channel) one series per owner
// labelled owner, both read at scrape time from the limit accounting (the
// one count of upstream sessions, those being dialled included). One name with two label sets
// cannot share a registry, hence the choice.
func RegisterUpstreamSessions(reg prometheus.Registerer, s *Server, perOwner bool) {
	if !perOwner {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_forward_upstream_sessions",
			Help: "Upstream sessions this broker has open to owners, as a gateway."},
			func() float64 { return float64(s.gwLimits.open()) }))
		return
	}
	reg.MustRegister(upstreamsByOwner{s: s, desc: prometheus.NewDesc("fibril_forward_upstream_sessions",
		"Upstream sessions this broker has open to each owner, as a gateway.", []string{"owner"}, nil)})
}

type upstreamsByOwner struct {
	s    *Server
	desc *prometheus.Desc
}

func (u upstreamsByOwner) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

func (u upstreamsByOwner) Collect(ch chan<- prometheus.Metric) {
	for owner, n := range u.s.gwLimits.byOwner() {
		ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, float64(n), string(owner))
	}
}
