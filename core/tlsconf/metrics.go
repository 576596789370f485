package tlsconf

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CertExpiryMetric is the gauge both collectors below export, one series
// per certificate (label cert). Its value is a timestamp, the Prometheus
// way of exporting a deadline: an alert subtracts time() from it, and it
// does not change from one scrape to the next unless the certificate does.
const CertExpiryMetric = "fibril_tls_cert_not_after_timestamp_seconds"

const certExpiryHelp = "NotAfter of a certificate this broker presents, in seconds since the Unix epoch, by cert: server (the broker listener, and the admin listener with tls.admin_enabled), peer (inter-broker)."

// Collector exports CertExpiryMetric{cert="server"} for the serving
// certificate, read at each scrape so a Reload (S-153) shows at once.
func (m *Material) Collector() prometheus.Collector {
	return expiryGauge("server", m.NotAfter)
}

// Collector exports CertExpiryMetric{cert="peer"} for the peer
// certificate (the one serving: it follows its files).
func (p *Peer) Collector() prometheus.Collector {
	return expiryGauge("peer", p.NotAfter)
}

// NotAfter returns the peer certificate's expiry; zero for a nil Peer.
func (p *Peer) NotAfter() time.Time {
	if p == nil {
		return time.Time{}
	}
	if c := p.reload.cur.Load(); c != nil && c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

func expiryGauge(cert string, notAfter func() time.Time) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        CertExpiryMetric,
		Help:        certExpiryHelp,
		ConstLabels: prometheus.Labels{"cert": cert},
	}, func() float64 {
		t := notAfter()
		if t.IsZero() {
			return 0
		}
		return float64(t.Unix())
	})
}
