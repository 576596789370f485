package plugins

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/internal/frame"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// claimTimeout bounds how long a stream waits for the host to claim its
// token on the data socket (and how long a fresh data connection may take
// to send one). A host that announced a stream claims it at once; one that
// does not has lost it (it died, or the call was cancelled), and the
// stream is aborted rather than kept open for ever.
const claimTimeout = 10 * time.Second

// TransportServer serves the Transport and Plugin gRPC services over a
// transport opened, on the first Configure, by a TransportFactory, and the
// data socket that carries the streams' bytes. ServeTransport runs one in a
// plugin process; plugintest runs one in a test process.
type TransportServer struct {
	pluginpb.UnimplementedTransportServer
	factory TransportFactory
	info    Info
	log     *slog.Logger
	// claimTimeout is claimTimeout, shortened by tests.
	claimTimeout time.Duration

	configure sync.Mutex // serialises Configure
	mu        sync.Mutex // guards the rest; never held across a transport call
	tr        core.Transport
	resp      *pluginpb.TransportConfigureResponse
	closed    bool
	dir       string
	ln        net.Listener
	links     map[string]core.Link
	pending   map[[frame.TokenLen]byte]*pendingStream
	live      map[*pump]struct{}
	conns     map[net.Conn]struct{} // data connections, claimed or not
	wg        sync.WaitGroup        // data socket goroutines

	stats transportCounters
}

// transportCounters are the Stats RPC's numbers.
type transportCounters struct {
	openIn, openOut           atomic.Int64
	opensOK, opensRefused     atomic.Uint64
	aborts, bytesIn, bytesOut atomic.Uint64
}

// pendingStream is a stream announced to the host and not claimed yet.
type pendingStream struct {
	s      core.Stream
	in     bool // accepted (true) or opened (false)
	expiry *time.Timer
}

// NewTransportServer returns a server that opens its transport with
// factory on the first Configure. info answers PluginInfo; log is given to
// the transport as TransportEnv.Logger.
func NewTransportServer(factory TransportFactory, info Info, log *slog.Logger) *TransportServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TransportServer{
		factory: factory, info: info, log: log, claimTimeout: claimTimeout,
		links:   make(map[string]core.Link),
		pending: make(map[[frame.TokenLen]byte]*pendingStream),
		live:    make(map[*pump]struct{}),
		conns:   make(map[net.Conn]struct{}),
	}
}

// Register adds the Transport and Plugin services to g.
func (s *TransportServer) Register(g *grpc.Server) {
	pluginpb.RegisterTransportServer(g, s)
	pluginpb.RegisterPluginServer(g, &infoServer{info: s.info, kind: KindTransport})
}

// CloseBackend closes the transport if it was opened, every link and
// stream with it, and removes the data socket; for a process that stops
// without the host's Close too.
func (s *TransportServer) CloseBackend() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	tr, ln, dir := s.tr, s.ln, s.dir
	links := s.links
	s.links = map[string]core.Link{}
	pending := s.pending
	s.pending = map[[frame.TokenLen]byte]*pendingStream{}
	live := make([]*pump, 0, len(s.live))
	for p := range s.live {
		live = append(live, p)
	}
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, p := range pending {
		p.expiry.Stop()
		s.ended(p.in, true)
		_ = p.s.Abort()
	}
	for _, p := range live {
		p.abort("transport closed")
	}
	for _, c := range conns {
		c.Close() // ends claims still waiting for a token
	}
	for _, l := range links {
		_ = l.Close()
	}
	var err error
	if tr != nil {
		err = tr.Close()
	}
	s.wg.Wait()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return err
}

func (s *TransportServer) get() (core.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, core.Errorf(core.ErrClosed, "transport plugin: closed")
	case s.tr == nil:
		return nil, core.Errorf(core.ErrPeerRefused, "transport plugin: not configured yet")
	}
	return s.tr, nil
}

