package raft

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core/tlsconf"
)

// One TCP port carries two kinds of connection, told apart by the first
// byte the dialer sends (inside TLS when TLS is on): raft's own traffic,
// handed to raft's NetworkTransport, and our RPC channel (forwarded
// writes, lease renewals, linearizable reads, joins, pings).
const (
	kindRaft byte = 'R'
	kindRPC  byte = 'C'
)

// handshakeTimeout bounds TLS plus the authentication preamble.
const handshakeTimeout = 10 * time.Second

// network owns the listener and every connection made through it, so a
// shutdown (or a simulated crash) closes them all at once.
type network struct {
	nodeID    string
	advertise string
	secret    []byte
	tls       *tlsconf.Peer
	log       *slog.Logger
	ln        net.Listener
	// expectID names the node that should answer at addr ("" = unknown).
	expectID func(addr string) string
	// serveRPC handles one authenticated RPC connection until it ends.
	serveRPC func(conn net.Conn, peer string)

	raftConns  chan net.Conn
	raftClosed chan struct{}
	raftOnce   sync.Once
	done       chan struct{}
	refusals   *throttle

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newNetwork(ln net.Listener, o Options, advertise string) *network {
	return &network{
		nodeID:     o.NodeID,
		advertise:  advertise,
		secret:     o.Secret,
		tls:        o.TLS,
		log:        o.Logger,
		ln:         ln,
		raftConns:  make(chan net.Conn),
		raftClosed: make(chan struct{}),
		done:       make(chan struct{}),
		refusals:   newThrottle(30 * time.Second),
		conns:      map[net.Conn]struct{}{},
	}
}

// start accepts connections until close.
func (n *network) start() {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		delay := 5 * time.Millisecond
		for {
			c, err := n.ln.Accept()
			if err != nil {
				select {
				case <-n.done:
					return
				case <-time.After(delay):
				}
				delay = min(2*delay, time.Second)
				n.log.Warn("raft: accept failed", "err", err)
				continue
			}
			delay = 5 * time.Millisecond
			if !n.track(c) {
				_ = c.Close()
				return
			}
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.accept(c)
			}()
		}
	}()
}

func (n *network) track(c net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *network) untrack(c net.Conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// close stops accepting and closes every connection.
func (n *network) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.done)
	_ = n.ln.Close()
	for c := range n.conns {
		_ = c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// trackedConn removes its base connection from the tracking set on Close.
type trackedConn struct {
	net.Conn
	n    *network
	base net.Conn
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() { t.n.untrack(t.base) })
	return t.Conn.Close()
}

// accept authenticates one inbound connection and routes it by kind.
func (n *network) accept(base net.Conn) {
	conn := base
	remote := base.RemoteAddr().String()
	_ = base.SetDeadline(time.Now().Add(handshakeTimeout))
	certID := ""
	if n.tls != nil {
		tc := tls.Server(base, n.tls.ServerConfig())
		if err := tc.Handshake(); err != nil {
			n.refused(remote, "", "TLS handshake failed: "+err.Error())
			_ = base.Close()
			n.untrack(base)
			return
		}
		certID = tlsconf.PeerNodeID(tc.ConnectionState())
		conn = tc
	}
	kind, peer, err := serverHandshake(conn, n.nodeID, n.secret, certID)
	if err != nil {
		n.refused(remote, peer, err.Error())
		_ = conn.Close()
		n.untrack(base)
		return
	}
	_ = base.SetDeadline(time.Time{})
	tracked := &trackedConn{Conn: conn, n: n, base: base}
	switch kind {
	case kindRaft:
		select {
		case n.raftConns <- tracked:
		case <-n.raftClosed:
			_ = tracked.Close()
		case <-n.done:
			_ = tracked.Close()
		}
	case kindRPC:
		n.serveRPC(tracked, peer)
		_ = tracked.Close()
	}
}

// refused logs a refused inbound connection, once per 30 s per address.
func (n *network) refused(remote, claimed, why string) {
	if n.refusals.allow("in " + remote) {
		n.log.Warn("raft: refused a connection", "remote", remote, "claims_node", claimed, "reason", why)
	}
}

