package contract

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// LevelTrace is hclog's trace level in slog terms.
const LevelTrace = slog.LevelDebug - 4

// LevelName is the name of l in hclog's terms, as EnvLogLevel and the
// plugin's JSON log lines spell it.
func LevelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}

// NewLineLogger returns a LineLogger that logs each line at level, as
// msg with the line in a "line" attribute, or as the message itself when
// msg is empty.
func NewLineLogger(log *slog.Logger, level slog.Level, msg string) *LineLogger {
	return &LineLogger{log: log, level: level, msg: msg}
}

// LineLogger logs each line written to it. It receives what a plugin
// prints on its stdout/stderr after the handshake (go-plugin forwards it)
// and what go-plugin's standard loggers write.
type LineLogger struct {
	log   *slog.Logger
	level slog.Level
	msg   string

	mu  sync.Mutex
	buf []byte
}

func (w *LineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(bytes.TrimRight(w.buf[:i], "\r"))
		w.buf = w.buf[i+1:]
		if line != "" {
			w.emit(line)
		}
	}
	// A line longer than this without a newline is logged in pieces
	// rather than buffered without bound.
	if len(w.buf) > 64<<10 {
		w.emit(string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *LineLogger) emit(line string) {
	if w.msg == "" {
		w.log.Log(context.Background(), w.level, line)
		return
	}
	w.log.Log(context.Background(), w.level, w.msg, "line", line)
}
