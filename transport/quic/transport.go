package quic

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/plugins"
)

// Application error codes on the wire. Stream codes travel in
// RESET_STREAM / STOP_SENDING, connection codes in CONNECTION_CLOSE.
const (
	// codeStreamClosed: Close stopped reading (STOP_SENDING); an orderly
	// end of the reader's interest, not a failure.
	codeStreamClosed quicgo.StreamErrorCode = 0
	// codeStreamAborted: Abort, or the transport shutting down.
	codeStreamAborted quicgo.StreamErrorCode = 1
	// codeStreamProtocol: the stream did not start with the preamble.
	codeStreamProtocol quicgo.StreamErrorCode = 2

	// codeConnSuperseded: the losing connection of a simultaneous dial,
	// closed by its dialer once no stream used it.
	codeConnSuperseded quicgo.ApplicationErrorCode = 0
	// codeConnShutdown: the transport closed; open streams are aborted.
	codeConnShutdown quicgo.ApplicationErrorCode = 1
	// codeConnIdentity: the client certificate named no node.
	codeConnIdentity quicgo.ApplicationErrorCode = 2
)

// Every stream starts with a handshake: the opener sends preamble, the
// acceptor's transport answers with the single byte ack, and only then
// does either side hand the stream to its caller.
//
//   - QUIC makes a stream visible to the peer only once a frame for it
//     arrives, so sending at once makes Accept see a stream as soon as it
//     is opened.
//   - Waiting for the ack makes a successful OpenStream mean the peer has
//     the stream. A connection whose peer crashed looks alive until its
//     idle timeout; without the ack OpenStream would hand out a stream
//     that never existed at the peer. With it, a peer that restarted
//     answers with a stateless reset (the connection ends and OpenStream
//     dials again) and a peer that is gone makes OpenStream fail with
//     ErrPeerRefused when its context ends.
//   - The preamble is long enough (with QUIC's overhead, more than the 42
//     bytes below which quic-go never sends a stateless reset) for its
//     packet to draw that reset.
//
// It costs one round trip per stream; streams are long-lived (one per
// upstream session).
const (
	preamble = "FIBRIL-PEER-STREAM/1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\n"
	ack      = byte(0x06)
)

// preambleTimeout bounds the wait for a stream's first byte; a peer that
// opens a stream and sends nothing (QUIC opens lower stream ids
// implicitly) must not hold a goroutine for long.
const preambleTimeout = 10 * time.Second

// acceptQueue is how many admitted streams wait for Accept. Streams beyond
// it wait in their admit goroutine, whose number the peer's stream limit
// (max_incoming_streams per connection) bounds.
const acceptQueue = 64

// defaultRetireLinger is how long the dialer of a superseded connection
// keeps it open after its last stream ended, so a FIN or the last bytes
// still in flight reach the peer before CONNECTION_CLOSE discards them.
const defaultRetireLinger = 5 * time.Second

// Transport is the quic core.Transport. The zero value is not usable; see
// Open.
type Transport struct {
	self core.NodeID
	log  *slog.Logger
	cfg  settings
	peer *tlsconf.Peer
	qcfg *quicgo.Config

	udp *net.UDPConn
	qt  *quicgo.Transport
	ln  *quicgo.Listener
	m   *metrics

	ctx      context.Context // ends at Close: bounds dials and accept loops
	cancel   context.CancelFunc
	done     chan struct{}
	acceptQ  chan *stream
	closeOne sync.Once
	wg       sync.WaitGroup

	retireLinger time.Duration
	// dialHook, when set (tests only), runs before each outbound
	// handshake: it lets a test hold two dials until both are under way.
	dialHook func(peer core.NodeID)

	mu     sync.Mutex
	closed bool
	// dialsMade counts outbound connections registered (tests read it).
	dialsMade int
	peers     map[core.NodeID]*peerConns
	streams   map[*stream]struct{}
}

