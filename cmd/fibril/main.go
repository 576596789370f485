// Command fibril is the broker: `fibril` serves, `fibril config …`
// inspects and documents the configuration.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

//go:generate go run . config example -o ../../fibril.example.toml
//go:generate go run . config docs -o ../../docs/configuration.md

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
