package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// fakeSystemd listens where systemd would and hands back each datagram.
type fakeSystemd struct {
	t    *testing.T
	conn *net.UnixConn
}

// listen opens a unix datagram socket at addr (a path, or an abstract
// '@name' on Linux), closed when the test ends.
func listen(t *testing.T, addr string) *fakeSystemd {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fakeSystemd{t: t, conn: conn}
}

// socketPath is a fresh socket path. It is short on purpose: a unix
// socket's path has room for about a hundred bytes, which t.TempDir's
// long names (and macOS's long $TMPDIR) can overrun.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "notify")
}

// recv returns the next datagram, failing the test after a few seconds.
func (f *fakeSystemd) recv() string {
	f.t.Helper()
	if err := f.conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		f.t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := f.conn.Read(buf)
	if err != nil {
		f.t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// expect calls send and checks that exactly want arrived, as one datagram.
func (f *fakeSystemd) expect(send func() (bool, error), want string) {
	f.t.Helper()
	sent, err := send()
	if !sent || err != nil {
		f.t.Fatalf("sent %v, err %v; want sent", sent, err)
	}
	if got := f.recv(); got != want {
		f.t.Errorf("got %q, want %q", got, want)
	}
}

// A socket at a path receives exactly the protocol's lines.
func TestNotifyPathSocket(t *testing.T) {
	path := socketPath(t)
	sd := listen(t, path)
	n := Notifier{Socket: path}
	sd.expect(n.Ready, "READY=1")
	sd.expect(n.Stopping, "STOPPING=1")
	sd.expect(func() (bool, error) { return n.Status("serving\non :9876") }, "STATUS=serving on :9876")
	sd.expect(func() (bool, error) { return n.Notify("READY=1\nSTATUS=up") }, "READY=1\nSTATUS=up")
}

// An abstract socket ('@name', what systemd uses in containers and for
// user services) receives the same; only Linux has the namespace.
func TestNotifyAbstractSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract unix sockets are Linux-only")
	}
	name := fmt.Sprintf("@fibril-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	sd := listen(t, name)
	n := Notifier{Socket: name}
	sd.expect(n.Ready, "READY=1")
	sd.expect(n.Stopping, "STOPPING=1")
}

// The package-level calls read NOTIFY_SOCKET from the process environment.
func TestPackageFunctionsReadTheEnvironment(t *testing.T) {
	path := socketPath(t)
	sd := listen(t, path)
	t.Setenv(EnvSocket, path)
	sd.expect(Ready, "READY=1")
	sd.expect(Stopping, "STOPPING=1")
	sd.expect(func() (bool, error) { return Status("draining") }, "STATUS=draining")
	sd.expect(func() (bool, error) { return Notify("WATCHDOG=1") }, "WATCHDOG=1")
}

// Without NOTIFY_SOCKET (not run by systemd) nothing is sent and nothing
// fails.
func TestUnsetIsANoOp(t *testing.T) {
	t.Setenv(EnvSocket, "")
	for name, send := range map[string]func() (bool, error){
		"Ready": Ready, "Stopping": Stopping,
		"Status":           func() (bool, error) { return Status("x") },
		"Notifier{}":       Notifier{}.Ready,
		"FromEnviron(nil)": FromEnviron(nil).Stopping,
	} {
		if sent, err := send(); sent || err != nil {
			t.Errorf("%s: sent %v, err %v; want a silent no-op", name, sent, err)
		}
	}
}

// FromEnviron takes the first NOTIFY_SOCKET entry, as os.Getenv does, and
// ignores look-alike names.
func TestFromEnviron(t *testing.T) {
	env := []string{"NOTIFY_SOCKET_X=/no", "PATH=/bin", "NOTIFY_SOCKET=/run/a", "NOTIFY_SOCKET=/run/b"}
	if got := FromEnviron(env).Socket; got != "/run/a" {
		t.Errorf("socket %q, want /run/a", got)
	}
	if got := FromEnviron([]string{"NOTIFY_SOCKETS=/x"}).Socket; got != "" {
		t.Errorf("socket %q, want none", got)
	}
}

// An unreachable or malformed socket is an error for the caller to log,
// never a panic.
func TestBadSocketIsAnError(t *testing.T) {
	missing := socketPath(t) // its directory exists, the socket does not
	cases := []string{missing, "relative/notify", "vsock:2:1234", "@"}
	if runtime.GOOS != "linux" {
		cases = append(cases, "@abstract")
	}
	for _, socket := range cases {
		sent, err := Notifier{Socket: socket}.Ready()
		if sent || err == nil {
			t.Errorf("%q: sent %v, err %v; want an error", socket, sent, err)
		}
	}
	// A path that is not a socket at all.
	file := filepath.Join(filepath.Dir(missing), "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Notifier{Socket: file}).Ready(); err == nil {
		t.Error("a plain file took a notification")
	}
	// A socket whose listener is gone.
	gone := filepath.Join(filepath.Dir(missing), "gone")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: gone, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	_, err = Notifier{Socket: gone}.Ready()
	if err == nil {
		t.Error("a socket without a listener took a notification")
	}
	var opErr *net.OpError
	if err != nil && !errors.As(err, &opErr) {
		t.Errorf("error %v does not carry the net.OpError", err)
	}
}
