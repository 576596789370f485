package plugins

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/fibrilgo/fibril/plugins/internal/contract"
)

// parentCheckInterval is how often a plugin checks that its host is still
// its parent: go-plugin does not stop a plugin whose host was killed, and
// an orphaned coordination plugin would hold on to the node's data dir.
const parentCheckInterval = time.Second

// ServeCoordination is the main of a coordination plugin binary:
//
//	func main() {
//		plugins.ServeCoordination(mybackend.Open, plugins.Info{Name: "mybackend", Version: "1.0.0"})
//	}
//
// It performs the go-plugin handshake, serves the coordination protocol
// over gRPC with automatic mTLS, and opens the backend with factory when
// the host sends Configure (with the broker's CoordinationEnv; its Logger
// writes to the host's log). It returns when the host stops the plugin,
// after closing the backend; it exits the process with status 1 when info
// is invalid or the binary was not started by a Fibril host.
func ServeCoordination(factory CoordinationFactory, info Info) {
	if factory == nil {
		fmt.Fprintln(os.Stderr, "plugins: ServeCoordination: nil factory")
		os.Exit(1)
	}
	if err := info.validate(KindCoordination); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	servePlugin(KindCoordination, info, func(log *slog.Logger) (plugin.Plugin, func() error) {
		srv := NewCoordinationServer(factory, info, log)
		return &contract.Coordination{Impl: srv}, srv.CloseBackend
	})
}

// servePlugin is the body of every Serve<Kind>: the logger, the plugin set
// (the kind's plugin and PluginInfo) for each served API version, the
// parent watch, go-plugin's Serve, and closing the backend afterwards.
// open builds the kind's plugin and returns how to close its backend.
func servePlugin(kind string, info Info, open func(log *slog.Logger) (plugin.Plugin, func() error)) {
	// Capture stderr now: plugin.Serve later points os.Stderr at a pipe of
	// its own, while the host reads log lines from the real one.
	stderr := os.Stderr
	level := parseLevel(os.Getenv(contract.EnvLogLevel))
	log := slog.New(newPluginLogHandler(stderr, level)).With("plugin", info.Name)
	kindPlugin, closeBackend := open(log)
	set := plugin.PluginSet{
		kind:                    kindPlugin,
		contract.InfoPluginName: &contract.Info{Impl: &infoServer{info: info, kind: kind}},
	}
	versions := map[int]plugin.PluginSet{}
	for _, v := range info.servedVersions(kind) {
		versions[v] = set
	}
	go watchParent(closeBackend, log)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  contract.Handshake,
		VersionedPlugins: versions,
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: info.Name, Output: stderr, JSONFormat: true, Level: hclogLevel(level),
		}),
	})
	if err := closeBackend(); err != nil {
		log.Warn("close "+kind+" backend", "error", err)
	}
}

// watchParent closes the backend (with closeBackend) and exits once the
// host that started the plugin is gone (the process was re-parented).
func watchParent(closeBackend func() error, log *slog.Logger) {
	parent := os.Getppid()
	for range time.Tick(parentCheckInterval) {
		if os.Getppid() != parent {
			log.Warn("host process is gone; stopping")
			_ = closeBackend()
			os.Exit(2)
		}
	}
}

// newPluginLogHandler writes slog records as the JSON lines go-plugin's
// host parses (hclog's format: @level, @message, @timestamp), so each
// line reaches the broker's log at its own level with its attributes.
func newPluginLogHandler(w io.Writer, level slog.Level) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lv, _ := a.Value.Any().(slog.Level)
				return slog.String("@level", contract.LevelName(lv))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	})
}

func parseLevel(s string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace":
		return contract.LevelTrace
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}
