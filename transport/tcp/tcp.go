// Package tcp is the built-in "tcp" inter-broker transport: every stream
// is its own TCP connection, TLS 1.3 with mutual node certificates when
// inter-broker TLS is on, plain TCP otherwise. Separate connections make
// streams independent (one that stalls never stops another) at the cost
// of a handshake per stream; callers keep streams open and reuse them.
//
// Writes are coalesced (transport/coalesce): a stream sends a batch of
// frames per packet or TLS record rather than one per frame, and a peer
// that stops reading shows as a Write that blocks until its deadline.
//
// See README.md for configuration, metrics and failure behaviour.
package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/transport/internal/streammetrics"
)

// Tunables. They are constants, not configuration: they bound failure
// detection and resource use, and no deployment has needed them moved.
const (
	// HandshakeTimeout bounds an accepted connection's TLS handshake, so
	// a slow or garbage peer holds a handshake slot, never the listener.
	HandshakeTimeout = 10 * time.Second
	// KeepAliveIdle is the idle time before TCP keepalive probes start;
	// with KeepAliveInterval and KeepAliveCount a silently dead peer is
	// detected in about 30 s even on a stream nobody writes to.
	KeepAliveIdle     = 15 * time.Second
	KeepAliveInterval = 5 * time.Second
	KeepAliveCount    = 3
	// CloseTimeout bounds the orderly Close's wait for pending bytes when
	// the stream has no write deadline; then the stream is aborted.
	CloseTimeout = 5 * time.Second
	// maxHandshakes bounds the accepted connections handshaking or waiting
	// for Accept at once; beyond it the listener stops accepting (the
	// kernel backlog holds newcomers) until a slot frees.
	maxHandshakes = 256
)

// Transport is the tcp core.Transport.
type Transport struct {
	nodeID core.NodeID
	peer   *tlsconf.Peer // nil: plain TCP
	srvTLS *tls.Config   // for accepted connections, when peer != nil
	log    *slog.Logger
	m      *streammetrics.Streams
	ln     net.Listener // nil without env.Bind

	accepted chan *stream
	closed   chan struct{}
	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	slots    chan struct{} // maxHandshakes tokens
	wg       sync.WaitGroup

	mu       sync.Mutex
	isClosed bool
	streams  map[*stream]struct{} // live streams, aborted by Close
}

// Open starts the transport for env: it loads the peer TLS material when
// env.PeerTLS is set and binds env.Bind when it is not empty, so a broker
// that cannot listen fails at start.
func Open(ctx context.Context, env plugins.TransportEnv) (core.Transport, error) {
	return open(ctx, env)
}

func open(_ context.Context, env plugins.TransportEnv) (*Transport, error) {
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Transport{
		nodeID:   env.NodeID,
		log:      log,
		accepted: make(chan *stream),
		closed:   make(chan struct{}),
		slots:    make(chan struct{}, maxHandshakes),
		streams:  make(map[*stream]struct{}),
	}
	if env.PeerTLS != nil {
		p, err := tlsconf.LoadPeer(tlsconf.PeerOptions{
			NodeID:   string(env.NodeID),
			CAFile:   env.PeerTLS.CAFile,
			CertFile: env.PeerTLS.CertFile,
			KeyFile:  env.PeerTLS.KeyFile,
			Logger:   log,
		})
		if err != nil {
			return nil, fmt.Errorf("tcp transport: %w", err)
		}
		t.peer = p
		t.srvTLS = p.ServerConfig()
		// No session tickets: brokers do not resume, and a ticket the
		// dialer never reads would turn its orderly close into an RST.
		t.srvTLS.SessionTicketsDisabled = true
	}
	m, err := newMetrics(env.Registerer)
	if err != nil {
		return nil, fmt.Errorf("tcp transport: metrics: %w", err)
	}
	t.m = m
	t.ctx, t.cancel = context.WithCancel(context.Background())
	if env.Bind != "" {
		ln, err := net.Listen("tcp", env.Bind)
		if err != nil {
			t.cancel()
			return nil, fmt.Errorf("tcp transport: listen on broker.peer_listener.bind %s: %w", env.Bind, err)
		}
		t.ln = ln
		t.wg.Add(1)
		go t.acceptLoop()
	}
	return t, nil
}

