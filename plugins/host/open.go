package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// ErrUnknownPlugin is wrapped by the error of a backend name that is
// neither built in nor in the catalog.
var ErrUnknownPlugin = errors.New("unknown plugin")

// OpenCoordination opens the coordination backend called name (the value
// of coordination.backend): the built-in registered under that name if
// there is one, else the catalog's coordination entry of that name, run
// as an external plugin process.
//
// For an external plugin the first launch must succeed (checksum,
// handshake, API version, Configure): otherwise the error is returned and
// nothing keeps running. Afterwards the process is supervised: when it
// dies it is restarted with backoff (100 ms doubling to 5 s), Configure is
// sent again and the leases still held are re-attached by id; meanwhile
// every call fails with an error wrapping core.ErrCoordinationUnavailable.
// The result then also implements PluginHealth and core.LeaseAttacher. Closing
// it stops the process.
//
// env.Logger is set from log when nil; log may be nil (slog.Default).
func OpenCoordination(ctx context.Context, name string, env plugins.CoordinationEnv, catalog *Catalog, log *slog.Logger, opts ...Option) (core.Coordinator, error) {
	if log == nil {
		log = slog.Default()
	}
	if env.DataDir != "" {
		if err := os.MkdirAll(env.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("coordination %q: data dir: %w", name, err)
		}
	}
	f, builtin := plugins.BuiltinCoordination(name)
	e, err := resolvePlugin(plugins.KindCoordination, "coordination backend", name, builtin, plugins.BuiltinCoordinationNames(), catalog, log)
	if err != nil {
		return nil, err
	}
	if builtin {
		if env.Logger == nil {
			env.Logger = log.With("coordination", name)
		}
		return f(ctx, env)
	}
	return openExternalCoordination(ctx, e, env, log.With("plugin_kind", plugins.KindCoordination, "plugin", e.Name), applyOptions(opts))
}

// resolvePlugin finds what serves name among the plugins of kind. When
// builtin is true a built-in does: a catalog entry of the same name is
// only warned about, and the result is nil. Otherwise it is the catalog's
// entry, or an error wrapping ErrUnknownPlugin that lists what exists;
// label names the setting in that error.
func resolvePlugin(kind, label, name string, builtin bool, builtinNames []string, catalog *Catalog, log *slog.Logger) (*CatalogEntry, error) {
	if builtin {
		if e, shadowed := catalog.Lookup(kind, name); shadowed {
			log.Warn("the plugin catalog lists a "+kind+" plugin with the name of a built-in; the built-in is used",
				"name", name, "catalog", e.catalog, "entry", e.index)
		}
		return nil, nil
	}
	e, ok := catalog.Lookup(kind, name)
	if !ok {
		where := "no plugin catalog is configured (plugins.catalog)"
		if catalog != nil && catalog.Path != "" {
			where = fmt.Sprintf("%s plugins in catalog %s: %s", kind, catalog.Path, listOrNone(catalog.Names(kind)))
		}
		return nil, fmt.Errorf("%s %q: %w: built-ins: %s; %s", label, name, ErrUnknownPlugin, listOrNone(builtinNames), where)
	}
	return e, nil
}

// applyOptions is the host options: the defaults, then opts in order.
func applyOptions(opts []Option) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// externalCoordinator is the Coordinator of an external plugin: the
// protocol adapter plus the supervisor of its process.
type externalCoordinator struct {
	*remoteCoordinator
	sup *supervisor
}

var (
	_ PluginHealth       = (*externalCoordinator)(nil)
	_ core.LeaseAttacher = (*externalCoordinator)(nil)
)

// Health implements PluginHealth.
func (x *externalCoordinator) Health() (ok bool, restarts int, lastErr error) {
	return x.sup.Health()
}

// supervisedConnector hands an adapter (coordination or transport) the
// current process's kind client C.
type supervisedConnector[C any] struct{ s *supervisor }

func (c supervisedConnector[C]) client() (C, error) {
	raw, err := c.s.current()
	if err != nil {
		var none C
		return none, err
	}
	return raw.(C), nil
}

func (c supervisedConnector[C]) shutdown() { c.s.close() }

// unavailableAs is supervisor.unavailable for a kind whose calls fail
// with sentinel while its process is down.
func unavailableAs(sentinel error, kind, name string) func(lastErr error) error {
	return func(lastErr error) error {
		if lastErr == nil {
			return core.Errorf(sentinel, "%s plugin %q is not running", kind, name)
		}
		return core.Errorf(sentinel, "%s plugin %q is restarting (last error: %v)", kind, name, lastErr)
	}
}

func openExternalCoordination(ctx context.Context, e *CatalogEntry, env plugins.CoordinationEnv, log *slog.Logger, o options) (*externalCoordinator, error) {
	env.Logger = nil // the plugin logs through its stderr
	sup := &supervisor{
		kind: plugins.KindCoordination, entry: e, log: log, opts: o, m: metricsFor(o.reg),
		kindPlugin: &contract.Coordination{},
	}
	rc := newRemoteCoordinator(supervisedConnector[pluginpb.CoordinationClient]{sup})
	sup.setup = func(ctx context.Context, kindClient any, apiVersion int) error {
		return rc.setup(ctx, kindClient.(pluginpb.CoordinationClient), apiVersion, env)
	}
	sup.unavailable = unavailableAs(core.ErrCoordinationUnavailable, plugins.KindCoordination, e.Name)
	if err := sup.start(ctx); err != nil {
		rc.cancel()
		return nil, err
	}
	return &externalCoordinator{remoteCoordinator: rc, sup: sup}, nil
}

// OpenTransport opens the transport called name (transport.backend): the
// built-in registered under that name if there is one, else the
// catalog's transport entry of that name, run as an external plugin.
func OpenTransport(ctx context.Context, name string, env plugins.TransportEnv, catalog *Catalog, log *slog.Logger, opts ...Option) (core.Transport, error) {
	if log == nil {
		log = slog.Default()
	}
	f, builtin := plugins.BuiltinTransport(name)
	e, err := resolvePlugin(plugins.KindTransport, "transport", name, builtin, plugins.BuiltinTransportNames(), catalog, log)
	if err != nil {
		return nil, err
	}
	if builtin {
		if env.Logger == nil {
			env.Logger = log.With("transport", name)
		}
		return f(ctx, env)
	}
	return openExternalTransport(ctx, e, env, log.With("plugin_kind", plugins.KindTransport, "plugin", e.Name), applyOptions(opts))
}
