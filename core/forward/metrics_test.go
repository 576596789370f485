package forward_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/session"
	"github.com/fibrilgo/fibril/core/wire"
)

// A relayed PUBLISH_OK is counted three ways (docs/metrics.md): the
// confirm counter, the summed microseconds, and one observation of the
// fibril_forward_confirm_latency_seconds histogram.
func TestForwardConfirmLatencyHistogram(t *testing.T) {
	o := newFakeOwner(t)
	r := &gwRouter{}
	reg := prometheus.NewRegistry()
	lim := forward.Limits{ForwardTimeout: 2 * time.Second, UpstreamConnectTimeout: 2 * time.Second, UpstreamIdleClose: time.Minute}
	e := newEnv(t, func(opts *session.Options) {
		opts.Router = r
		opts.Upstreams = o.dialer()
		opts.Settings = func() session.Settings {
			return session.Settings{ReconnectGrace: 5 * time.Second, RestartTTL: time.Minute, Forwarding: lim}
		}
		opts.Metrics = session.NewMetrics(reg)
	})
	c := e.dial()
	c.login()
	c.SendID(wire.OpPublish, 7, &wire.Publish{Topic: "fwd", Partition: 2, RequireConfirm: true, Payload: []byte("x")})
	up := o.next()
	h, _ := up.read()
	const wait = 20 * time.Millisecond
	time.Sleep(wait) // the owner takes a moment: the observation covers it
	up.send(wire.OpPublishOK, h.RequestID, &wire.PublishOK{Offset: 1})
	c.Expect(wire.OpPublishOK, 7)

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var confirms, micros float64
	var count uint64
	var sum float64
	found := false
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "fibril_forward_confirms_total":
				confirms = m.GetCounter().GetValue()
			case "fibril_forward_confirm_latency_microseconds_total":
				micros = m.GetCounter().GetValue()
			case "fibril_forward_confirm_latency_seconds":
				found = true
				count, sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	if !found {
		t.Fatal("fibril_forward_confirm_latency_seconds is not registered")
	}
	if confirms != 1 || count != 1 {
		t.Fatalf("confirms_total %v, histogram count %d; want 1 and 1", confirms, count)
	}
	if sum < wait.Seconds() || sum > 10 {
		t.Errorf("histogram sum %vs, want at least %v", sum, wait)
	}
	// The two record the same duration, one in µs (truncated), one in s.
	if d := sum*1e6 - micros; d < 0 || d > 1 {
		t.Errorf("microseconds_total %v and histogram sum %vs disagree", micros, sum)
	}
}
