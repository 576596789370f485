package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// reloadOnHangup re-reads the TLS material (Broker.ReloadTLS) on every
// SIGHUP until ctx ends: the conventional way to tell a daemon its
// certificate files changed (`systemctl reload`, `kill -HUP`). It returns
// once it listens, so a signal sent afterwards is never the default
// action (which would end the process).
func reloadOnHangup(ctx context.Context, reload func() (any, error), logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if _, err := reload(); err != nil {
					logger.Warn("SIGHUP: TLS reload refused", "err", err)
				} else {
					logger.Info("SIGHUP: TLS material reloaded")
				}
			}
		}
	}()
}