// Configure implements pluginpb.TransportServer: it opens the transport
// and the data socket (a unix socket in a fresh 0700 directory, so only
// this user can claim streams even before the token is checked).
func (s *TransportServer) Configure(ctx context.Context, req *pluginpb.TransportConfigureRequest) (*pluginpb.TransportConfigureResponse, error) {
	s.configure.Lock()
	defer s.configure.Unlock()
	s.mu.Lock()
	resp, closed := s.resp, s.closed
	s.mu.Unlock()
	if closed {
		return nil, contract.ToStatus(core.Errorf(core.ErrClosed, "transport plugin: closed"))
	}
	if resp != nil {
		return resp, nil
	}
	if v := int(req.GetApiVersion()); !containsInt(s.info.servedVersions(KindTransport), v) {
		return nil, contract.ToStatus(core.Errorf(core.ErrBadRequest, "transport plugin: API version %d not served (serving %v)", v, s.info.servedVersions(KindTransport)))
	}
	var env TransportEnv
	if err := json.Unmarshal(req.GetEnvJson(), &env); err != nil {
		return nil, contract.ToStatus(core.Errorf(core.ErrBadRequest, "transport plugin: malformed environment: %v", err))
	}
	env.Logger = s.log
	dir, err := os.MkdirTemp("", "fibril-tr-")
	if err != nil {
		return nil, status.Errorf(codes.Internal, "transport plugin: data socket directory: %v", err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, status.Errorf(codes.Internal, "transport plugin: data socket: %v", err)
	}
	tr, err := s.factory(ctx, env)
	if err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, contract.ToStatus(fmt.Errorf("open transport: %w", err))
	}
	resp = &pluginpb.TransportConfigureResponse{DataSocket: ln.Addr().String(), ListenAddr: addrToProto(tr.Addr())}
	s.mu.Lock()
	if s.closed { // closed while the factory ran
		s.mu.Unlock()
		ln.Close()
		os.RemoveAll(dir)
		_ = tr.Close()
		return nil, contract.ToStatus(core.Errorf(core.ErrClosed, "transport plugin: closed"))
	}
	s.tr, s.ln, s.dir, s.resp = tr, ln, dir, resp
	s.wg.Add(1)
	s.mu.Unlock()
	go s.serveData(ln)
	s.log.Info("transport open", "node_id", env.NodeID, "addr", resp.GetListenAddr().GetAddress())
	return resp, nil
}

// Close implements pluginpb.TransportServer.
func (s *TransportServer) Close(context.Context, *pluginpb.TransportCloseRequest) (*pluginpb.TransportCloseResponse, error) {
	return &pluginpb.TransportCloseResponse{}, contract.ToStatus(s.CloseBackend())
}

// Dial implements pluginpb.TransportServer.
func (s *TransportServer) Dial(ctx context.Context, req *pluginpb.TransportDialRequest) (*pluginpb.TransportDialResponse, error) {
	tr, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	l, err := tr.Dial(ctx, core.Peer{ID: core.NodeID(req.GetPeerId()), Addr: req.GetPeerAddr()})
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	id := randomID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return nil, contract.ToStatus(core.Errorf(core.ErrClosed, "transport plugin: closed"))
	}
	s.links[id] = l
	s.mu.Unlock()
	return &pluginpb.TransportDialResponse{LinkId: id}, nil
}

// OpenStream implements pluginpb.TransportServer.
func (s *TransportServer) OpenStream(ctx context.Context, req *pluginpb.TransportOpenStreamRequest) (*pluginpb.TransportStreamInfo, error) {
	if _, err := s.get(); err != nil {
		return nil, contract.ToStatus(err)
	}
	s.mu.Lock()
	l := s.links[req.GetLinkId()]
	s.mu.Unlock()
	if l == nil {
		return nil, contract.ToStatus(core.Errorf(core.ErrPeerRefused, "transport plugin: unknown link %q", req.GetLinkId()))
	}
	st, err := l.OpenStream(ctx)
	if err != nil {
		s.stats.opensRefused.Add(1)
		return nil, contract.ToStatus(err)
	}
	s.stats.opensOK.Add(1)
	info, err := s.announce(st, false)
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	return info, nil
}

// CloseLink implements pluginpb.TransportServer.
func (s *TransportServer) CloseLink(_ context.Context, req *pluginpb.TransportCloseLinkRequest) (*pluginpb.TransportCloseLinkResponse, error) {
	s.mu.Lock()
	l := s.links[req.GetLinkId()]
	delete(s.links, req.GetLinkId())
	s.mu.Unlock()
	if l != nil {
		if err := l.Close(); err != nil {
			return nil, contract.ToStatus(err)
		}
	}
	return &pluginpb.TransportCloseLinkResponse{}, nil
}

// Accept implements pluginpb.TransportServer: it accepts streams from the
// transport and announces each until the host ends the call. A stream
// whose announcement cannot be sent is aborted.
func (s *TransportServer) Accept(_ *pluginpb.TransportAcceptRequest, stream pluginpb.Transport_AcceptServer) error {
	tr, err := s.get()
	if err != nil {
		return contract.ToStatus(err)
	}
	ctx := stream.Context()
	for {
		st, err := tr.Accept(ctx)
		if err != nil {
			return contract.ToStatus(err)
		}
		info, err := s.announce(st, true)
		if err != nil {
			return contract.ToStatus(err)
		}
		if err := stream.Send(info); err != nil {
			s.drop(info.GetToken())
			return err
		}
	}
}

