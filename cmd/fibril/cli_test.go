package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/testkit"
)

// The default command serves until its context ends, then shuts down
// gracefully and exits 0.
func TestServeStartsAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--server.data_dir=" + t.TempDir(), "--broker.listener.bind=127.0.0.1:0", "--admin.listener.bind=127.0.0.1:0"}, nil, &out, &errOut)
	}()
	testkit.EventuallyReport(t, 10*time.Second, func() bool { return strings.Contains(errOut.String(), "broker ready") },
		func() string { return "no \"broker ready\" log line:\n" + errOut.String() })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("broker did not stop")
	}
	if !strings.Contains(errOut.String(), "shutdown complete") {
		t.Errorf("no clean shutdown in the log:\n%s", errOut.String())
	}
}

func TestInvalidConfigExitsTwo(t *testing.T) {
	code, out, errOut := runCLI(t, []string{"--broker.listener.bind=nope", "--log.level=loud"})
	if code != 2 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"invalid configuration (2 problems)", "flag --broker.listener.bind: broker.listener.bind:", "flag --log.level"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestConfigPrintShowsOriginsAndRedacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(path, []byte("[server]\ndata_dir = \"/data\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, []string{"config", "print", "--config", path, "--log.level=debug"},
		"FIBRIL_BROKER_BIND=0.0.0.0:9876", "FIBRIL_CLUSTER_SECRET=s3cret", "FIBRIL_SDK_TOKEN=x")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`data_dir = "/data"  # ` + path + `:2`,
		`bind = "0.0.0.0:9876"  # env FIBRIL_BROKER_BIND`,
		`level = "debug"  # flag --log.level`,
		`secret = <redacted>  # env FIBRIL_CLUSTER_SECRET`,
		`admin_enabled = false  # default (follows tls.enabled)`,
		"# routing.max_upstream_sessions = 4096",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, "s3cret") {
		t.Error("secret leaked")
	}
	if !strings.Contains(errOut, "level=WARN") || !strings.Contains(errOut, "FIBRIL_SDK_TOKEN") {
		t.Errorf("unknown variable not logged as a warning: %s", errOut)
	}
}

func TestConfigCheck(t *testing.T) {
	if code, out, _ := runCLI(t, []string{"config", "check"}); code != 0 || !strings.Contains(out, "configuration OK") {
		t.Errorf("valid: exit %d, %q", code, out)
	}
	if code, _, errOut := runCLI(t, []string{"config", "check"}, "FIBRIL_BROKER_VISIBILITY=private"); code != 2 ||
		!strings.Contains(errOut, "cannot run standalone") {
		t.Errorf("invalid: exit %d, %q", code, errOut)
	}
}

func TestConfigExampleAndDocs(t *testing.T) {
	for name, write := range map[string]func(*bytes.Buffer) error{
		"example": func(b *bytes.Buffer) error { return config.WriteExample(b) },
		"docs":    func(b *bytes.Buffer) error { return config.WriteDocs(b) },
	} {
		var want bytes.Buffer
		if err := write(&want); err != nil {
			t.Fatal(err)
		}
		code, out, _ := runCLI(t, []string{"config", name})
		if code != 0 || out != want.String() {
			t.Errorf("config %s: exit %d, output differs", name, code)
		}
		file := filepath.Join(t.TempDir(), name)
		if code, _, errOut := runCLI(t, []string{"config", name, "-o", file}); code != 0 {
			t.Errorf("config %s -o: exit %d: %s", name, code, errOut)
		}
		if got, _ := os.ReadFile(file); string(got) != want.String() {
			t.Errorf("config %s -o wrote different content", name)
		}
	}
}

func TestVersionHelpAndUsageErrors(t *testing.T) {
	if code, out, _ := runCLI(t, []string{"version"}); code != 0 || !strings.HasPrefix(out, "fibril ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	if code, out, _ := runCLI(t, []string{"--help"}); code != 0 || !strings.Contains(out, "--broker.listener.bind") {
		t.Errorf("help: exit %d, %q", code, out)
	}
	for _, args := range [][]string{{"config"}, {"config", "nope"}, {"config", "docs", "extra"}} {
		if code, _, _ := runCLI(t, args); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// fibril dev refuses ports that are taken before it starts anything: a
// foreign listener there would answer the readiness probe in place of the
// broker that failed to bind.
func TestDevRefusesTakenPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	// The client and raft ports are free ones of our own, not the
	// defaults: a broker a developer runs on 9876 must not decide the
	// outcome (dev checks the client port first).
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"dev", "--nodes", "1", "--dir", t.TempDir(), "--admin-port", port,
		"--client-port", strconv.Itoa(freePort(t)), "--raft-port", strconv.Itoa(freePort(t))}, nil, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "127.0.0.1:"+port) || !strings.Contains(errOut.String(), "--admin-port") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}
