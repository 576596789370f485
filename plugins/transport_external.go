package plugins

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fibrilgo/fibril/core"
)

// openExternalTransport runs an external transport plugin.
func openExternalTransport(ctx context.Context, e *CatalogEntry, env TransportEnv, log *slog.Logger, o options) (core.Transport, error) {
	return nil, errors.New("external transports are not built yet")
}
