package broker

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/fibrilgo/fibril/core"
)

// logLevels are log.level's values, lowest first.
var logLevels = []string{"debug", "info", "warn", "error"}

// SetLogLevelVar hands the broker the level of the logger it was started
// with, so that the admin API can change it while the broker runs
// (GET/PUT /admin/api/log-level). Without it the level is fixed.
func (b *Broker) SetLogLevelVar(lv *slog.LevelVar) { b.levelVar.Store(lv) }

// logLevel reads (set "") or changes this broker's log level. A change
// lasts until the process ends: a restart starts again at log.level.
func (b *Broker) logLevel(set, user string) (any, error) {
	lv := b.levelVar.Load()
	if lv == nil {
		return nil, core.Errorf(core.ErrNotFound, "this broker's log level is fixed (it was not started by the fibril command)")
	}
	prev := levelName(lv.Level())
	if set == "" {
		return map[string]any{"level": prev}, nil
	}
	set = strings.ToLower(set)
	if !slices.Contains(logLevels, set) {
		return nil, core.Errorf(core.ErrBadRequest, "level %q: want one of %s", set, strings.Join(logLevels, ", "))
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(set))
	// Logged at the higher of the two levels, so the line shows either way.
	b.log.Log(context.Background(), max(l, lv.Level(), slog.LevelWarn), "log level changed", "from", prev, "to", set, "admin_user", user)
	lv.Set(l)
	return map[string]any{"level": set, "previous": prev}, nil
}

func levelName(l slog.Level) string {
	switch {
	case l <= slog.LevelDebug:
		return "debug"
	case l <= slog.LevelInfo:
		return "info"
	case l <= slog.LevelWarn:
		return "warn"
	}
	return "error"
}
