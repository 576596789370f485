package quic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/transport/internal/streammetrics"
)

// One QUIC connection per broker pair: the connections the transport
// knows per peer, dialing one (concurrent opens share the dial), settling
// which one new streams use after a simultaneous dial, and retiring the
// other.

// peerConns is what the transport knows about one peer: its live
// connections (normally one, two during a simultaneous dial) and the dial
// in flight, which concurrent OpenStreams share.
type peerConns struct {
	conns []*conn
	dial  *dialCall
}

type dialCall struct {
	done chan struct{}
	err  error
}

// conn is one QUIC connection to a peer. Fields after mu-comment are
// guarded by Transport.mu.
type conn struct {
	t        *Transport
	qc       *quicgo.Conn
	peer     core.NodeID
	dialer   core.NodeID // the node that dialed it: this one (outbound) or the peer
	outbound bool

	// guarded by Transport.mu
	streams    map[*stream]struct{}
	hadStreams bool
	dead       bool
	retired    bool // superseded: no new stream is opened on it
	linger     *time.Timer
}

// register adds a live connection, starts its goroutines and settles
// which connection to the peer new streams use.
func (t *Transport) register(c *conn) {
	c.streams = make(map[*stream]struct{})
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = c.qc.CloseWithError(codeConnShutdown, "broker transport closing")
		return
	}
	pc := t.peerConns(c.peer)
	pc.conns = append(pc.conns, c)
	if c.outbound {
		t.dialsMade++
	}
	closeNow := t.settle(pc)
	t.wg.Add(2)
	t.mu.Unlock()
	t.m.connOpened()
	t.log.Debug("quic connection up", "peer", string(c.peer), "dialer", string(c.dialer), "remote", c.qc.RemoteAddr().String())
	go c.watch()
	go c.acceptLoop()
	for _, l := range closeNow {
		_ = l.qc.CloseWithError(codeConnSuperseded, "superseded by the connection dialed by "+string(min(t.self, c.peer)))
	}
}

func (t *Transport) peerConns(id core.NodeID) *peerConns {
	pc := t.peers[id]
	if pc == nil {
		pc = &peerConns{}
		t.peers[id] = pc
	}
	return pc
}

// preferred is the connection new streams to the peer use: among live
// connections that are not retired, one dialed by the smaller of the two
// node ids (so both ends keep the same one), the newest if several; else the
// newest live one. Both ends apply the same rule, so after a simultaneous
// dial both use the same connection. Called with t.mu held.
func (t *Transport) preferred(pc *peerConns) *conn {
	var best *conn
	for _, c := range pc.conns {
		if c.dead || c.retired {
			continue
		}
		if best == nil || c.wins(t.self) || !best.wins(t.self) {
			best = c
		}
	}
	return best
}

// wins reports whether the smaller node id of the pair dialed c.
func (c *conn) wins(self core.NodeID) bool { return c.dialer == min(self, c.peer) }

// settle retires every live connection to the peer other than the
// preferred one and returns those this node dialed and may close at once
// (retired, no stream ever opened on them). Only a connection's dialer
// closes it: the dialer knows every stream that can still appear on it,
// since the other end opens new streams on the preferred connection only.
// Called with t.mu held.
func (t *Transport) settle(pc *peerConns) []*conn {
	best := t.preferred(pc)
	var closeNow []*conn
	for _, c := range pc.conns {
		if c == best || c.dead || c.retired {
			continue
		}
		c.retired = true
		t.log.Debug("quic connection superseded", "peer", string(c.peer), "dialer", string(c.dialer))
		if c.outbound && len(c.streams) == 0 {
			if !c.hadStreams {
				closeNow = append(closeNow, c)
			} else {
				t.lingerClose(c)
			}
		}
	}
	return closeNow
}

// lingerClose closes a retired connection without streams after
// retireLinger, unless a stream appeared on it meanwhile. Called with t.mu
// held.
func (t *Transport) lingerClose(c *conn) {
	if c.linger != nil || t.closed {
		return
	}
	c.linger = time.AfterFunc(t.retireLinger, func() {
		t.mu.Lock()
		c.linger = nil
		idle := len(c.streams) == 0 && !c.dead && !t.closed
		t.mu.Unlock()
		if idle {
			_ = c.qc.CloseWithError(codeConnSuperseded, "superseded by the connection dialed by "+string(min(t.self, c.peer)))
		}
	})
}

