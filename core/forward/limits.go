package forward

import (
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// The limits of forwarding on a gateway (core/forward/README.md#bounds): upstream sessions in
// all and per owner, the fail-fast window after a refused connect, and the
// bytes of confirmed publishes in flight.

// Limits are the runtime settings of forwarding (routing.*, core/forward/README.md#bounds), read
// on every use so a change applies to later events: 0 means no limit.
type Limits struct {
	MaxUpstreams            int           // routing.max_upstream_sessions
	MaxUpstreamsPerOwner    int           // routing.max_upstream_sessions_per_owner
	ForwardTimeout          time.Duration // routing.forward_timeout_ms
	UpstreamConnectTimeout  time.Duration // routing.upstream_connect_timeout_ms
	UpstreamIdleClose       time.Duration // routing.upstream_idle_close_ms
	MaxInflightForwardBytes int64         // routing.max_inflight_forward_bytes
	// ResumeWithin is how long after its link dropped an upstream session
	// is resumed: connection.reconnect_grace_ms, the owner's grace (the
	// cluster runs one setting); 0 turns resume off.
	ResumeWithin time.Duration
}

// refusedFailFast is how long an owner that refused a connection gets 503
// at once, without a new dial (core/forward/README.md#failures).
const refusedFailFast = time.Second

// gatewayLimits are the server-wide counters behind routing.max_upstream_*
// and the fail-fast window after a refused connect.
type gatewayLimits struct {
	mu       sync.Mutex
	total    int
	perOwner map[core.NodeID]int
	refused  map[core.NodeID]time.Time
}

// take reserves an upstream session to owner; on refusal it returns the
// limit's label (fibril_forward_rejected_total) and the 503 to answer.
func (l *gatewayLimits) take(owner core.NodeID, set Limits, now time.Time) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until, ok := l.refused[owner]; ok && now.Before(until) {
		return "refused_recently", core.Errorf(core.ErrUnavailable, "owner %s refused a connection less than %s ago; retry", owner, refusedFailFast)
	}
	if set.MaxUpstreams > 0 && l.total >= set.MaxUpstreams {
		return "max_upstream_sessions", core.Errorf(core.ErrUnavailable, "this broker has routing.max_upstream_sessions (%d) upstream sessions open; retry", set.MaxUpstreams)
	}
	if set.MaxUpstreamsPerOwner > 0 && l.perOwner[owner] >= set.MaxUpstreamsPerOwner {
		return "max_upstream_sessions_per_owner", core.Errorf(core.ErrUnavailable, "this broker has routing.max_upstream_sessions_per_owner (%d) upstream sessions open to %s; retry", set.MaxUpstreamsPerOwner, owner)
	}
	if l.perOwner == nil {
		l.perOwner = make(map[core.NodeID]int)
	}
	l.total++
	l.perOwner[owner]++
	return "", nil
}

func (l *gatewayLimits) release(owner core.NodeID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perOwner[owner]--; l.perOwner[owner] <= 0 {
		delete(l.perOwner, owner)
	}
}

func (l *gatewayLimits) refuse(owner core.NodeID, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil {
		l.refused = make(map[core.NodeID]time.Time)
	}
	l.refused[owner] = until
}

// byOwner returns the upstream sessions open (or being opened) per owner.
func (l *gatewayLimits) byOwner() map[core.NodeID]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[core.NodeID]int, len(l.perOwner))
	for o, n := range l.perOwner {
		out[o] = n
	}
	return out
}

// Open returns the number of upstream sessions open on this broker.
func (l *gatewayLimits) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// inflightWaitMax caps how long a publish waits for forwarding byte room:
// the forward timeout, at most the 5 s heartbeat interval: a client
// waiting longer would be declared dead by its own heartbeat.
const inflightWaitMax = 5 * time.Second

// acquireInflight reserves n bytes of routing.max_inflight_forward_bytes,
// waiting (the client's reader, so the client feels the backpressure) at
// most the forward timeout capped at inflightWaitMax. A single publish
// larger than the limit passes when nothing else is in flight.
func (g *Gateway) acquireInflight(n int64, set Limits) bool {
	limit := set.MaxInflightForwardBytes
	wait := min(set.ForwardTimeout, inflightWaitMax)
	deadline := time.Now().Add(wait)
	for {
		cur := g.inflight.Load()
		if limit <= 0 || cur == 0 || cur+n <= limit {
			if g.inflight.CompareAndSwap(cur, cur+n) {
				g.m.InflightBytes.Add(float64(n))
				return true
			}
			continue
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *Gateway) releaseInflight(n int64) {
	g.inflight.Add(-n)
	g.m.InflightBytes.Sub(float64(n))
}