// Addr is the bound peer listener, or nil.
func (t *Transport) Addr() net.Addr {
	if t.ln == nil {
		return nil
	}
	return t.ln.Addr()
}

func (t *Transport) errClosed() error {
	return fmt.Errorf("tcp transport: %w", core.ErrClosed)
}

// Accept returns the next stream a peer opened, after its handshake.
func (t *Transport) Accept(ctx context.Context) (core.Stream, error) {
	select {
	case <-t.closed: // before a stream that is about to be aborted
		return nil, t.errClosed()
	default:
	}
	select {
	case s := <-t.accepted:
		return s.public(), nil
	case <-t.closed:
		return nil, t.errClosed()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	var backoff time.Duration
	for {
		select {
		case t.slots <- struct{}{}:
		case <-t.closed:
			return
		}
		c, err := t.ln.Accept()
		if err != nil {
			<-t.slots
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of descriptors): back off as
			// net/http does, up to a second, instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.log.Warn("tcp transport: accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-t.closed:
				return
			}
			continue
		}
		backoff = 0
		t.wg.Add(1)
		go t.serve(c.(*net.TCPConn))
	}
}

// serve handshakes one accepted connection and hands the stream to Accept.
func (t *Transport) serve(c *net.TCPConn) {
	defer t.wg.Done()
	defer func() { <-t.slots }()
	setKeepAlive(c)
	c.SetNoDelay(true) //nolint:errcheck // the default; best effort
	var (
		node core.NodeID
		tc   *tls.Conn
	)
	if t.peer != nil {
		tc = tls.Server(c, t.srvTLS)
		// t.ctx ends with Close, which must not wait out a handshake.
		ctx, cancel := context.WithTimeout(t.ctx, HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			t.log.Debug("tcp transport: peer handshake failed", "remote", c.RemoteAddr().String(), "err", err)
			abortConn(c)
			return
		}
		node = core.NodeID(tlsconf.PeerNodeID(tc.ConnectionState()))
	}
	s := t.newStream(c, tc, node, "in", nil)
	if s == nil {
		return
	}
	select {
	case t.accepted <- s:
	case <-t.closed:
		// Close aborts it with every tracked stream.
	}
}

// Dial returns a link to peer; it connects on OpenStream.
func (t *Transport) Dial(_ context.Context, peer core.Peer) (core.Link, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isClosed {
		return nil, fmt.Errorf("tcp transport: dial %s: %w: %w", peer.ID, core.ErrPeerRefused, core.ErrClosed)
	}
	return &link{t: t, peer: peer, streams: make(map[*stream]struct{})}, nil
}

// Close closes the listener, aborts every stream and waits for the
// transport's goroutines.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.isClosed {
		t.mu.Unlock()
		return nil
	}
	t.isClosed = true
	close(t.closed)
	t.cancel()
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	var err error
	if t.ln != nil {
		err = t.ln.Close()
	}
	for _, s := range streams {
		s.abort(errTransportClosed)
	}
	t.wg.Wait()
	return err
}

var errTransportClosed = errors.New("the transport was closed")

// link is a lazy way to one peer: every OpenStream dials a connection.
type link struct {
	t    *Transport
	peer core.Peer

	mu      sync.Mutex
	closed  bool
	streams map[*stream]struct{}
}

func (l *link) Peer() core.Peer { return l.peer }

// Close aborts the streams opened on the link.
func (l *link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	streams := make([]*stream, 0, len(l.streams))
	for s := range l.streams {
		streams = append(streams, s)
	}
	l.mu.Unlock()
	for _, s := range streams {
		s.abort(errLinkClosed)
	}
	return nil
}

var errLinkClosed = errors.New("the link was closed")

// OpenStream connects to the peer: TCP, then TLS naming the peer's node.
func (l *link) OpenStream(ctx context.Context) (core.Stream, error) {
	s, err := l.openStream(ctx)
	if err != nil {
		l.t.m.OpenResult(false)
		return nil, err
	}
	l.t.m.OpenResult(true)
	return s.public(), nil
}

