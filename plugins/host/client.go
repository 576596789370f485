package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// connector yields the connection calls go to. The supervised one (an
// external plugin process) changes it across restarts and fails while the
// process is down; the static one (ConnectCoordination) never changes.
type connector interface {
	// client returns the live client, or an error wrapping
	// core.ErrCoordinationUnavailable while there is none.
	client() (pluginpb.CoordinationClient, error)
	// shutdown stops what the connector runs (the plugin process); the
	// adapter has already sent Close.
	shutdown()
}

type staticConnector struct{ c pluginpb.CoordinationClient }

func (s staticConnector) client() (pluginpb.CoordinationClient, error) { return s.c, nil }
func (s staticConnector) shutdown()                                    {}

// closeTimeout bounds the Close the adapter sends before it stops a
// plugin.
const closeTimeout = 5 * time.Second

// remoteCoordinator is core.Coordinator over the coordination protocol.
// It owns what must survive a plugin restart: the leases the broker holds
// (same ids, host-computed ValidUntil) and the cached MinTTL.
type remoteCoordinator struct {
	conn   connector
	minTTL atomic.Int64
	closed atomic.Bool

	// life parents the Campaign streams: a term outlives the Campaign
	// call that won it, and ends at the latest when the adapter closes.
	life   context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	leases      map[string]*remoteLease
	leaderships map[*remoteLeadership]struct{}
}

var (
	_ core.Coordinator   = (*remoteCoordinator)(nil)
	_ core.LeaseAttacher = (*remoteCoordinator)(nil)
)

func newRemoteCoordinator(conn connector) *remoteCoordinator {
	r := &remoteCoordinator{
		conn:        conn,
		leases:      make(map[string]*remoteLease),
		leaderships: make(map[*remoteLeadership]struct{}),
	}
	r.life, r.cancel = context.WithCancel(context.Background())
	return r
}

// ConnectCoordination speaks the coordination protocol over an existing
// gRPC connection (to a CoordinationServer): it sends Configure with env
// and returns the Coordinator. The caller keeps ownership of conn; Close
// sends Close to the server but leaves conn open. Plugin authors rarely
// need it: plugintest uses it to run a backend through the protocol
// without a process, and a plugin can use it to proxy to another server.
// The result also implements core.LeaseAttacher.
func ConnectCoordination(ctx context.Context, conn grpc.ClientConnInterface, env plugins.CoordinationEnv) (core.Coordinator, error) {
	c := pluginpb.NewCoordinationClient(conn)
	r := newRemoteCoordinator(staticConnector{c})
	if err := r.setup(ctx, c, core.CoordinationAPIVersion, env); err != nil {
		r.cancel()
		return nil, err
	}
	return r, nil
}

// setup runs after every (re)connection, before calls reach c: Configure,
// MinTTL, and re-attaching every lease still held. A lease the new
// process cannot attach is lost (its Done closes); a failure to reach the
// backend leaves the lease alone, and the next Renew attaches it lazily.
func (r *remoteCoordinator) setup(ctx context.Context, c pluginpb.CoordinationClient, apiVersion int, env plugins.CoordinationEnv) error {
	data, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("coordination plugin: encode environment: %w", err)
	}
	if _, err := c.Configure(ctx, &pluginpb.ConfigureRequest{EnvJson: data, ApiVersion: int32(apiVersion)}); err != nil {
		return fmt.Errorf("coordination plugin: configure: %w", contract.FromStatus(ctx, err))
	}
	resp, err := c.MinTTL(ctx, &pluginpb.MinTTLRequest{})
	if err != nil {
		return fmt.Errorf("coordination plugin: MinTTL: %w", contract.FromStatus(ctx, err))
	}
	r.minTTL.Store(resp.GetTtlNanos())
	r.mu.Lock()
	held := make([]*remoteLease, 0, len(r.leases))
	for _, l := range r.leases {
		held = append(held, l)
	}
	r.mu.Unlock()
	for _, l := range held {
		sent := time.Now()
		_, err := c.AttachLease(ctx, &pluginpb.LeaseRequest{Id: l.id})
		switch err = contract.FromStatus(ctx, err); {
		case err == nil:
			l.extend(sent)
		case errors.Is(err, core.ErrLeaseLost):
			l.end()
		}
	}
	return nil
}

