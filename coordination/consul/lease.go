package consul

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/fibrilgo/fibril/core"
)

// A lease is a Consul session created with
//   - a TTL and no health checks: it ends exactly when it is not renewed
//     (Consul waits up to twice the TTL before it acts, never less), or
//     when destroyed — not because some agent's serf check flapped;
//   - behaviour "delete": its keys are deleted when it ends, as the
//     contract requires of a lease's keys;
//   - lock delay 0: Consul's lock delay protects lock holders that cannot
//     tell when their session ended. Ours can (ValidUntil, from the time a
//     renew was sent), the cluster layer already keeps its own margin
//     before it moves anything a dead node held, and elections wait for
//     the old leader's ValidUntil by construction. A delay would only add
//     up to Consul's default of 15 s to every failover.
func (c *Coordinator) createSession(ctx context.Context, name string, ttl time.Duration) (string, error) {
	body := map[string]any{
		"Name":       name,
		"TTL":        ttl.String(),
		"Behavior":   api.SessionBehaviorDelete,
		"LockDelay":  "0s",
		"NodeChecks": []string{},
	}
	return call(c, ctx, "session create", func(ctx context.Context, cl *api.Client) (string, error) {
		var out struct{ ID string }
		_, err := cl.Raw().Write("/v1/session/create", body, &out, (&api.WriteOptions{}).WithContext(ctx))
		return out.ID, err
	})
}

// destroySession ends a session; with behaviour delete its keys go in the
// same Consul write.
func (c *Coordinator) destroySession(ctx context.Context, id string) error {
	_, err := call(c, ctx, "session destroy", func(ctx context.Context, cl *api.Client) (bool, error) {
		_, err := cl.Session().Destroy(id, (&api.WriteOptions{}).WithContext(ctx))
		return true, err
	})
	return err
}

// GrantLease implements core.Coordinator. The TTL is raised to MinTTL and
// rounded to whole seconds (Consul's TTLs are durations it reports back
// in seconds).
func (c *Coordinator) GrantLease(ctx context.Context, ttl time.Duration) (core.Lease, error) {
	ttl = max(ttl, c.MinTTL()).Round(time.Second)
	start := time.Now()
	id, err := c.createSession(ctx, "fibril-lease "+c.o.NodeID, ttl)
	if err != nil {
		return nil, err
	}
	return c.newLease(id, ttl, start.Add(ttl)), nil
}

// AttachLease implements core.LeaseAttacher: a session id is valid from
// any client of the Consul cluster, so attaching is reading the session's
// TTL and renewing it.
func (c *Coordinator) AttachLease(ctx context.Context, id string) (core.Lease, error) {
	if id == "" {
		return nil, core.Errorf(core.ErrBadRequest, "consul: attach: empty lease id")
	}
	start := time.Now()
	e, err := c.renew(ctx, id)
	if err != nil {
		return nil, err
	}
	ttl, perr := time.ParseDuration(e.TTL)
	if perr != nil || ttl <= 0 {
		return nil, core.Errorf(core.ErrBadRequest, "consul: attach lease %s: session %q has no TTL", id, e.TTL)
	}
	return c.newLease(id, ttl, start.Add(ttl)), nil
}

// renew renews a session; a session Consul does not know is lost.
func (c *Coordinator) renew(ctx context.Context, id string) (*api.SessionEntry, error) {
	e, err := call(c, ctx, "session renew", func(ctx context.Context, cl *api.Client) (*api.SessionEntry, error) {
		e, _, err := cl.Session().Renew(id, (&api.WriteOptions{}).WithContext(ctx))
		return e, err
	})
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("consul: session %s: %w", id, core.ErrLeaseLost)
	}
	return e, nil
}

// lease is the holder's handle on a session.
type lease struct {
	*core.LeaseDeadline
	c   *Coordinator
	id  string
	ttl time.Duration
}

func (c *Coordinator) newLease(id string, ttl time.Duration, until time.Time) *lease {
	return &lease{LeaseDeadline: core.NewLeaseDeadline(until), c: c, id: id, ttl: ttl}
}

func (l *lease) ID() string         { return l.id }
func (l *lease) TTL() time.Duration { return l.ttl }

func (l *lease) lostErr() error {
	if l.Lost() {
		return fmt.Errorf("consul: lease %s: %w", l.id, core.ErrLeaseLost)
	}
	return nil
}

// Renew implements core.Lease: on success ValidUntil = call time + TTL.
// Consul's leader restarts every session timer at TTL when leadership
// moves, and invalidates a session only after twice its TTL, so the
// promise holds across a Consul leader change.
func (l *lease) Renew(ctx context.Context) error {
	if err := l.c.check(); err != nil {
		return err
	}
	if err := l.lostErr(); err != nil {
		return err
	}
	start := time.Now()
	if _, err := l.c.renew(ctx, l.id); err != nil {
		if isLeaseLost(err) {
			l.Lose()
		}
		return err
	}
	if !l.Extend(start.Add(l.ttl)) {
		return fmt.Errorf("consul: lease %s: renewed too late: %w", l.id, core.ErrLeaseLost)
	}
	return nil
}

// Put implements core.Lease: the compare-and-set write of
// Coordinator.CompareAndSet, acquiring the key for the session.
func (l *lease) Put(ctx context.Context, key string, value []byte, version uint64) (uint64, error) {
	if err := core.CheckWritableKey(key); err != nil {
		return 0, err
	}
	return l.put(ctx, l.c.kvRoot+key, value, version)
}

func (l *lease) put(ctx context.Context, full string, value []byte, version uint64) (uint64, error) {
	if err := l.c.check(); err != nil {
		return 0, err
	}
	if err := l.lostErr(); err != nil {
		return 0, err
	}
	v, err := l.c.write(ctx, full, value, version, l.id)
	if isLeaseLost(err) {
		l.Lose()
	}
	return v, err
}

// Revoke implements core.Lease: destroying the session deletes its keys
// in the same Consul write.
func (l *lease) Revoke(ctx context.Context) error {
	if l.Lost() {
		return nil
	}
	if err := l.c.destroySession(ctx, l.id); err != nil {
		return err
	}
	l.Lose()
	return nil
}

func isLeaseLost(err error) bool { return err != nil && errors.Is(err, core.ErrLeaseLost) }
