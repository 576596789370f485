package quic

import (
	"time"

	"github.com/fibrilgo/fibril/core"
)

// connInfo describes one live connection for tests.
type connInfo struct {
	Dialer   core.NodeID
	Outbound bool
	Retired  bool
}

// liveConns lists the live connections to peer.
func (t *Transport) liveConns(peer core.NodeID) []connInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []connInfo
	if pc := t.peers[peer]; pc != nil {
		for _, c := range pc.conns {
			if !c.dead {
				out = append(out, connInfo{Dialer: c.dialer, Outbound: c.outbound, Retired: c.retired})
			}
		}
	}
	return out
}

func (t *Transport) setRetireLinger(d time.Duration) {
	t.mu.Lock()
	t.retireLinger = d
	t.mu.Unlock()
}

// crash drops the UDP socket without telling peers (no CONNECTION_CLOSE),
// as a killed process would, then releases the rest.
func (t *Transport) crash() {
	_ = t.qt.Close()
	_ = t.udp.Close()
	_ = t.Close()
}

// streamDialer is the node that dialed the connection s runs on.
func streamDialer(s core.Stream) core.NodeID { return s.(*stream).c.dialer }

// packetsSent is the number of QUIC packets sent on s's connection.
func packetsSent(s core.Stream) uint64 { return s.(*stream).c.qc.ConnectionStats().PacketsSent }

func (t *Transport) dialsMadeCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dialsMade
}
