package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// remoteLease is the host's handle on a lease. Its ValidUntil is computed
// here, from the moment the host sent the renew (or grant), so it holds on
// the host's clock whatever happens across the process boundary.
type remoteLease struct {
	r   *remoteCoordinator
	id  string
	ttl time.Duration

	mu         sync.Mutex
	validUntil time.Time
	timer      *time.Timer
	ended      bool
	done       chan struct{}
}

func (l *remoteLease) ID() string            { return l.id }
func (l *remoteLease) TTL() time.Duration    { return l.ttl }
func (l *remoteLease) Done() <-chan struct{} { return l.done }

func (l *remoteLease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

func (l *remoteLease) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

func (l *remoteLease) lostErr() error {
	return core.Errorf(core.ErrLeaseLost, "coordination: lease %s lost", l.id)
}

// client is the connection for a call on the lease. An ended lease stays
// ended whatever the plugin's state, so that is checked before asking for
// a connection that may be restarting.
func (l *remoteLease) client() (pluginpb.CoordinationClient, error) {
	if l.r.closed.Load() {
		return nil, core.ErrClosed
	}
	if l.isEnded() {
		return nil, l.lostErr()
	}
	return l.r.client()
}

// extend moves ValidUntil to sent+TTL (never backwards) and re-arms the
// local expiry.
func (l *remoteLease) extend(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if vu := sent.Add(l.ttl); vu.After(l.validUntil) {
		l.validUntil = vu
	}
	d := time.Until(l.validUntil)
	if l.timer == nil {
		l.timer = time.AfterFunc(d, l.expire)
	} else {
		l.timer.Reset(d)
	}
}

// expire runs at ValidUntil: without a renew in time, the lease is lost.
func (l *remoteLease) expire() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.validUntil); d > 0 {
		l.timer.Reset(d) // renewed meanwhile
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end()
}

// end marks the lease lost for good: ValidUntil zero, Done closed.
func (l *remoteLease) end() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended = true
	l.validUntil = time.Time{}
	if l.timer != nil {
		l.timer.Stop()
	}
	close(l.done)
	l.mu.Unlock()
	l.r.forget(l)
}

// failed records a call's error: a lost lease ends the handle.
func (l *remoteLease) failed(err error) error {
	if errors.Is(err, core.ErrLeaseLost) {
		l.end()
	}
	return err
}

func (l *remoteLease) Put(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	c, err := l.client()
	if err != nil {
		return 0, err
	}
	resp, err := c.LeasePut(ctx, &pluginpb.LeasePutRequest{Id: l.id, Key: key, Value: value, Version: version})
	if err != nil {
		return 0, l.failed(l.r.failed(ctx, err))
	}
	return resp.GetVersion(), nil
}

func (l *remoteLease) Renew(ctx context.Context) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	sent := time.Now()
	if _, err := c.RenewLease(ctx, &pluginpb.LeaseRequest{Id: l.id}); err != nil {
		return l.failed(l.r.failed(ctx, err))
	}
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	if ended {
		// ValidUntil passed while the renew was in flight: the holder
		// may already have acted on the loss, so it stays lost.
		return l.lostErr()
	}
	l.extend(sent)
	return nil
}

// Revoke ends the lease. Revoking a lease that already ended succeeds:
// the goal state holds.
func (l *remoteLease) Revoke(ctx context.Context) error {
	c, err := l.client()
	if errors.Is(err, core.ErrLeaseLost) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := c.RevokeLease(ctx, &pluginpb.LeaseRequest{Id: l.id}); err != nil {
		err = l.r.failed(ctx, err)
		if !errors.Is(err, core.ErrLeaseLost) {
			return err
		}
	}
	l.end()
	return nil
}

// remoteLeadership is one term, alive while its Campaign stream is.
type remoteLeadership struct {
	r      *remoteCoordinator
	term   uint64
	id     string
	cancel context.CancelFunc
	once   sync.Once
	lost   chan struct{}
}

func (l *remoteLeadership) Term() uint64          { return l.term }
func (l *remoteLeadership) Lost() <-chan struct{} { return l.lost }

func (l *remoteLeadership) markLost() {
	l.once.Do(func() {
		close(l.lost)
		l.cancel()
		l.r.mu.Lock()
		delete(l.r.leaderships, l)
		l.r.mu.Unlock()
	})
}

// Resign asks the plugin to resign the term. A term already lost has
// nothing to resign.
func (l *remoteLeadership) Resign(ctx context.Context) error {
	select {
	case <-l.lost:
		return nil
	default:
	}
	c, err := l.r.client()
	if err != nil {
		return err
	}
	if _, err := c.Resign(ctx, &pluginpb.ResignRequest{LeadershipId: l.id}); err != nil {
		return l.r.failed(ctx, err)
	}
	l.markLost()
	return nil
}
