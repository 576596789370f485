package plugins

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// transportPlugin is the go-plugin face of the transport kind, like
// coordPlugin: the server on the plugin side, the client on the host side.
type transportPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	srv *TransportServer // nil on the host side
}

func (p *transportPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterTransportServer(s, p.srv)
	return nil
}

func (p *transportPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pluginpb.NewTransportClient(c), nil
}

// ServeTransport is the main of a transport plugin binary:
//
//	func main() {
//		plugins.ServeTransport(mytransport.Open, plugins.Info{Name: "mytransport", Version: "1.0.0"})
//	}
//
// It performs the go-plugin handshake, serves the transport protocol over
// gRPC with automatic mTLS, opens the transport with factory when the host
// sends Configure (with the broker's TransportEnv; its Logger writes to the
// host's log), and carries every stream's bytes over a unix socket of its
// own. It returns when the host stops the plugin, after closing the
// transport; it exits the process with status 1 when info is invalid or
// the binary was not started by a Fibril host.
func ServeTransport(factory TransportFactory, info Info) {
	if factory == nil {
		fmt.Fprintln(os.Stderr, "plugins: ServeTransport: nil factory")
		os.Exit(1)
	}
	if err := info.validate(KindTransport); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	servePlugin(KindTransport, info, func(log *slog.Logger) (plugin.Plugin, func() error) {
		srv := NewTransportServer(factory, info, log)
		return &transportPlugin{srv: srv}, srv.CloseBackend
	})
}

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
func openExternalTransport(ctx context.Context, e *CatalogEntry, env TransportEnv, log *slog.Logger, o options) (core.Transport, error) {
	if env.DataDir != "" {
		if err := os.MkdirAll(env.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("transport %q: data dir: %w", e.Name, err)
		}
	}
	sup := &supervisor{
		kind: KindTransport, entry: e, log: log, opts: o, m: metricsFor(o.reg),
		kindPlugin: &transportPlugin{},
	}
	rt := newRemoteTransport(supervisedConnector[pluginpb.TransportClient]{sup}, env, log)
	sup.setup = func(ctx context.Context, kindClient any, apiVersion int) error {
		return rt.setup(ctx, kindClient.(pluginpb.TransportClient), apiVersion)
	}
	sup.unavailable = unavailableAs(core.ErrPeerRefused, KindTransport, e.Name)
	if err := sup.start(ctx); err != nil {
		rt.stop()
		return nil, err
	}
	return &externalTransport{remoteTransport: rt, sup: sup}, nil
}