// Health implements pluginpb.TransportServer.
func (s *TransportServer) Health(context.Context, *pluginpb.TransportHealthRequest) (*pluginpb.TransportHealthResponse, error) {
	if _, err := s.get(); err != nil {
		return &pluginpb.TransportHealthResponse{Detail: err.Error()}, nil
	}
	return &pluginpb.TransportHealthResponse{Ok: true}, nil
}

// Stats implements pluginpb.TransportServer.
func (s *TransportServer) Stats(context.Context, *pluginpb.TransportStatsRequest) (*pluginpb.TransportStatsResponse, error) {
	c := &s.stats
	return &pluginpb.TransportStatsResponse{
		StreamsOpenIn: c.openIn.Load(), StreamsOpenOut: c.openOut.Load(),
		OpensOk: c.opensOK.Load(), OpensRefused: c.opensRefused.Load(),
		Aborts: c.aborts.Load(), BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(),
	}, nil
}

// announce registers st under a fresh token and describes it; the stream
// is aborted unless the host claims the token within claimTimeout.
func (s *TransportServer) announce(st core.Stream, in bool) (*pluginpb.TransportStreamInfo, error) {
	var tok [frame.TokenLen]byte
	_, _ = rand.Read(tok[:]) // crypto/rand.Read never fails (Go 1.24+)
	p := &pendingStream{s: st, in: in}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = st.Abort()
		return nil, core.Errorf(core.ErrClosed, "transport plugin: closed")
	}
	s.pending[tok] = p
	if in {
		s.stats.openIn.Add(1)
	} else {
		s.stats.openOut.Add(1)
	}
	p.expiry = time.AfterFunc(s.claimTimeout, func() {
		if s.take(tok) != nil {
			s.log.Warn("stream not claimed by the host in time; aborting it", "timeout", s.claimTimeout)
			s.ended(in, true)
			_ = st.Abort()
		}
	})
	s.mu.Unlock()
	return &pluginpb.TransportStreamInfo{
		Token: tok[:], PeerNode: string(st.PeerNode()),
		LocalAddr: addrToProto(st.LocalAddr()), RemoteAddr: addrToProto(st.RemoteAddr()),
		Tls: tlsStateToProto(st),
	}, nil
}

// take removes and returns the pending stream of tok (nil if none).
func (s *TransportServer) take(tok [frame.TokenLen]byte) *pendingStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[tok]
	delete(s.pending, tok)
	return p
}

// drop aborts an announced stream the host will never claim.
func (s *TransportServer) drop(token []byte) {
	var tok [frame.TokenLen]byte
	copy(tok[:], token)
	if p := s.take(tok); p != nil {
		p.expiry.Stop()
		s.ended(p.in, true)
		_ = p.s.Abort()
	}
}

// ended counts a stream's end.
func (s *TransportServer) ended(in, aborted bool) {
	if in {
		s.stats.openIn.Add(-1)
	} else {
		s.stats.openOut.Add(-1)
	}
	if aborted {
		s.stats.aborts.Add(1)
	}
}

// serveData accepts the host's data connections until the listener
// closes.
func (s *TransportServer) serveData(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("data socket accept", "error", err)
			}
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.wg.Add(1)
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.claim(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// claim reads a data connection's token and runs its stream; a token that
// is late, short or unknown closes the connection.
func (s *TransportServer) claim(c net.Conn) {
	var tok [frame.TokenLen]byte
	_ = c.SetReadDeadline(time.Now().Add(s.claimTimeout))
	if _, err := io.ReadFull(c, tok[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	p := s.take(tok)
	if p == nil {
		s.log.Warn("data connection with an unknown or expired token; closing it")
		c.Close()
		return
	}
	// If the timer fired meanwhile it lost the race for the map entry and
	// did nothing: the stream is ours either way.
	p.expiry.Stop()
	pu := &pump{srv: s, c: c, s: p.s, in: p.in}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		s.ended(p.in, true)
		_ = p.s.Abort()
		return
	}
	s.live[pu] = struct{}{}
	s.mu.Unlock()
	pu.run()
	s.mu.Lock()
	delete(s.live, pu)
	s.mu.Unlock()
}

// addrToProto describes a net.Addr (nil: absent).
func addrToProto(a net.Addr) *pluginpb.NetAddr {
	if a == nil {
		return nil
	}
	return &pluginpb.NetAddr{Network: a.Network(), Address: a.String()}
}
