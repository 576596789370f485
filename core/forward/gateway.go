package forward

import (
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/lograte"
)

// Gateway is the server-wide side of the relay: the dialer that opens
// upstream sessions, the limits every connection's upstream sessions
// count against, and the forwarding metrics. Each client connection gets
// a Relay from it.
type Gateway struct {
	dial   Dialer
	limits func() Limits
	m      *RelayMetrics

	counts   gatewayLimits // upstream sessions of every connection (limits.go)
	inflight atomic.Int64  // bytes of forwarded confirmed publishes awaiting answers
	// warned rate-limits the warning about an owner whose upstream
	// session did not open.
	warned lograte.Limiter[core.NodeID]
}

// warnEvery rate-limits the warnings about one owner.
const warnEvery = 10 * time.Second

// NewGateway returns the gateway side of forwarding. dial nil: this broker
// cannot forward (CanForward is false, and a relayed operation answers
// 503). limits is read on every use; m nil: unregistered metrics.
func NewGateway(dial Dialer, limits func() Limits, m *RelayMetrics) *Gateway {
	if limits == nil {
		limits = func() Limits { return Limits{} }
	}
	if m == nil {
		m = NewRelayMetrics(nil)
	}
	return &Gateway{dial: dial, limits: limits, m: m, warned: lograte.Limiter[core.NodeID]{Every: warnEvery}}
}

// CanForward reports whether this broker can open upstream sessions.
func (g *Gateway) CanForward() bool { return g.dial != nil }

// Open is the number of upstream sessions open (or being opened) on this
// broker, over every client connection.
func (g *Gateway) Open() int { return g.counts.open() }

// ByOwner is Open per owner node.
func (g *Gateway) ByOwner() map[core.NodeID]int { return g.counts.byOwner() }

// InflightBytes is the bytes of relayed confirmed publishes waiting for
// their owner's answer.
func (g *Gateway) InflightBytes() int64 { return g.inflight.Load() }
