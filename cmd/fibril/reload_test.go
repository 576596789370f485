//go:build unix

package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGHUP reloads the TLS material, again on every signal; a refused
// reload is logged and the process keeps running.
func TestReloadOnHangup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan struct{}, 4)
	var logs syncBuffer
	reloadOnHangup(ctx, func() (any, error) {
		calls <- struct{}{}
		return nil, errors.New("the new TLS material is refused")
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range 2 {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("SIGHUP %d did not reload", i+1)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(logs.String(), "SIGHUP: TLS reload refused") < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "SIGHUP: TLS reload refused"); n != 2 {
		t.Fatalf("%d refusals logged:\n%s", n, logs.String())
	}
}
