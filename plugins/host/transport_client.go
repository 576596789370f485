package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/internal/frame"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

const (
	// acceptQueue bounds the accepted streams claimed but not yet taken by
	// Accept; at the bound the host stops reading announcements, and gRPC
	// flow control holds the plugin back.
	acceptQueue = 64
	// claimDialTimeout bounds connecting to the data socket and sending
	// the token (a local unix socket: it is immediate unless the plugin
	// hangs).
	claimDialTimeout = 5 * time.Second
	// acceptRetryMax caps the pause before re-opening a broken Accept call.
	acceptRetryMax = 2 * time.Second
)

// TransportStats are the counters of an external transport plugin (the
// Stats RPC).
type TransportStats struct {
	StreamsOpenIn, StreamsOpenOut int64
	OpensOK, OpensRefused         uint64
	Aborts                        uint64
	BytesIn, BytesOut             uint64
}

// TransportStatser is implemented by the transports OpenTransport returns
// for an external plugin and ConnectTransport returns.
type TransportStatser interface {
	TransportStats(ctx context.Context) (TransportStats, error)
}

// transportSession is one configured plugin process (or, for
// ConnectTransport, the one server): its client and data socket. Links
// dialled in an earlier session are re-dialled in the current one.
type transportSession struct {
	client pluginpb.TransportClient
	socket string
	gen    uint64
	// ctx ends when the session is replaced or the transport closes; it
	// stops the session's Accept loop.
	ctx    context.Context
	cancel context.CancelFunc
}

// transportConnector yields the current session, or an error wrapping
// core.ErrPeerRefused while there is none (the plugin restarts).
type transportConnector interface {
	client() (pluginpb.TransportClient, error)
	shutdown()
}

type staticTransportConnector struct{ c pluginpb.TransportClient }

func (s staticTransportConnector) client() (pluginpb.TransportClient, error) { return s.c, nil }
func (s staticTransportConnector) shutdown()                                 {}

// remoteTransport is core.Transport over the transport protocol. It owns
// what must outlive a plugin restart: the links (by peer), the Accept
// queue, the listener address.
type remoteTransport struct {
	conn transportConnector
	log  *slog.Logger
	// env is what Configure sends; after the first Configure its Bind is
	// pinned to the bound address when it asked for any port, so that a
	// restarted plugin listens where peers were told to dial.
	env  plugins.TransportEnv
	addr net.Addr

	accepted chan core.Stream
	life     context.Context
	stop     context.CancelFunc
	closed   atomic.Bool
	cur      atomic.Pointer[transportSession]
	gens     atomic.Uint64
	wg       sync.WaitGroup // Accept loops

	mu      sync.Mutex
	streams map[*hostStream]struct{}
	links   map[*remoteLink]struct{}
}

var (
	_ core.Transport   = (*remoteTransport)(nil)
	_ TransportStatser = (*remoteTransport)(nil)
)

func newRemoteTransport(conn transportConnector, env plugins.TransportEnv, log *slog.Logger) *remoteTransport {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	env.Logger, env.Registerer = nil, nil
	r := &remoteTransport{
		conn: conn, log: log, env: env,
		accepted: make(chan core.Stream, acceptQueue),
		streams:  make(map[*hostStream]struct{}),
		links:    make(map[*remoteLink]struct{}),
	}
	r.life, r.stop = context.WithCancel(context.Background())
	return r
}

