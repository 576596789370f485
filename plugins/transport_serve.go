package plugins

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/hashicorp/go-plugin"

	"github.com/fibrilgo/fibril/plugins/internal/contract"
)

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
		return &contract.Transport{Impl: srv}, srv.CloseBackend
	})
}