// dial opens an authenticated connection of the given kind to addr.
// expect is the node that should answer there ("" accepts any member);
// the answering node's id is returned.
func (n *network) dial(ctx context.Context, addr string, kind byte, expect string) (net.Conn, string, error) {
	var d net.Dialer
	base, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", err
	}
	if !n.track(base) {
		_ = base.Close()
		return nil, "", net.ErrClosed
	}
	fail := func(err error) (net.Conn, string, error) {
		_ = base.Close()
		n.untrack(base)
		return nil, "", err
	}
	deadline := time.Now().Add(handshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = base.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = base.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn := base
	certID := ""
	if n.tls != nil {
		tc := tls.Client(base, n.tls.ClientConfig(expect))
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(fmt.Errorf("TLS with %s: %w", addr, err))
		}
		certID = tlsconf.CertNodeID(tc.ConnectionState().PeerCertificates[0])
		conn = tc
	}
	peer, err := clientHandshake(conn, kind, n.nodeID, n.secret, expect, certID)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Connected, but no answer in time (a hung process, a black
			// hole) or the dial was given up: the peer is down, which the
			// leader's peer watch reports; this is no authentication
			// failure.
			n.log.Debug("raft: a peer did not answer the connection handshake", "addr", addr, "expected_node", expect, "err", err)
		case n.refusals.allow("out " + addr):
			n.log.Warn("raft: could not authenticate to a peer", "addr", addr, "expected_node", expect, "err", err)
		}
		return fail(fmt.Errorf("%s: %w", addr, err))
	}
	if !stop() {
		return fail(ctx.Err())
	}
	_ = base.SetDeadline(time.Time{})
	return &trackedConn{Conn: conn, n: n, base: base}, peer, nil
}

// The authentication preamble proves that both ends know the cluster
// secret without sending it: each side contributes a random nonce and
// answers with an HMAC-SHA256 over both nonces, both node ids and the
// connection kind, under a label that differs per direction (so one
// side's proof can never be replayed as the other's).
//
//	dialer → "FBRL" v1 kind len(id) id nonceD[32]
//	server → 0 len(id) id nonceS[32] mac("server")   | 1 len(msg)[2] msg
//	dialer → mac("dialer")
//	server → 0                                        | 1 len(msg)[2] msg
var preambleMagic = [5]byte{'F', 'B', 'R', 'L', 1}

const nonceLen = 32

var (
	errSecretMismatch = errors.New("cluster secret mismatch: the peer does not know this cluster's secret (FIBRIL_CLUSTER_SECRET / coordination.secret_path must be the same on every node)")
	errBadPreamble    = errors.New("not a Fibril raft peer (bad preamble)")
)

func proof(secret []byte, label string, kind byte, nonceD, nonceS []byte, dialer, server string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("fibril-raft-v1 " + label))
	m.Write([]byte{kind})
	m.Write(nonceD)
	m.Write(nonceS)
	m.Write([]byte{byte(len(dialer))})
	m.Write([]byte(dialer))
	m.Write([]byte{byte(len(server))})
	m.Write([]byte(server))
	return m.Sum(nil)
}

func clientHandshake(conn net.Conn, kind byte, self string, secret []byte, expect, certID string) (string, error) {
	nonceD := make([]byte, nonceLen)
	_, _ = rand.Read(nonceD)
	hello := append(append([]byte(nil), preambleMagic[:]...), kind, byte(len(self)))
	hello = append(append(hello, self...), nonceD...)
	if _, err := conn.Write(hello); err != nil {
		return "", err
	}
	if err := readStatus(conn); err != nil {
		return "", err
	}
	server, err := readID(conn)
	if err != nil {
		return "", err
	}
	buf := make([]byte, nonceLen+sha256.Size)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return "", err
	}
	nonceS, mac := buf[:nonceLen], buf[nonceLen:]
	if !hmac.Equal(mac, proof(secret, "server", kind, nonceD, nonceS, self, server)) {
		return server, fmt.Errorf("node %q: %w", server, errSecretMismatch)
	}
	switch {
	case expect != "" && server != expect:
		return server, fmt.Errorf("node %q answered where %q was expected (a stale address?)", server, expect)
	case certID != "" && certID != server:
		return server, fmt.Errorf("the peer claims node %q but its certificate names %q", server, certID)
	}
	if _, err := conn.Write(proof(secret, "dialer", kind, nonceD, nonceS, self, server)); err != nil {
		return server, err
	}
	if err := readStatus(conn); err != nil {
		return server, err
	}
	return server, nil
}

