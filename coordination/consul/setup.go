package consul

import (
	"context"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
)

func init() { plugins.RegisterCoordination("consul", Factory) }

// Factory opens the backend from the host's environment: the built-in
// registration and the external binary (cmd/fibril-coord-consul) share it.
func Factory(ctx context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
	o, err := OptionsFromEnv(env)
	if err != nil {
		return nil, err
	}
	return Open(ctx, o)
}
