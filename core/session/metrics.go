package session

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/forward"
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
	Dropped           *prometheus.CounterVec // reason: fire-and-forget requests that failed (docs/protocol.md#answers last row)
	ConfirmLatency    prometheus.Histogram
	TopologyPushes    prometheus.Counter
	ForwardedSessions prometheus.Gauge // connections with an accepted FORWARDED_SESSION

	// Forward are the relay's series (core/forward).
	Forward *forward.RelayMetrics
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered, for tests), the relay's included (forward.NewRelayMetrics;
// fibril_forward_upstream_sessions is forward.RegisterUpstreamSessions').
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
			Name: "fibril_requests_dropped_total", Help: "Fire-and-forget requests that failed; they are never answered (no client waits for an answer), so this counter is their only trace."}, []string{"op", "reason"}),
		ConfirmLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_publish_confirm_latency_seconds",
			Help:    "From reading a confirmed PUBLISH to queueing its PUBLISH_OK (durability included).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50 µs … ~1.6 s
		}),
		ForwardedSessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fibril_forwarded_sessions", Help: "Connections open here on which a gateway accepted FORWARDED_SESSION (upstream sessions of clients of other brokers)."}),
		TopologyPushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fibril_topology_pushes_total", Help: "TOPOLOGY_UPDATE pushes queued to sessions (coordinated mode: one per session each time routing changes)."}),
	}
	if reg != nil {
		reg.MustRegister(m.ConnectionsTotal, m.ConnectionsOpen, m.SessionsLive, m.SessionsDormant,
			m.SubscriptionsOpen, m.BytesIn, m.BytesOut, m.ConnErrors, m.ResumeNew, m.ResumeAccepted,
			m.ResumeRejected, m.GraceEntered, m.GraceExpired, m.ReconcileRequests, m.ReconcileOutcomes,
			m.AuthFailures, m.Dropped, m.ConfirmLatency, m.TopologyPushes, m.ForwardedSessions)
	}
	m.Forward = forward.NewRelayMetrics(reg)
	return m
}
