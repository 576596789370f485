package plugins

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// resignTimeout bounds the resign the server does on a term its host can
// no longer use.
const resignTimeout = 5 * time.Second

// CoordinationServer serves the Coordination and Plugin gRPC services over
// a backend opened, on the first Configure, by a CoordinationFactory.
// ServeCoordination runs one inside a plugin process; plugintest runs one
// in a test process.
type CoordinationServer struct {
	pluginpb.UnimplementedCoordinationServer
	factory CoordinationFactory
	info    Info
	log     *slog.Logger

	// configure serialises Configure calls; mu guards the rest and is
	// never held across a backend call.
	configure   sync.Mutex
	mu          sync.Mutex
	backend     core.Coordinator
	closed      bool
	leases      map[string]core.Lease
	leaderships map[string]core.Leadership
}

// NewCoordinationServer returns a server that opens its backend with
// factory on the first Configure. info answers PluginInfo; log is given to
// the backend as CoordinationEnv.Logger.
func NewCoordinationServer(factory CoordinationFactory, info Info, log *slog.Logger) *CoordinationServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CoordinationServer{
		factory: factory, info: info, log: log,
		leases:      make(map[string]core.Lease),
		leaderships: make(map[string]core.Leadership),
	}
}

// Register adds the Coordination and Plugin services to s.
func (s *CoordinationServer) Register(g *grpc.Server) {
	pluginpb.RegisterCoordinationServer(g, s)
	pluginpb.RegisterPluginServer(g, &infoServer{info: s.info, kind: KindCoordination})
}

// CloseBackend closes the backend if it was opened (Coordinator.Close),
// for a process that stops without the host's Close.
func (s *CoordinationServer) CloseBackend() error {
	s.mu.Lock()
	b, already := s.backend, s.closed
	s.closed = true
	s.mu.Unlock()
	if b == nil || already {
		return nil
	}
	return b.Close()
}

// get returns the open backend, or the error a call answers before
// Configure and after Close.
func (s *CoordinationServer) get() (core.Coordinator, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, core.Errorf(core.ErrClosed, "coordination plugin: closed")
	case s.backend == nil:
		return nil, core.Errorf(core.ErrCoordinationUnavailable, "coordination plugin: not configured yet")
	}
	return s.backend, nil
}

// Configure implements pluginpb.CoordinationServer.
func (s *CoordinationServer) Configure(ctx context.Context, req *pluginpb.ConfigureRequest) (*pluginpb.ConfigureResponse, error) {
	s.configure.Lock()
	defer s.configure.Unlock()
	s.mu.Lock()
	done, closed := s.backend != nil, s.closed
	s.mu.Unlock()
	if closed {
		return nil, contract.ToStatus(core.Errorf(core.ErrClosed, "coordination plugin: closed"))
	}
	if done {
		return &pluginpb.ConfigureResponse{}, nil
	}
	if v := int(req.GetApiVersion()); !containsInt(s.info.servedVersions(KindCoordination), v) {
		return nil, contract.ToStatus(core.Errorf(core.ErrBadRequest, "coordination plugin: API version %d not served (serving %v)", v, s.info.servedVersions(KindCoordination)))
	}
	var env CoordinationEnv
	if err := json.Unmarshal(req.GetEnvJson(), &env); err != nil {
		return nil, contract.ToStatus(core.Errorf(core.ErrBadRequest, "coordination plugin: malformed environment: %v", err))
	}
	env.Logger = s.log
	b, err := s.factory(ctx, env)
	if err != nil {
		return nil, contract.ToStatus(fmt.Errorf("open backend: %w", err))
	}
	s.mu.Lock()
	s.backend = b
	s.mu.Unlock()
	s.log.Info("coordination backend open", "node_id", env.NodeID)
	return &pluginpb.ConfigureResponse{}, nil
}

// Close implements pluginpb.CoordinationServer.
func (s *CoordinationServer) Close(ctx context.Context, _ *pluginpb.CloseRequest) (*pluginpb.CloseResponse, error) {
	return &pluginpb.CloseResponse{}, contract.ToStatus(s.CloseBackend())
}

// Get implements pluginpb.CoordinationServer.
func (s *CoordinationServer) Get(ctx context.Context, req *pluginpb.GetRequest) (*pluginpb.GetResponse, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	kv, err := b.Get(ctx, req.GetKey())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	return &pluginpb.GetResponse{Kv: kvToProto(kv)}, nil
}

// List implements pluginpb.CoordinationServer.
func (s *CoordinationServer) List(ctx context.Context, req *pluginpb.ListRequest) (*pluginpb.ListResponse, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	kvs, idx, err := b.List(ctx, req.GetPrefix())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	return listToProto(kvs, idx), nil
}

