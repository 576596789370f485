package tlsconf

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// expiry gathers CertExpiryMetric{cert} from reg.
func expiry(t *testing.T, reg *prometheus.Registry, cert string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != CertExpiryMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cert" && l.GetValue() == cert {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{cert=%q} not exported", CertExpiryMetric, cert)
	return 0
}

// The server series follows a reload (S-153); the peer series sits beside
// it in the same registry.
func TestCertExpiryGauge(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	now := time.Now().Truncate(time.Second)
	c1, k1 := ca.leaf(t, "one", []string{"localhost"}, nil, now.Add(-time.Hour), now.Add(90*24*time.Hour))
	cp, kp := writePair(t, dir, "server", c1, k1)
	o, _ := fileOptions(cp, kp)
	m := mustLoad(t, o)

	root := t.TempDir()
	p := autoPeer(t, filepath.Join(root, "cluster-ca.pem"), root, "n1")

	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector(), p.Collector())
	if got, want := expiry(t, reg, "server"), float64(now.Add(90*24*time.Hour).Unix()); got != want {
		t.Errorf("server: %v, want %v", got, want)
	}
	if got, want := expiry(t, reg, "peer"), float64(p.NotAfter().Unix()); got != want || p.NotAfter().Before(now) {
		t.Errorf("peer: %v, want %v (not after %s)", got, want, p.NotAfter())
	}

	c2, k2 := ca.leaf(t, "two", []string{"localhost"}, nil, now.Add(-time.Hour), now.Add(30*24*time.Hour))
	writePair(t, dir, "server", c2, k2)
	if _, err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := expiry(t, reg, "server"), float64(now.Add(30*24*time.Hour).Unix()); got != want {
		t.Errorf("server after reload: %v, want %v", got, want)
	}
	if (*Peer)(nil).NotAfter() != (time.Time{}) {
		t.Error("a nil Peer has an expiry")
	}
}