func serverHandshake(conn net.Conn, self string, secret []byte, certID string) (kind byte, peer string, err error) {
	var head [len(preambleMagic) + 1]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return 0, "", err
	}
	if [5]byte(head[:5]) != preambleMagic || (head[5] != kindRaft && head[5] != kindRPC) {
		writeRefusal(conn, errBadPreamble.Error())
		return 0, "", errBadPreamble
	}
	kind = head[5]
	if peer, err = readID(conn); err != nil {
		return 0, "", err
	}
	nonceD := make([]byte, nonceLen)
	if _, err := io.ReadFull(conn, nonceD); err != nil {
		return 0, peer, err
	}
	if certID != "" && certID != peer {
		err := fmt.Errorf("the peer claims node %q but its certificate names %q", peer, certID)
		writeRefusal(conn, err.Error())
		return 0, peer, err
	}
	nonceS := make([]byte, nonceLen)
	_, _ = rand.Read(nonceS)
	msg := append([]byte{0, byte(len(self))}, self...)
	msg = append(append(msg, nonceS...), proof(secret, "server", kind, nonceD, nonceS, peer, self)...)
	if _, err := conn.Write(msg); err != nil {
		return 0, peer, err
	}
	mac := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, mac); err != nil {
		// A dialer that cannot verify our proof hangs up here.
		return 0, peer, fmt.Errorf("the peer hung up after our proof (%v); it likely holds another cluster secret", err)
	}
	if !hmac.Equal(mac, proof(secret, "dialer", kind, nonceD, nonceS, peer, self)) {
		writeRefusal(conn, errSecretMismatch.Error())
		return 0, peer, errSecretMismatch
	}
	if _, err := conn.Write([]byte{0}); err != nil {
		return 0, peer, err
	}
	return kind, peer, nil
}

func readID(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	id := make([]byte, n[0])
	if _, err := io.ReadFull(r, id); err != nil {
		return "", err
	}
	return string(id), nil
}

func writeRefusal(w io.Writer, msg string) {
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	_, _ = w.Write(append([]byte{1, byte(len(msg) >> 8), byte(len(msg))}, msg...))
}

// readStatus reads a status byte; a refusal becomes an error carrying the
// peer's reason.
func readStatus(r io.Reader) error {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	if b[0] == 0 {
		return nil
	}
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return fmt.Errorf("refused by the peer: %w", err)
	}
	msg := make([]byte, int(l[0])<<8|int(l[1]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return fmt.Errorf("refused by the peer: %w", err)
	}
	return fmt.Errorf("refused by the peer: %s", msg)
}

// streamLayer is raft's view of the network: authenticated raft
// connections in, authenticated raft dials out.
type streamLayer struct{ n *network }

func (s streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.n.raftConns:
		return c, nil
	case <-s.n.raftClosed:
		return nil, net.ErrClosed
	case <-s.n.done:
		return nil, net.ErrClosed
	}
}

// Close is called by raft's transport on shutdown; the listener itself
// belongs to the network, which the Coordinator closes afterwards.
func (s streamLayer) Close() error {
	s.n.raftOnce.Do(func() { close(s.n.raftClosed) })
	return nil
}

func (s streamLayer) Addr() net.Addr { return advertiseAddr(s.n.advertise) }

func (s streamLayer) Dial(addr hraft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, _, err := s.n.dial(ctx, string(addr), kindRaft, s.n.expectID(string(addr)))
	return c, err
}

// advertiseAddr is the address raft records for this member.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }
