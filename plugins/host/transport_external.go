package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// externalTransport is the Transport of an external plugin: the protocol
// adapter plus the supervisor of its process.
type externalTransport struct {
	*remoteTransport
	sup *supervisor
}

var _ PluginHealth = (*externalTransport)(nil)

// Health implements PluginHealth.
func (x *externalTransport) Health() (ok bool, restarts int, lastErr error) {
	return x.sup.Health()
}

// openExternalTransport runs an external transport plugin under the same
// supervisor as coordination plugins (checksum before every launch,
// handshake, API version, restarts with backoff, metrics). The first
// launch must succeed. When the process dies, its streams abort (their
// data connections break), Accept keeps waiting, Dial and OpenStream fail
// with an error wrapping core.ErrPeerRefused until the restarted process
// is Configured again (same Bind), and links re-dial in it by themselves.
// The result also implements PluginHealth and TransportStatser.
func openExternalTransport(ctx context.Context, e *CatalogEntry, env plugins.TransportEnv, log *slog.Logger, o options) (core.Transport, error) {
	if env.DataDir != "" {
		if err := os.MkdirAll(env.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("transport %q: data dir: %w", e.Name, err)
		}
	}
	sup := &supervisor{
		kind: plugins.KindTransport, entry: e, log: log, opts: o, m: metricsFor(o.reg),
		kindPlugin: &contract.Transport{},
	}
	rt := newRemoteTransport(supervisedConnector[pluginpb.TransportClient]{sup}, env, log)
	sup.setup = func(ctx context.Context, kindClient any, apiVersion int) error {
		return rt.setup(ctx, kindClient.(pluginpb.TransportClient), apiVersion)
	}
	sup.unavailable = unavailableAs(core.ErrPeerRefused, plugins.KindTransport, e.Name)
	if err := sup.start(ctx); err != nil {
		rt.stop()
		return nil, err
	}
	return &externalTransport{remoteTransport: rt, sup: sup}, nil
}