// failed maps a call's error. A call cut short because Close stopped the
// plugin under it reports ErrClosed, as the contract wants of calls that
// Close unblocks, rather than a transient unavailability.
func (r *remoteCoordinator) failed(ctx context.Context, err error) error {
	err = contract.FromStatus(ctx, err)
	if err != nil && r.closed.Load() && !errors.Is(err, core.ErrClosed) && ctx.Err() == nil {
		return fmt.Errorf("%w (%v)", core.ErrClosed, err)
	}
	return err
}

// client is the connection for one call, or ErrClosed.
func (r *remoteCoordinator) client() (pluginpb.CoordinationClient, error) {
	if r.closed.Load() {
		return nil, core.ErrClosed
	}
	return r.conn.client()
}

func (r *remoteCoordinator) Get(ctx context.Context, key string) (core.KV, error) {
	c, err := r.client()
	if err != nil {
		return core.KV{}, err
	}
	resp, err := c.Get(ctx, &pluginpb.GetRequest{Key: key})
	if err != nil {
		return core.KV{}, r.failed(ctx, err)
	}
	kv := kvFromProto(resp.GetKv())
	kv.Key = key
	return kv, nil
}

func (r *remoteCoordinator) List(ctx context.Context, prefix string) ([]core.KV, uint64, error) {
	c, err := r.client()
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.List(ctx, &pluginpb.ListRequest{Prefix: prefix})
	if err != nil {
		return nil, 0, r.failed(ctx, err)
	}
	return listFromProto(resp)
}

func (r *remoteCoordinator) Watch(ctx context.Context, prefix string, after uint64) ([]core.KV, uint64, error) {
	c, err := r.client()
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.Watch(ctx, &pluginpb.WatchRequest{Prefix: prefix, After: after})
	if err != nil {
		return nil, 0, r.failed(ctx, err)
	}
	return listFromProto(resp)
}

func listFromProto(resp *pluginpb.ListResponse) ([]core.KV, uint64, error) {
	kvs := make([]core.KV, len(resp.GetKvs()))
	for i, kv := range resp.GetKvs() {
		kvs[i] = kvFromProto(kv)
	}
	return kvs, resp.GetIndex(), nil
}

func (r *remoteCoordinator) CompareAndSet(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	c, err := r.client()
	if err != nil {
		return 0, err
	}
	resp, err := c.CompareAndSet(ctx, &pluginpb.CompareAndSetRequest{Key: key, Value: value, Version: version})
	if err != nil {
		return 0, r.failed(ctx, err)
	}
	return resp.GetVersion(), nil
}

func (r *remoteCoordinator) CompareAndDelete(ctx context.Context, key string, version uint64) error {
	c, err := r.client()
	if err != nil {
		return err
	}
	_, err = c.CompareAndDelete(ctx, &pluginpb.CompareAndDeleteRequest{Key: key, Version: version})
	return r.failed(ctx, err)
}

// MinTTL is the backend's, read once per plugin launch (it is a property
// of the backend, not of the moment).
func (r *remoteCoordinator) MinTTL() time.Duration { return time.Duration(r.minTTL.Load()) }

func (r *remoteCoordinator) GrantLease(ctx context.Context, ttl time.Duration) (core.Lease, error) {
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := c.GrantLease(ctx, &pluginpb.GrantLeaseRequest{TtlNanos: int64(ttl)})
	if err != nil {
		return nil, r.failed(ctx, err)
	}
	return r.track(resp, sent), nil
}

