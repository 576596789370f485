package plugins

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/fibrilgo/fibril/plugins/internal/contract"
)

// slogHCLog is hclog.Logger on top of a slog.Logger: go-plugin logs (its
// own lines and every line a plugin writes to stderr) through hclog, and
// the broker logs through slog, so the bridge keeps one log.
type slogHCLog struct {
	l       *slog.Logger // base logger with the implied args, without the name
	name    string
	implied []any
}

// logger is l with the "logger" attribute naming this logger.
func (h *slogHCLog) logger() *slog.Logger {
	if h.name == "" {
		return h.l
	}
	return h.l.With("logger", h.name)
}

var _ hclog.Logger = (*slogHCLog)(nil)

// HCLog returns an hclog.Logger that writes to l, for the hashicorp
// libraries the broker embeds (go-plugin, raft): their lines share the
// broker's format and level. A non-empty name becomes the "logger"
// attribute. Trace maps below slog's Debug. An error that only reports an
// orderly transport shutdown ("transport shutdown", raft's network layer
// closing) is logged at Debug: it is not one.
func HCLog(l *slog.Logger, name string) hclog.Logger {
	return &slogHCLog{l: l, name: name}
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return contract.LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level == hclog.NoLevel && !h.l.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	lv := slogLevel(level)
	if lv >= slog.LevelError && shutdownNoise(args) {
		lv = slog.LevelDebug
	}
	h.logger().Log(context.Background(), lv, msg, args...)
}

// shutdownNoise reports whether an error's attributes only say that a
// transport is shutting down.
func shutdownNoise(args []any) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && err.Error() == "transport shutdown" {
			return true
		}
	}
	return false
}

func (h *slogHCLog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLog) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(l))
}

func (h *slogHCLog) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *slogHCLog) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *slogHCLog) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *slogHCLog) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *slogHCLog) IsError() bool { return h.enabled(hclog.Error) }

func (h *slogHCLog) ImpliedArgs() []any { return h.implied }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	return &slogHCLog{l: h.l.With(args...), name: h.name, implied: append(append([]any{}, h.implied...), args...)}
}

func (h *slogHCLog) Name() string { return h.name }

// Named adds the name as a "logger" attribute (go-plugin names the
// logger after the plugin binary).
func (h *slogHCLog) Named(name string) hclog.Logger {
	full := name
	if h.name != "" {
		full = h.name + "." + name
	}
	return &slogHCLog{l: h.l, name: full, implied: h.implied}
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	return &slogHCLog{l: h.l, name: name, implied: h.implied}
}

// SetLevel is ignored: the slog handler owns the level.
func (h *slogHCLog) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler keeps.
func (h *slogHCLog) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (h *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return contract.NewLineLogger(h.logger(), slog.LevelInfo, "")
}