// Watch implements pluginpb.CoordinationServer: the backend's Watch under
// the call's context, which carries the host caller's deadline.
func (s *CoordinationServer) Watch(ctx context.Context, req *pluginpb.WatchRequest) (*pluginpb.ListResponse, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	kvs, idx, err := b.Watch(ctx, req.GetPrefix(), req.GetAfter())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	return listToProto(kvs, idx), nil
}

// CompareAndSet implements pluginpb.CoordinationServer.
func (s *CoordinationServer) CompareAndSet(ctx context.Context, req *pluginpb.CompareAndSetRequest) (*pluginpb.CompareAndSetResponse, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	v, err := b.CompareAndSet(ctx, req.GetKey(), req.GetValue(), req.GetVersion())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	return &pluginpb.CompareAndSetResponse{Version: v}, nil
}

// CompareAndDelete implements pluginpb.CoordinationServer.
func (s *CoordinationServer) CompareAndDelete(ctx context.Context, req *pluginpb.CompareAndDeleteRequest) (*pluginpb.CompareAndDeleteResponse, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	if err := b.CompareAndDelete(ctx, req.GetKey(), req.GetVersion()); err != nil {
		return nil, contract.ToStatus(err)
	}
	return &pluginpb.CompareAndDeleteResponse{}, nil
}

// MinTTL implements pluginpb.CoordinationServer.
func (s *CoordinationServer) MinTTL(ctx context.Context, _ *pluginpb.MinTTLRequest) (*pluginpb.MinTTLResponse, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	return &pluginpb.MinTTLResponse{TtlNanos: int64(b.MinTTL())}, nil
}

// GrantLease implements pluginpb.CoordinationServer.
func (s *CoordinationServer) GrantLease(ctx context.Context, req *pluginpb.GrantLeaseRequest) (*pluginpb.LeaseInfo, error) {
	b, err := s.get()
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	l, err := b.GrantLease(ctx, time.Duration(req.GetTtlNanos()))
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	s.keepLease(l)
	return &pluginpb.LeaseInfo{Id: l.ID(), TtlNanos: int64(l.TTL())}, nil
}

// keepLease remembers l until it ends, so later calls find it by id.
func (s *CoordinationServer) keepLease(l core.Lease) {
	s.mu.Lock()
	s.leases[l.ID()] = l
	s.mu.Unlock()
	go func() {
		<-l.Done()
		s.forgetLease(l)
	}()
}

func (s *CoordinationServer) forgetLease(l core.Lease) {
	s.mu.Lock()
	if s.leases[l.ID()] == l {
		delete(s.leases, l.ID())
	}
	s.mu.Unlock()
}

// lease finds the lease id: granted or attached by this process, else
// attached now through the backend's core.LeaseAttacher (the renew that comes
// with attaching is harmless for every caller). attached says whether the
// attach already renewed it.
func (s *CoordinationServer) lease(ctx context.Context, id string) (l core.Lease, attached bool, err error) {
	b, err := s.get()
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	l = s.leases[id]
	s.mu.Unlock()
	if l != nil {
		return l, false, nil
	}
	a, ok := b.(core.LeaseAttacher)
	if !ok {
		return nil, false, core.Errorf(core.ErrLeaseLost,
			"coordination plugin: lease %s is unknown to this plugin process and the backend cannot re-attach leases", id)
	}
	l, err = a.AttachLease(ctx, id)
	if err != nil {
		return nil, false, err
	}
	s.keepLease(l)
	return l, true, nil
}

// leaseErr answers a lease call's failure, forgetting a lease that ended.
func (s *CoordinationServer) leaseErr(l core.Lease, err error) error {
	if errors.Is(err, core.ErrLeaseLost) {
		s.forgetLease(l)
	}
	return contract.ToStatus(err)
}

// AttachLease implements pluginpb.CoordinationServer. A lease this process
// already holds is renewed, so the answer always means "valid for a TTL
// from the call".
func (s *CoordinationServer) AttachLease(ctx context.Context, req *pluginpb.LeaseRequest) (*pluginpb.LeaseInfo, error) {
	l, attached, err := s.lease(ctx, req.GetId())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	if !attached {
		if err := l.Renew(ctx); err != nil {
			return nil, s.leaseErr(l, err)
		}
	}
	return &pluginpb.LeaseInfo{Id: l.ID(), TtlNanos: int64(l.TTL())}, nil
}