// AttachLease implements core.LeaseAttacher by asking the server to attach id.
func (r *remoteCoordinator) AttachLease(ctx context.Context, id string) (core.Lease, error) {
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	l := r.leases[id]
	r.mu.Unlock()
	if l != nil {
		// Already held through this adapter: one handle per lease, so
		// that Done and ValidUntil have a single truth.
		if err := l.Renew(ctx); err != nil {
			return nil, err
		}
		return l, nil
	}
	sent := time.Now()
	resp, err := c.AttachLease(ctx, &pluginpb.LeaseRequest{Id: id})
	if err != nil {
		return nil, r.failed(ctx, err)
	}
	return r.track(resp, sent), nil
}

// track makes the host-side handle of a lease granted (or attached) at
// sent, valid until sent + TTL.
func (r *remoteCoordinator) track(resp *pluginpb.LeaseInfo, sent time.Time) *remoteLease {
	l := &remoteLease{r: r, id: resp.GetId(), ttl: time.Duration(resp.GetTtlNanos()), done: make(chan struct{})}
	r.mu.Lock()
	r.leases[l.id] = l
	r.mu.Unlock()
	l.extend(sent)
	return l
}

func (r *remoteCoordinator) forget(l *remoteLease) {
	r.mu.Lock()
	if r.leases[l.id] == l {
		delete(r.leases, l.id)
	}
	r.mu.Unlock()
}

// Campaign opens the Campaign stream and waits for its first message. The
// stream lives in the adapter's context, not ctx, because the term
// outlives this call; ctx only bounds the wait.
func (r *remoteCoordinator) Campaign(ctx context.Context, election string) (core.Leadership, error) {
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(r.life)
	stream, err := c.Campaign(sctx, &pluginpb.CampaignRequest{Election: election})
	if err != nil {
		cancel()
		return nil, r.failed(ctx, err)
	}
	type first struct {
		ev  *pluginpb.CampaignEvent
		err error
	}
	ch := make(chan first, 1)
	go func() {
		ev, err := stream.Recv()
		ch <- first{ev, err}
	}()
	var f first
	select {
	case f = <-ch:
	case <-ctx.Done():
		cancel() // Recv returns at once with Canceled
		<-ch
		return nil, ctx.Err()
	}
	if f.err != nil {
		cancel()
		if f.err == io.EOF {
			return nil, core.Errorf(core.ErrCoordinationUnavailable, "coordination plugin: campaign ended before an election")
		}
		return nil, r.failed(ctx, f.err)
	}
	l := &remoteLeadership{r: r, term: f.ev.GetTerm(), id: f.ev.GetLeadershipId(), lost: make(chan struct{}), cancel: cancel}
	r.mu.Lock()
	if r.closed.Load() {
		r.mu.Unlock()
		l.markLost()
		return nil, core.ErrClosed
	}
	r.leaderships[l] = struct{}{}
	r.mu.Unlock()
	go func() {
		// Any message after the first is unexpected and ignored; the
		// stream's end, for whatever reason, ends the term.
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
		l.markLost()
	}()
	return l, nil
}

// Close sends Close (bounded), then stops the connector. Leases are not
// revoked: their handles report ErrClosed from now on, and their Done
// still closes at ValidUntil, since nothing can renew them any more.
func (r *remoteCoordinator) Close() error {
	if r.closed.Swap(true) {
		return core.ErrClosed
	}
	var err error
	if c, cerr := r.conn.client(); cerr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_, err = c.Close(ctx, &pluginpb.CloseRequest{})
		err = contract.FromStatus(ctx, err)
		cancel()
		if errors.Is(err, core.ErrClosed) || errors.Is(err, core.ErrCoordinationUnavailable) {
			err = nil // nothing left to close
		}
	}
	r.cancel()
	r.mu.Lock()
	ls := r.leaderships
	r.leaderships = map[*remoteLeadership]struct{}{}
	r.mu.Unlock()
	for l := range ls {
		l.markLost()
	}
	r.conn.shutdown()
	return err
}

// kvFromProto is the core.KV a plugin answered.
func kvFromProto(p *pluginpb.KV) core.KV {
	return core.KV{Key: p.GetKey(), Value: p.GetValue(), Version: p.GetVersion(), Lease: p.GetLease()}
}
