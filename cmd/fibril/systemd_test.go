package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// serveForTest runs the broker with environ until the returned stop is
// called; stop cancels it and returns its exit code and log.
func serveForTest(t *testing.T, environ []string) (log *syncBuffer, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	log = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--server.data_dir=" + t.TempDir(), "--broker.listener.bind=127.0.0.1:0", "--admin.listener.bind=127.0.0.1:0"}, environ, &out, log)
	}()
	t.Cleanup(cancel)
	return log, func() (int, string) {
		cancel()
		select {
		case code := <-done:
			return code, log.String()
		case <-time.After(15 * time.Second):
			t.Fatalf("broker did not stop:\n%s", log.String())
			return 0, ""
		}
	}
}

// notifySocket listens where systemd would (a short path: unix socket
// paths have room for about a hundred bytes).
func notifySocket(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, conn
}

func recvNotify(t *testing.T, conn *net.UnixConn, log *syncBuffer) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v\n%s", err, log.String())
	}
	return string(buf[:n])
}

// Under systemd (NOTIFY_SOCKET set) the broker sends READY=1 once it
// serves, after its "broker ready" line, and STOPPING=1 when the shutdown
// begins.
func TestSystemdNotifyReadyAndStopping(t *testing.T) {
	path, conn := notifySocket(t)
	log, stop := serveForTest(t, []string{"NOTIFY_SOCKET=" + path})
	got := recvNotify(t, conn, log)
	if !strings.HasPrefix(got, "READY=1\nSTATUS=serving clients on 127.0.0.1:") {
		t.Fatalf("first notification %q", got)
	}
	if !strings.Contains(log.String(), "broker ready") {
		t.Errorf("READY=1 came before the broker logged it was ready:\n%s", log.String())
	}
	code, out := stop()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got := recvNotify(t, conn, log); got != "STOPPING=1\nSTATUS=shutting down" {
		t.Errorf("second notification %q", got)
	}
	if strings.Contains(out, "cannot notify systemd") {
		t.Errorf("a notification failed:\n%s", out)
	}
}

// A notify socket that cannot be reached costs one WARN line and nothing
// else: the broker serves and stops cleanly.
func TestSystemdNotifyFailureOnlyWarnsOnce(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-socket")
	log, stop := serveForTest(t, []string{"NOTIFY_SOCKET=" + missing})
	testkit.EventuallyReport(t, 10*time.Second, func() bool { return strings.Contains(log.String(), "cannot notify systemd") },
		func() string { return "no warning about the notify socket:\n" + log.String() })
	code, out := stop()
	if code != 0 || !strings.Contains(out, "shutdown complete") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if n := strings.Count(out, "cannot notify systemd"); n != 1 || !strings.Contains(out, "level=WARN msg=\"cannot notify systemd") {
		t.Errorf("%d notify warnings, want one at WARN:\n%s", n, out)
	}
}
