package main

import (
	"log/slog"
	"sync/atomic"

	"github.com/fibrilgo/fibril/core/sdnotify"
)

// systemdNotifier returns a function that sends state to the notify socket
// named by environ's NOTIFY_SOCKET (a no-op outside systemd; see
// contrib/systemd). A failure is logged once, at WARN, and never stops the
// broker: it serves the same whether or not systemd hears about it.
func systemdNotifier(environ []string, logger *slog.Logger) func(state string) {
	n := sdnotify.FromEnviron(environ)
	var warned atomic.Bool
	return func(state string) {
		if _, err := n.Notify(state); err != nil && !warned.Swap(true) {
			logger.Warn("cannot notify systemd; serving regardless", "err", err)
		}
	}
}
