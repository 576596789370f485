package broker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
)

// The data directory's format: a new directory gets the marker; one
// written before markers existed (format 0: the same layout without it)
// is upgraded in place and keeps its data; one of a newer format is
// refused before anything in it is read or written.
func TestDataDirFormat(t *testing.T) {
	dir := t.TempDir()
	flags := []string{"--server.data_dir=" + dir, "--broker.listener.bind=127.0.0.1:0", "--admin.listener.bind=127.0.0.1:0"}
	start := func() (*Broker, error) {
		cfg, _, err := config.Load(flags, nil)
		if err != nil {
			t.Fatal(err)
		}
		return Start(cfg, slog.New(slog.DiscardHandler))
	}
	marker := filepath.Join(dir, dataFormatFile)
	b, err := start()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readDataFormat(dir); err != nil || got != dataFormat {
		t.Fatalf("a new directory's format: %d %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	publishTo(ctx, t, c, "kept", 0, 3)
	c.Close()
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// As the previous build left it: no marker.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	b, err = start()
	if err != nil {
		t.Fatalf("upgrading a directory without a marker: %v", err)
	}
	if got, err := readDataFormat(dir); err != nil || got != dataFormat {
		t.Fatalf("after the upgrade: %d %v", got, err)
	}
	c = dialClient(ctx, t, b)
	sub, err := c.Subscribe(ctx, "kept", client.SubscribeOptions{Partitions: []uint32{0}, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("message %d after the upgrade: %v", i, err)
		}
	}
	c.Close()
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// Written by a newer build.
	if err := os.WriteFile(marker, []byte(`{"format": 7, "written_by": "v9.0.0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "owner_id"))
	if _, err := start(); err == nil || !strings.Contains(err.Error(), "data format 7, written by fibril v9.0.0") {
		t.Fatalf("a newer format: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "owner_id")); string(after) != string(before) {
		t.Fatal("the refused directory was changed")
	}
	if err := os.WriteFile(marker, []byte(`{"format": "x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := start(); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("a damaged marker: %v", err)
	}
}
