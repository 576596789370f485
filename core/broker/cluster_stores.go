package broker

import (
	"time"

	"context"
	"fmt"

	"github.com/fibrilgo/fibril/core/auth"
	"github.com/fibrilgo/fibril/core/settings"
)

// shareStores swaps the node-local user store and runtime settings for the
// cluster's shared documents (S-144, S-173). The local ones seed them when
// the cluster has none yet.
func (b *Broker) shareStores() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterJoinTimeout)
	defer cancel()
	users, err := auth.OpenShared(ctx, b.cluster.cl.Users(), b.users, b.log.With("component", "users"))
	if err != nil {
		return err
	}
	if n, err := users.Seed(b.cfg.Auth.Seeds()); err != nil {
		users.Close()
		return fmt.Errorf("auth.seed_users: %w", err)
	} else if n > 0 {
		b.log.Info("seeded the cluster's users", "count", n)
	}
	st, err := settings.OpenShared(ctx, b.cluster.cl.Settings(), b.settings.Current(), b.log.With("component", "settings"))
	if err != nil {
		users.Close()
		return err
	}
	b.users, b.settings = users, st
	// The controller plans followers from the cluster's document only:
	// the local one is a seed and may differ from what the cluster holds.
	b.cluster.cl.SetTargetFollowers(func() int { return int(st.Current().Replication.TargetFollowers) })
	b.cluster.cl.SetAdoptionTimeout(func() time.Duration { return settings.Ms(st.Current().Routing.RepartitionAdoptionTimeoutMS) })
	b.adminUsers.Store(users)
	b.adminSettings.Store(st)
	b.adminCluster.Store(b.cluster)
	return nil
}
