package transporttest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sample reads one sample from reg: metric name, the series whose label
// has value (any series when label is ""). It fails the test when the
// metric is missing or a series carries a transport label other than
// transport.
func Sample(t testing.TB, reg prometheus.Gatherer, transport, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "transport" && lp.GetValue() != transport {
					t.Fatalf("%s: transport label %q, want %q", name, lp.GetValue(), transport)
				}
				if label != "" && lp.GetName() == label && lp.GetValue() != value {
					continue metrics
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s{%s=%q} not found", name, label, value)
	return 0
}
