package consul

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/fibrilgo/fibril/core"
)

// checkAccess runs at Open: it waits (with backoff, until ctx ends) for an
// agent to answer, then exercises each ACL right the backend needs once,
// so a token without one fails the start with the right named instead of
// failing later in the middle of a placement.
func (c *Coordinator) checkAccess(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		_, err := call(c, ctx, "status", func(ctx context.Context, cl *api.Client) (string, error) {
			return cl.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("consul: no agent of %s answered: %w", KeyAddresses, c.Unreachable())
		}
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
	probe := c.o.Prefix + "/probe/" + c.o.NodeID
	if _, err := c.write(ctx, probe, []byte("access check"), core.AnyVersion, ""); err != nil {
		return missingRight(err, fmt.Sprintf(`key_prefix "%s/" { policy = "write" }`, c.o.Prefix))
	}
	if err := c.deleteFull(ctx, probe); err != nil {
		return missingRight(err, fmt.Sprintf(`key_prefix "%s/" { policy = "write" }`, c.o.Prefix))
	}
	id, err := c.createSession(ctx, "fibril-access-check "+c.o.NodeID, c.MinTTL())
	if err != nil {
		return missingRight(err, `session_prefix "" { policy = "write" }`)
	}
	if err := c.destroySession(ctx, id); err != nil {
		return missingRight(err, `session_prefix "" { policy = "write" }`)
	}
	return nil
}

func (c *Coordinator) deleteFull(ctx context.Context, full string) error {
	_, err := call(c, ctx, "delete", func(ctx context.Context, cl *api.Client) (bool, error) {
		_, err := cl.KV().Delete(full, (&api.WriteOptions{}).WithContext(ctx))
		return true, err
	})
	return err
}

// missingRight names the ACL rule a refused probe needed.
func missingRight(err error, rule string) error {
	if errors.Is(err, core.ErrForbidden) {
		return fmt.Errorf("consul: the ACL token (%s or %s) lacks the right %s; see coordination/consul/README.md#acl-policy: %w", KeyToken, KeyTokenPath, rule, err)
	}
	return err
}
