// Package metricstest reads Prometheus series in tests.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value sums the samples of metric name in g whose labels include every
// pair in labels (all of the metric's series when labels is empty). A
// counter or gauge counts; it fails the test when no series matches.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := Lookup(t, g, name, labels)
	if !ok {
		t.Fatalf("metric %s%v not found", name, labels)
	}
	return v
}

// Lookup is Value that reports a missing series instead of failing.
func Lookup(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			found = true
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum, found
}