// watch removes the connection when it dies and ends the accounting of
// its streams (their Reads and Writes fail with the connection's error).
func (c *conn) watch() {
	defer c.t.wg.Done()
	<-c.qc.Context().Done()
	t := c.t
	t.mu.Lock()
	c.dead = true
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
	if pc := t.peers[c.peer]; pc != nil {
		for i, x := range pc.conns {
			if x == c {
				pc.conns = append(pc.conns[:i], pc.conns[i+1:]...)
				break
			}
		}
		if len(pc.conns) == 0 && pc.dial == nil {
			delete(t.peers, c.peer)
		}
	}
	var lost []*stream
	for s := range c.streams {
		lost = append(lost, s)
	}
	for _, s := range lost {
		t.releaseLocked(s)
	}
	t.mu.Unlock()
	for _, s := range lost {
		s.countAbort()
	}
	t.m.connClosed()
	cause := context.Cause(c.qc.Context())
	t.log.Debug("quic connection down", "peer", string(c.peer), "dialer", string(c.dialer), "cause", cause)
}

// acceptLoop takes the streams the peer opens on this connection.
func (c *conn) acceptLoop() {
	defer c.t.wg.Done()
	for {
		qs, err := c.qc.AcceptStream(c.qc.Context())
		if err != nil {
			return
		}
		s, ok := c.t.newStream(c, qs, streammetrics.In, nil)
		if !ok {
			qs.CancelRead(codeStreamAborted)
			qs.CancelWrite(codeStreamAborted)
			continue
		}
		c.t.wg.Add(1)
		go c.t.admit(s)
	}
}

// connFor returns the connection new streams to peer use, dialing one
// when there is none. Concurrent callers share one dial.
func (t *Transport) connFor(ctx context.Context, peer core.Peer) (*conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if t.closed {
			return nil, core.ErrClosed
		}
		pc := t.peerConns(peer.ID)
		if c := t.preferred(pc); c != nil {
			return c, nil
		}
		dc := pc.dial
		if dc == nil {
			dc = &dialCall{done: make(chan struct{})}
			pc.dial = dc
			t.wg.Add(1)
			go t.dial(peer, dc)
		}
		t.mu.Unlock()
		select {
		case <-dc.done:
		case <-ctx.Done():
			t.mu.Lock()
			return nil, ctx.Err()
		}
		t.mu.Lock()
		if dc.err != nil {
			// An inbound connection from the peer may have arrived
			// meanwhile; it will do.
			if c := t.preferred(t.peerConns(peer.ID)); c != nil {
				return c, nil
			}
			return nil, dc.err
		}
	}
}

// dial makes an outbound connection to peer and registers it. It runs on
// its own, bounded by core.DefaultConnectTimeout and the transport's
// life, so a caller whose context ends early does not waste a handshake
// another caller waits for.
func (t *Transport) dial(peer core.Peer, dc *dialCall) {
	defer t.wg.Done()
	err := t.dialOnce(peer)
	t.mu.Lock()
	if pc := t.peers[peer.ID]; pc != nil && pc.dial == dc {
		pc.dial = nil
		if len(pc.conns) == 0 {
			delete(t.peers, peer.ID)
		}
	}
	dc.err = err
	close(dc.done)
	t.mu.Unlock()
}

func (t *Transport) dialOnce(peer core.Peer) error {
	addr, err := net.ResolveUDPAddr("udp", peer.Addr)
	if err != nil {
		return fmt.Errorf("resolve %q: %w", peer.Addr, err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, core.DefaultConnectTimeout)
	defer cancel()
	if t.dialHook != nil {
		t.dialHook(peer.ID)
	}
	cli := t.peer.ClientConfig(string(peer.ID))
	cli.NextProtos = []string{ALPN}
	qc, err := t.qt.Dial(ctx, addr, cli, t.qcfg)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("QUIC handshake with %s timed out after %s", addr, core.DefaultConnectTimeout)
		}
		return err
	}
	t.register(&conn{t: t, qc: qc, peer: peer.ID, dialer: t.self, outbound: true})
	return nil
}

// connState is the TLS state of c (both ends verified the other).
func (c *conn) connState() tls.ConnectionState { return c.qc.ConnectionState().TLS }