// ConnectTransport speaks the transport protocol over an existing gRPC
// connection (to a TransportServer on this machine: the data socket is a
// local unix socket): it sends Configure with env and returns the
// Transport. The caller keeps ownership of conn; Close sends Close to the
// server but leaves conn open. plugintest uses it to run a transport
// through the protocol without a process. The result also implements
// TransportStatser.
func ConnectTransport(ctx context.Context, conn grpc.ClientConnInterface, env plugins.TransportEnv) (core.Transport, error) {
	c := pluginpb.NewTransportClient(conn)
	r := newRemoteTransport(staticTransportConnector{c}, env, env.Logger)
	if err := r.setup(ctx, c, core.TransportAPIVersion); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// setup runs after every (re)launch, before calls reach c: Configure, and
// the session's Accept loop.
func (r *remoteTransport) setup(ctx context.Context, c pluginpb.TransportClient, apiVersion int) error {
	data, err := json.Marshal(r.env)
	if err != nil {
		return fmt.Errorf("transport plugin: encode environment: %w", err)
	}
	resp, err := c.Configure(ctx, &pluginpb.TransportConfigureRequest{EnvJson: data, ApiVersion: int32(apiVersion)})
	if err != nil {
		return fmt.Errorf("transport plugin: configure: %w", contract.TransportFromStatus(ctx, err))
	}
	if resp.GetDataSocket() == "" {
		return errors.New("transport plugin: configure: no data socket in the answer")
	}
	addr := addrFromProto(resp.GetListenAddr())
	if r.gens.Load() == 0 {
		r.addr = addr
		if _, port, err := net.SplitHostPort(r.env.Bind); err == nil && port == "0" && addr != nil {
			r.env.Bind = addr.String()
		}
	} else if fmt.Sprint(addr) != fmt.Sprint(r.addr) {
		r.log.Warn("restarted transport plugin listens on another address", "was", r.addr, "now", addr)
	}
	s := &transportSession{client: c, socket: resp.GetDataSocket(), gen: r.gens.Add(1)}
	s.ctx, s.cancel = context.WithCancel(r.life)
	if old := r.cur.Swap(s); old != nil {
		old.cancel()
	}
	r.wg.Add(1)
	go r.acceptLoop(s)
	return nil
}

// session is the current session, or an error wrapping ErrPeerRefused.
func (r *remoteTransport) session() (*transportSession, error) {
	if r.closed.Load() {
		return nil, closedRefused()
	}
	c, err := r.conn.client()
	if err != nil {
		return nil, err
	}
	s := r.cur.Load()
	if s == nil || any(s.client) != any(c) {
		return nil, core.Errorf(core.ErrPeerRefused, "transport plugin: restarting")
	}
	return s, nil
}

// closedRefused is the error of a Dial or OpenStream after Close: no
// stream exists (ErrPeerRefused) because the transport is closed
// (ErrClosed).
func closedRefused() error {
	return fmt.Errorf("transport plugin: %w (%w)", core.ErrClosed, core.ErrPeerRefused)
}

// acceptLoop keeps an Accept call open for the session and queues each
// announced stream, claimed. A broken call (a plugin that died, or a
// hiccup) is re-opened after a pause until the session ends.
func (r *remoteTransport) acceptLoop(s *transportSession) {
	defer r.wg.Done()
	pause := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		stream, err := s.client.Accept(s.ctx, &pluginpb.TransportAcceptRequest{})
		for err == nil {
			var info *pluginpb.TransportStreamInfo
			if info, err = stream.Recv(); err != nil {
				break
			}
			pause = 100 * time.Millisecond
			st, cerr := r.claim(s.ctx, s, info, nil)
			if cerr != nil {
				r.log.Warn("transport plugin: could not claim an accepted stream", "error", cerr)
				continue
			}
			select {
			case r.accepted <- st:
			case <-s.ctx.Done():
				_ = st.Abort()
				return
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		r.log.Debug("transport plugin: Accept call ended; re-opening it", "error", err, "in", pause)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, acceptRetryMax)
	}
}

// claim connects to the session's data socket, presents the stream's
// token and returns the stream.
func (r *remoteTransport) claim(ctx context.Context, s *transportSession, info *pluginpb.TransportStreamInfo, l *remoteLink) (core.Stream, error) {
	if len(info.GetToken()) != frame.TokenLen {
		return nil, fmt.Errorf("transport plugin: announced a %d byte token", len(info.GetToken()))
	}
	d := net.Dialer{Timeout: claimDialTimeout}
	c, err := d.DialContext(ctx, "unix", s.socket)
	if err != nil {
		return nil, fmt.Errorf("transport plugin: data socket: %w", err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(claimDialTimeout))
	if _, err := c.Write(info.GetToken()); err != nil {
		c.Close()
		return nil, fmt.Errorf("transport plugin: data socket: %w", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	forget := func(hs *hostStream) {
		r.mu.Lock()
		delete(r.streams, hs)
		if l != nil {
			delete(l.streams, hs)
		}
		r.mu.Unlock()
	}
	hs := newHostStream(c, core.NodeID(info.GetPeerNode()), addrFromProto(info.GetLocalAddr()), addrFromProto(info.GetRemoteAddr()), forget)
	r.mu.Lock()
	closed := r.closed.Load() || (l != nil && l.closed)
	if !closed {
		r.streams[hs] = struct{}{}
		if l != nil {
			l.streams[hs] = struct{}{}
		}
	}
	r.mu.Unlock()
	if closed {
		_ = hs.Abort()
		return nil, closedRefused()
	}
	if info.GetTls() != nil {
		return tlsHostStream{hostStream: hs, state: tlsStateFromProto(info.GetTls())}, nil
	}
	return hs, nil
}

// Accept implements core.Transport. Streams accepted by every process of
// the plugin arrive here; a restart only pauses them.
func (r *remoteTransport) Accept(ctx context.Context) (core.Stream, error) {
	select {
	case st := <-r.accepted:
		if r.closed.Load() {
			_ = st.Abort()
			return nil, core.Errorf(core.ErrClosed, "transport: closed")
		}
		return st, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.life.Done():
		return nil, core.Errorf(core.ErrClosed, "transport: closed")
	}
}

// Dial implements core.Transport: the plugin dials now (so that its
// errors show here), and the link re-dials by itself in a restarted
// plugin.
func (r *remoteTransport) Dial(ctx context.Context, peer core.Peer) (core.Link, error) {
	s, err := r.session()
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Dial(ctx, &pluginpb.TransportDialRequest{PeerId: string(peer.ID), PeerAddr: peer.Addr})
	if err != nil {
		return nil, contract.RefusedError(ctx, "dial", err)
	}
	l := &remoteLink{r: r, peer: peer, gen: s.gen, id: resp.GetLinkId(), streams: make(map[*hostStream]struct{})}
	r.mu.Lock()
	if r.closed.Load() {
		r.mu.Unlock()
		return nil, closedRefused()
	}
	r.links[l] = struct{}{}
	r.mu.Unlock()
	return l, nil
}

// Addr implements core.Transport: the listener the first process bound.
func (r *remoteTransport) Addr() net.Addr { return r.addr }

// Close implements core.Transport: every stream (queued ones too) aborts,
// the plugin closes its transport, and the process stops.
func (r *remoteTransport) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	s := r.cur.Load()
	r.stop()
	r.abortAll()
	if s != nil {
		if c, err := r.conn.client(); err == nil && any(c) == any(s.client) {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_, err := c.Close(ctx, &pluginpb.TransportCloseRequest{})
			cancel()
			if err != nil {
				r.log.Debug("transport plugin: Close", "error", err)
			}
		}
	}
	r.conn.shutdown()
	r.wg.Wait()
	r.abortAll() // what an Accept loop queued meanwhile
	return nil
}

func (r *remoteTransport) abortAll() {
	r.mu.Lock()
	streams := make([]*hostStream, 0, len(r.streams))
	for hs := range r.streams {
		streams = append(streams, hs)
	}
	for l := range r.links {
		l.closed = true
	}
	r.links = map[*remoteLink]struct{}{}
	r.mu.Unlock()
	for _, hs := range streams {
		_ = hs.Abort()
	}
	for {
		select {
		case st := <-r.accepted:
			_ = st.Abort()
		default:
			return
		}
	}
}

// TransportStats implements TransportStatser.
func (r *remoteTransport) TransportStats(ctx context.Context) (TransportStats, error) {
	s, err := r.session()
	if err != nil {
		return TransportStats{}, err
	}
	resp, err := s.client.Stats(ctx, &pluginpb.TransportStatsRequest{})
	if err != nil {
		return TransportStats{}, contract.TransportFromStatus(ctx, err)
	}
	return TransportStats{
		StreamsOpenIn: resp.GetStreamsOpenIn(), StreamsOpenOut: resp.GetStreamsOpenOut(),
		OpensOK: resp.GetOpensOk(), OpensRefused: resp.GetOpensRefused(),
		Aborts: resp.GetAborts(), BytesIn: resp.GetBytesIn(), BytesOut: resp.GetBytesOut(),
	}, nil
}

// remoteLink is a link of an external transport: a peer, and the link id
// in the session that dialled it (re-dialled after a restart).
type remoteLink struct {
	r    *remoteTransport
	peer core.Peer

	dial sync.Mutex // one re-dial at a time
	// guarded by r.mu
	gen     uint64
	id      string
	closed  bool
	streams map[*hostStream]struct{}
}

var _ core.Link = (*remoteLink)(nil)

func (l *remoteLink) Peer() core.Peer { return l.peer }

// OpenStream implements core.Link.
func (l *remoteLink) OpenStream(ctx context.Context) (core.Stream, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, core.DefaultConnectTimeout)
		defer cancel()
	}
	s, err := l.r.session()
	if err != nil {
		return nil, err
	}
	id, err := l.linkIn(ctx, s)
	if err != nil {
		return nil, err
	}
	info, err := s.client.OpenStream(ctx, &pluginpb.TransportOpenStreamRequest{LinkId: id})
	if err != nil {
		return nil, contract.RefusedError(ctx, "open stream", err)
	}
	hs, err := l.r.claim(ctx, s, info, l)
	if err != nil {
		if errors.Is(err, core.ErrPeerRefused) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", core.ErrPeerRefused, err)
	}
	return hs, nil
}

// linkIn is the link's id in session s, dialling the peer there if the
// link was dialled in an earlier one.
func (l *remoteLink) linkIn(ctx context.Context, s *transportSession) (string, error) {
	l.dial.Lock()
	defer l.dial.Unlock()
	l.r.mu.Lock()
	gen, id, closed := l.gen, l.id, l.closed
	l.r.mu.Unlock()
	if closed {
		return "", fmt.Errorf("transport link: %w (%w)", net.ErrClosed, core.ErrPeerRefused)
	}
	if gen == s.gen {
		return id, nil
	}
	resp, err := s.client.Dial(ctx, &pluginpb.TransportDialRequest{PeerId: string(l.peer.ID), PeerAddr: l.peer.Addr})
	if err != nil {
		return "", contract.RefusedError(ctx, "dial", err)
	}
	l.r.mu.Lock()
	l.gen, l.id = s.gen, resp.GetLinkId()
	l.r.mu.Unlock()
	return resp.GetLinkId(), nil
}

// Close implements core.Link: its streams abort, the plugin closes its
// link.
func (l *remoteLink) Close() error {
	l.r.mu.Lock()
	if l.closed {
		l.r.mu.Unlock()
		return nil
	}
	l.closed = true
	delete(l.r.links, l)
	streams := make([]*hostStream, 0, len(l.streams))
	for hs := range l.streams {
		streams = append(streams, hs)
	}
	gen, id := l.gen, l.id
	l.r.mu.Unlock()
	for _, hs := range streams {
		_ = hs.Abort()
	}
	if s, err := l.r.session(); err == nil && s.gen == gen {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if _, err := s.client.CloseLink(ctx, &pluginpb.TransportCloseLinkRequest{LinkId: id}); err != nil {
			l.r.log.Debug("transport plugin: CloseLink", "error", err)
		}
	}
	return nil
}

// addrFromProto is the net.Addr a plugin described (nil: absent).
func addrFromProto(a *pluginpb.NetAddr) net.Addr {
	if a == nil {
		return nil
	}
	return netAddr{network: a.GetNetwork(), address: a.GetAddress()}
}