func open(_ context.Context, env plugins.TransportEnv) (*Transport, error) {
	if env.PeerTLS == nil {
		return nil, errors.New(errNoTLS)
	}
	if env.NodeID == "" {
		return nil, errors.New("quic transport: the node id is empty")
	}
	if env.Bind == "" {
		return nil, errors.New("quic transport: no UDP address to bind: set broker.peer_listener.bind (by default the broker binds UDP on the client listener's port)")
	}
	cfg, err := parseSettings(env.Config)
	if err != nil {
		return nil, err
	}
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	peer, err := tlsconf.LoadPeer(tlsconf.PeerOptions{
		NodeID: string(env.NodeID), CAFile: env.PeerTLS.CAFile, CertFile: env.PeerTLS.CertFile, KeyFile: env.PeerTLS.KeyFile, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("quic transport: %w", err)
	}
	resetKey, err := statelessResetKey(env.PeerTLS.KeyFile)
	if err != nil {
		return nil, err
	}
	uaddr, err := net.ResolveUDPAddr("udp", env.Bind)
	if err != nil {
		return nil, fmt.Errorf("quic transport: broker.peer_listener.bind %q: %w", env.Bind, err)
	}
	udp, err := net.ListenUDP("udp", uaddr)
	if err != nil {
		return nil, fmt.Errorf("quic transport: listen on UDP %s (broker.peer_listener.bind): %w", env.Bind, err)
	}
	t := &Transport{
		self:         env.NodeID,
		log:          log,
		cfg:          cfg,
		peer:         peer,
		qcfg:         quicConfig(cfg),
		udp:          udp,
		done:         make(chan struct{}),
		acceptQ:      make(chan *stream, acceptQueue),
		retireLinger: defaultRetireLinger,
		peers:        make(map[core.NodeID]*peerConns),
		streams:      make(map[*stream]struct{}),
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.qt = &quicgo.Transport{Conn: udp, StatelessResetKey: resetKey}
	srv := peer.ServerConfig()
	srv.NextProtos = []string{ALPN}
	if t.ln, err = t.qt.Listen(srv, t.qcfg); err != nil {
		t.cancel()
		_ = t.qt.Close()
		_ = udp.Close()
		return nil, fmt.Errorf("quic transport: listen on %s: %w", udp.LocalAddr(), err)
	}
	if t.m, err = newMetrics(env.Registerer); err != nil {
		t.cancel()
		_ = t.ln.Close()
		_ = t.qt.Close()
		_ = udp.Close()
		return nil, fmt.Errorf("quic transport: register metrics: %w", err)
	}

	t.wg.Add(1)
	go t.listenLoop()
	log.Info("quic transport listening", "addr", udp.LocalAddr().String(), "node", string(env.NodeID),
		"max_incoming_streams", cfg.maxIncomingStreams, "stream_receive_window_bytes", cfg.streamWindow,
		"max_idle_timeout", cfg.idleTimeout)
	return t, nil
}

// quicConfig turns the settings into quic-go's Config. The windows are
// the point: a stream's window is fixed (initial = max, no auto-tuning
// that would let one stream grow), and the connection window is the sum
// of all stream windows the peer may use, so stalled streams — whose
// bytes sit unread in their windows — can never use up the connection
// window that a healthy stream on the same connection needs. quic-go
// allocates receive buffers as data arrives, so the connection window is
// an upper bound on memory, not an allocation.
func quicConfig(s settings) *quicgo.Config {
	connWindow := uint64(s.maxIncomingStreams) * s.streamWindow
	return &quicgo.Config{
		HandshakeIdleTimeout:           min(s.idleTimeout, core.DefaultConnectTimeout),
		MaxIdleTimeout:                 s.idleTimeout,
		KeepAlivePeriod:                s.idleTimeout / 3,
		InitialStreamReceiveWindow:     s.streamWindow,
		MaxStreamReceiveWindow:         s.streamWindow,
		InitialConnectionReceiveWindow: connWindow,
		MaxConnectionReceiveWindow:     connWindow,
		MaxIncomingStreams:             s.maxIncomingStreams,
		MaxIncomingUniStreams:          -1, // unused: every stream is bidirectional
	}
}

// statelessResetKey derives the key quic-go makes stateless reset tokens
// with from this node's private key file: stable across restarts of the
// same node, so a restarted broker answers packets of a connection its
// predecessor had with a stateless reset and the peer drops that
// connection at once instead of after its idle timeout. Hashing with a
// label keeps the private key itself out of the token derivation.
func statelessResetKey(keyFile string) (*quicgo.StatelessResetKey, error) {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("quic transport: read the peer key %s: %w", keyFile, err)
	}
	h := sha256.New()
	h.Write([]byte("fibril quic stateless reset key v1\x00"))
	h.Write(b)
	var k quicgo.StatelessResetKey
	copy(k[:], h.Sum(nil))
	return &k, nil
}

// Addr is the bound UDP address.
func (t *Transport) Addr() net.Addr { return t.udp.LocalAddr() }

// Accept returns the next stream a peer opened, on any connection.
func (t *Transport) Accept(ctx context.Context) (core.Stream, error) {
	select {
	case <-t.done:
		return nil, t.errClosed()
	default:
	}
	select {
	case s := <-t.acceptQ:
		return s, nil
	case <-t.done:
		return nil, t.errClosed()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *Transport) errClosed() error {
	return fmt.Errorf("quic transport: %w", core.ErrClosed)
}

// Dial returns a link to peer; the connection is made (or shared) by the
// link's first OpenStream.
func (t *Transport) Dial(_ context.Context, peer core.Peer) (core.Link, error) {
	if peer.ID == "" {
		return nil, fmt.Errorf("quic transport: dial %s: the peer's node id is empty: %w", peer.Addr, core.ErrPeerRefused)
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("quic transport: dial %s: %w: %w", peer.ID, core.ErrPeerRefused, core.ErrClosed)
	}
	return &link{t: t, peer: peer, streams: make(map[*stream]struct{})}, nil
}

// Close aborts every stream, closes every connection with an error code
// (the peer's streams abort at once instead of waiting for the idle
// timeout), the listener and the UDP socket, and waits for the
// transport's goroutines.
func (t *Transport) Close() error {
	t.closeOne.Do(func() {
		t.mu.Lock()
		t.closed = true
		streams := make([]*stream, 0, len(t.streams))
		for s := range t.streams {
			streams = append(streams, s)
		}
		var conns []*conn
		for _, pc := range t.peers {
			for _, c := range pc.conns {
				if c.linger != nil {
					c.linger.Stop()
				}
				conns = append(conns, c)
			}
		}
		t.mu.Unlock()
		close(t.done)
		t.cancel()
		for _, s := range streams {
			s.abortLocal(codeStreamAborted, true)
		}
		_ = t.ln.Close()
		for _, c := range conns {
			_ = c.qc.CloseWithError(codeConnShutdown, "broker transport closing")
		}
		_ = t.qt.Close()
		_ = t.udp.Close()
		t.wg.Wait()
	})
	return nil
}

// listenLoop admits inbound connections.
func (t *Transport) listenLoop() {
	defer t.wg.Done()
	for {
		qc, err := t.ln.Accept(t.ctx)
		if err != nil {
			return
		}
		// ServerConfig verified the chain and that it names a node.
		id := core.NodeID(tlsconf.PeerNodeID(qc.ConnectionState().TLS))
		if id == "" {
			_ = qc.CloseWithError(codeConnIdentity, "the client certificate names no node")
			continue
		}
		t.register(&conn{t: t, qc: qc, peer: id, dialer: id})
	}
}

// admit consumes the stream preamble and queues the stream for Accept.
func (t *Transport) admit(s *stream) {
	defer t.wg.Done()
	var b [len(preamble)]byte
	_ = s.qs.SetReadDeadline(time.Now().Add(preambleTimeout))
	_, err := io.ReadFull(s.qs, b[:])
	if err != nil || string(b[:]) != preamble {
		// A FIN or reset before the preamble, a timeout or foreign
		// bytes: no stream for the application.
		t.log.Debug("quic stream without preamble dropped", "peer", string(s.c.peer), "err", err)
		s.abortLocal(codeStreamProtocol, false)
		return
	}
	_ = s.qs.SetReadDeadline(time.Time{})
	// A one-byte write only queues the byte; it does not wait.
	if _, err := s.qs.Write([]byte{ack}); err != nil {
		s.abortLocal(codeStreamAborted, false)
		return
	}
	select {
	case t.acceptQ <- s:
	case <-t.done:
		s.abortLocal(codeStreamAborted, true)
	}
}

// newStream registers a stream; false when the transport, the link or
// the connection can take no new stream.
func (t *Transport) newStream(c *conn, qs *quicgo.Stream, dir string, l *link) (*stream, bool) {
	t.mu.Lock()
	if t.closed || c.dead || (l != nil && l.closed) {
		t.mu.Unlock()
		return nil, false
	}
	s := &stream{t: t, c: c, qs: qs, dir: dir, link: l}
	t.streams[s] = struct{}{}
	c.streams[s] = struct{}{}
	c.hadStreams = true
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
	if l != nil {
		l.streams[s] = struct{}{}
	}
	t.mu.Unlock()
	t.m.Opened(dir)
	return s, true
}

// release ends the accounting of a stream (once): metrics, the sets of
// the transport, the connection and the link, and a retired connection
// this node dialed closes once its last stream is gone.
func (t *Transport) release(s *stream) {
	t.mu.Lock()
	t.releaseLocked(s)
	t.mu.Unlock()
}

func (t *Transport) releaseLocked(s *stream) {
	if s.released {
		return
	}
	s.released = true
	delete(t.streams, s)
	delete(s.c.streams, s)
	if s.link != nil {
		delete(s.link.streams, s)
	}
	t.m.Closed(s.dir)
	if c := s.c; c.retired && c.outbound && !c.dead && len(c.streams) == 0 {
		t.lingerClose(c)
	}
}
