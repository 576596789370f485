//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/fibrilgo/fibril/core/broker"
	"github.com/fibrilgo/fibril/core/config"
)

// TestMain lets the test binary stand in for rttfloor: the client starts
// os.Executable() with "serve", which here is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serve(os.Args[2:]); err != nil {
			os.Stderr.WriteString("rttfloor serve: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runJSON runs the client with args and decodes its JSON result.
func runJSON(t *testing.T, args ...string) Result {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	runErr := client(append(args, "--json"))
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if runErr != nil {
		t.Fatalf("rttfloor %v: %v", args, runErr)
	}
	var res Result
	if err := json.NewDecoder(bytes.NewReader(out)).Decode(&res); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return res
}

func TestFloorMeasuresEveryMessage(t *testing.T) {
	for _, c := range []struct{ deliver, afterSync bool }{{true, false}, {true, true}, {false, false}} {
		deliver := c.deliver
		dir := t.TempDir()
		res := runJSON(t, "--dir", dir, "--n", "200", "--size", "512", fmt.Sprintf("--deliver=%v", deliver), fmt.Sprintf("--deliver-after-sync=%v", c.afterSync))
		if res.N != 200 || res.Deliver != deliver || res.AfterSync != c.afterSync || res.Size != 512 {
			t.Fatalf("deliver=%v: result %+v: want 200 messages of 512 B", deliver, res)
		}
		// Each round trip holds its confirm, which holds the server's fdatasync.
		if res.RTTP50 < res.ConfP50 || res.ConfP50 <= 0 || res.FsyncP50 <= 0 || res.ConfP99 < res.FsyncP50 {
			t.Fatalf("deliver=%v: inconsistent latencies %+v", deliver, res)
		}
		if deliver != (res.E2EP50 > 0) {
			t.Fatalf("deliver=%v: e2e p50 %v", deliver, res.E2EP50)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("deliver=%v: the server left %d files in --dir", deliver, len(left))
		}
	}
}

// TestFloorBusy keeps a core busy during each fdatasync (--busy).
func TestFloorBusy(t *testing.T) {
	res := runJSON(t, "--dir", t.TempDir(), "--n", "100", "--deliver=false", "--busy", "20us")
	if res.N != 100 || res.BusyUS != 20 || res.ConfP50 < res.FsyncP50 || res.FsyncP50 <= 0 {
		t.Fatalf("result %+v: want 100 messages, busy 20 µs, consistent latencies", res)
	}
}

func TestFloorRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--n", "10"}, // neither --dir nor --broker
		{"--dir", t.TempDir(), "--size", "4"},
		{"--dir", t.TempDir(), "--n", "0"},
		{"--dir", t.TempDir(), "--auto-ack"}, // a broker's option
		{"--dir", t.TempDir(), "--busy", "2s"},
		{"--dir", t.TempDir(), "--busy", "-1us"},
	} {
		if err := client(args); err == nil {
			t.Errorf("rttfloor %v: no error", args)
		}
	}
}

// TestBrokerModeMeasuresABroker runs --broker against a broker in this
// process (embedded defaults, its own data directory).
func TestBrokerModeMeasuresABroker(t *testing.T) {
	cfg, _, err := config.Load([]string{
		"--server.data_dir=" + t.TempDir(),
		"--broker.listener.bind=127.0.0.1:0",
		"--admin.listener.bind=127.0.0.1:0",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown() })
	addr := b.BrokerAddr().String()
	for _, c := range []struct{ deliver, autoAck bool }{{true, false}, {true, true}, {false, false}} {
		deliver := c.deliver
		res := runJSON(t, "--broker", addr, "--n", "100", fmt.Sprintf("--deliver=%v", deliver), fmt.Sprintf("--auto-ack=%v", c.autoAck))
		if res.Mode != "broker" || res.N != 100 || res.Deliver != deliver || res.AutoAck != c.autoAck {
			t.Fatalf("deliver=%v auto-ack=%v: result %+v: want 100 messages measured on the broker", deliver, c.autoAck, res)
		}
		if res.RTTP50 < res.ConfP50 || res.ConfP50 <= 0 || deliver != (res.E2EP50 > 0) {
			t.Fatalf("deliver=%v: inconsistent latencies %+v", deliver, res)
		}
	}
	// A wrong password is the broker's AUTH_ERR, reported.
	if err := client([]string{"--broker", addr, "--password", "wrong", "--n", "1"}); err == nil {
		t.Fatal("a wrong password: no error")
	}
	for _, bad := range [][]string{{"--deliver-after-sync"}, {"--busy", "10us"}, {"--auto-ack", "--deliver=false"}} {
		if err := client(append([]string{"--broker", addr}, bad...)); err == nil {
			t.Fatalf("%v with --broker: no error", bad)
		}
	}
}