// LeasePut implements pluginpb.CoordinationServer.
func (s *CoordinationServer) LeasePut(ctx context.Context, req *pluginpb.LeasePutRequest) (*pluginpb.CompareAndSetResponse, error) {
	l, _, err := s.lease(ctx, req.GetId())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	v, err := l.Put(ctx, req.GetKey(), req.GetValue(), req.GetVersion())
	if err != nil {
		return nil, s.leaseErr(l, err)
	}
	return &pluginpb.CompareAndSetResponse{Version: v}, nil
}

// RenewLease implements pluginpb.CoordinationServer.
func (s *CoordinationServer) RenewLease(ctx context.Context, req *pluginpb.LeaseRequest) (*pluginpb.RenewLeaseResponse, error) {
	l, attached, err := s.lease(ctx, req.GetId())
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	if !attached {
		if err := l.Renew(ctx); err != nil {
			return nil, s.leaseErr(l, err)
		}
	}
	return &pluginpb.RenewLeaseResponse{}, nil
}

// RevokeLease implements pluginpb.CoordinationServer. Revoking a lease
// that already ended succeeds: the goal state holds.
func (s *CoordinationServer) RevokeLease(ctx context.Context, req *pluginpb.LeaseRequest) (*pluginpb.RevokeLeaseResponse, error) {
	l, _, err := s.lease(ctx, req.GetId())
	if errors.Is(err, core.ErrLeaseLost) {
		return &pluginpb.RevokeLeaseResponse{}, nil
	}
	if err != nil {
		return nil, contract.ToStatus(err)
	}
	if err := l.Revoke(ctx); err != nil {
		return nil, s.leaseErr(l, err)
	}
	s.forgetLease(l)
	return &pluginpb.RevokeLeaseResponse{}, nil
}

// Campaign implements pluginpb.CoordinationServer: it announces the term
// and then holds the stream open until the term ends. When the host goes
// away first (stream cancelled) nobody can act on the term any more, so it
// is resigned rather than left to expire.
func (s *CoordinationServer) Campaign(req *pluginpb.CampaignRequest, stream pluginpb.Coordination_CampaignServer) error {
	b, err := s.get()
	if err != nil {
		return contract.ToStatus(err)
	}
	ctx := stream.Context()
	l, err := b.Campaign(ctx, req.GetElection())
	if err != nil {
		return contract.ToStatus(err)
	}
	id := randomID()
	s.mu.Lock()
	s.leaderships[id] = l
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.leaderships, id)
		s.mu.Unlock()
	}()
	if err := stream.Send(&pluginpb.CampaignEvent{Term: l.Term(), LeadershipId: id}); err != nil {
		s.resign(l)
		return err
	}
	select {
	case <-l.Lost():
		return nil
	case <-ctx.Done():
		s.resign(l)
		return contract.ToStatus(ctx.Err())
	}
}

func (s *CoordinationServer) resign(l core.Leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	if err := l.Resign(ctx); err != nil && !errors.Is(err, core.ErrClosed) {
		s.log.Warn("resign of an abandoned term failed; it ends when its lease expires", "term", l.Term(), "error", err)
	}
}

// Resign implements pluginpb.CoordinationServer. An unknown id is a term
// that already ended: nothing to do.
func (s *CoordinationServer) Resign(ctx context.Context, req *pluginpb.ResignRequest) (*pluginpb.ResignResponse, error) {
	if _, err := s.get(); err != nil {
		return nil, contract.ToStatus(err)
	}
	s.mu.Lock()
	l := s.leaderships[req.GetLeadershipId()]
	s.mu.Unlock()
	if l == nil {
		return &pluginpb.ResignResponse{}, nil
	}
	if err := l.Resign(ctx); err != nil {
		return nil, contract.ToStatus(err)
	}
	return &pluginpb.ResignResponse{}, nil
}

// infoServer answers PluginInfo.
type infoServer struct {
	pluginpb.UnimplementedPluginServer
	info Info
	kind string
}

func (i *infoServer) PluginInfo(context.Context, *pluginpb.PluginInfoRequest) (*pluginpb.PluginInfoResponse, error) {
	return i.info.toProto(i.kind), nil
}

func kvToProto(kv core.KV) *pluginpb.KV {
	return &pluginpb.KV{Key: kv.Key, Value: kv.Value, Version: kv.Version, Lease: kv.Lease}
}

func listToProto(kvs []core.KV, idx uint64) *pluginpb.ListResponse {
	out := &pluginpb.ListResponse{Index: idx, Kvs: make([]*pluginpb.KV, len(kvs))}
	for i, kv := range kvs {
		out.Kvs[i] = kvToProto(kv)
	}
	return out
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