func (l *link) refused(format string, args ...any) error {
	return fmt.Errorf("tcp transport: open a stream to %s at %s: %w: %s",
		l.peer.ID, l.peer.Addr, core.ErrPeerRefused, fmt.Sprintf(format, args...))
}

func (l *link) openStream(ctx context.Context) (*stream, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	select {
	case <-l.t.closed:
		closed = true
	default:
	}
	if closed {
		return nil, l.refused("the link or transport is closed")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, core.DefaultConnectTimeout)
		defer cancel()
	}
	// Transport.Close interrupts a dial or handshake in progress.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.t.ctx, cancel)()

	d := net.Dialer{KeepAliveConfig: keepAliveConfig()}
	nc, err := d.DialContext(ctx, "tcp", l.peer.Addr)
	if err != nil {
		refused := l.refused("%s", describeDialError(ctx, err))
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (%w)", refused, core.ErrPeerNotListening)
		}
		return nil, refused
	}
	c := nc.(*net.TCPConn)
	c.SetNoDelay(true) //nolint:errcheck // the default; best effort
	var tc *tls.Conn
	node := core.NodeID("")
	if l.t.peer != nil {
		tc = tls.Client(c, l.t.peer.ClientConfig(string(l.peer.ID)))
		if err := tc.HandshakeContext(ctx); err != nil {
			abortConn(c)
			return nil, l.refused("%s", describeHandshakeError(ctx, err))
		}
		// ClientConfig verified the chain and that the certificate
		// names l.peer.ID.
		node = core.NodeID(tlsconf.CertNodeID(tc.ConnectionState().PeerCertificates[0]))
	}
	s := l.t.newStream(c, tc, node, "out", l)
	if s == nil {
		return nil, l.refused("the link or transport is closed")
	}
	return s, nil
}

func describeDialError(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (is the peer listening on its peer address?)"
	case ctx.Err() == context.DeadlineExceeded || isTimeout(err):
		return "connect timed out: " + err.Error()
	case ctx.Err() != nil:
		return "connect canceled: " + err.Error()
	}
	return err.Error()
}

func describeHandshakeError(ctx context.Context, err error) string {
	switch {
	case ctx.Err() == context.DeadlineExceeded || isTimeout(err):
		return "TLS handshake timed out: " + err.Error()
	case ctx.Err() != nil:
		return "TLS handshake canceled: " + err.Error()
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return "the peer's certificate does not verify: " + err.Error()
	}
	// ClientConfig's VerifyConnection says whether the certificate names
	// another node or does not verify against the peer CA.
	return "TLS handshake failed: " + err.Error()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func keepAliveConfig() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: KeepAliveIdle, Interval: KeepAliveInterval, Count: KeepAliveCount}
}

func setKeepAlive(c *net.TCPConn) {
	c.SetKeepAliveConfig(keepAliveConfig()) //nolint:errcheck // best effort
}

// abortConn resets a connection: SO_LINGER 0 makes close send an RST.
func abortConn(c *net.TCPConn) {
	c.SetLinger(0) //nolint:errcheck // close anyway
	c.Close()
}

// newStream wraps a connected (and handshaken) connection and tracks it,
// or resets it and returns nil when the transport or link has closed.
func (t *Transport) newStream(c *net.TCPConn, tc *tls.Conn, node core.NodeID, dir string, l *link) *stream {
	s := newStream(c, tc, node, dir, t, l)
	t.mu.Lock()
	if t.isClosed {
		t.mu.Unlock()
		abortConn(c)
		s.w.Abort(errTransportClosed)
		return nil
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			s.abort(errLinkClosed)
			return nil
		}
		l.streams[s] = struct{}{}
		l.mu.Unlock()
	}
	t.m.Opened(dir)
	return s
}

// forget untracks an ended stream.
func (t *Transport) forget(s *stream) {
	t.mu.Lock()
	delete(t.streams, s)
	t.mu.Unlock()
	if s.link != nil {
		s.link.mu.Lock()
		delete(s.link.streams, s)
		s.link.mu.Unlock()
	}
	t.m.Closed(s.dir)
}
