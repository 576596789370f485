package host_test

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/metricstest"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
)

// buildTCPWrap builds contrib/transport-tcpwrap into the test's temporary
// directory and returns the binary and its sha256.
func buildTCPWrap(t *testing.T) (path, sha string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fibril-transport-tcpwrap")
	out, err := exec.Command("go", "build", "-o", path, "github.com/fibrilgo/fibril/contrib/transport-tcpwrap").CombinedOutput()
	if err != nil {
		t.Fatalf("build tcpwrap: %v\n%s", err, out)
	}
	if sha, err = host.FileSHA256(path); err != nil {
		t.Fatal(err)
	}
	return path, sha
}

func transportEntry(name, command, sha string) string {
	return fmt.Sprintf("[[plugin]]\nkind = \"transport\"\nname = %q\nversion = \"0.1.0\"\ncommand = %q\nsha256 = %q\n\n", name, command, sha)
}

func openTransport(t *testing.T, node string, cat *host.Catalog, opts ...host.Option) core.Transport {
	t.Helper()
	tr, err := host.OpenTransport(bounded(t, time.Minute), "tcpwrap", tcpEnv(t, node), cat, testLog(t), opts...)
	if err != nil {
		t.Fatalf("OpenTransport(%s): %v", node, err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// The tcpwrap binary as a real plugin process: bytes both ways, orderly
// close vs abort across the boundary, and a killed plugin: its streams
// abort, calls fail with ErrPeerRefused meanwhile, a pending Accept keeps
// waiting, the restarted plugin listens on the same address, links
// re-dial by themselves, and new streams work both ways.
func TestTransportPluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts plugin processes")
	}
	bin, sha := buildTCPWrap(t)
	if _, err := host.Describe(bounded(t, 30*time.Second), bin, nil, nil); err != nil {
		t.Fatalf("describe: %v", err)
	}
	cat := writeCatalog(t, transportEntry("tcpwrap", bin, sha))
	reg := prometheus.NewRegistry()
	a := openTransport(t, "node-a", cat, host.WithRegisterer(reg), host.WithRestartBackoff(time.Second, 2*time.Second))
	b := openTransport(t, "node-b", cat)
	ctx := bounded(t, 2*time.Minute)
	if h, ok := a.(host.PluginHealth); !ok {
		t.Fatal("external transport does not implement PluginHealth")
	} else if up, restarts, lastErr := h.Health(); !up || restarts != 0 || lastErr != nil {
		t.Fatalf("Health = %v %d %v", up, restarts, lastErr)
	}

	// Orderly both ways.
	out, in := connect(t, ctx, a, b, "node-b")
	if _, err := in.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if err := in.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(t, out); err != nil || string(got) != "pong" {
		t.Fatalf("opener read %q, %v; want pong and EOF", got, err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(t, in); err != nil || len(got) != 0 {
		t.Fatalf("acceptor read %q, %v after the opener's Close; want EOF", got, err)
	}

	// Abort crosses both plugin boundaries.
	out, in = connect(t, ctx, a, b, "node-b")
	if err := out.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(t, in); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("acceptor's Read after the opener's Abort: %v, want ErrStreamAborted", err)
	}

	// Kill a's plugin under an open stream and a waiting Accept.
	l, err := b.Dial(ctx, core.Peer{ID: "node-a", Addr: a.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	open, _ := connect(t, ctx, a, b, "node-b")
	addr := a.Addr().String()
	type acceptResult struct {
		s   core.Stream
		err error
	}
	accepted := make(chan acceptResult, 1)
	go func() { // reports through the channel: it may outlive a failed test
		s, err := a.Accept(ctx)
		accepted <- acceptResult{s, err}
	}()
	pid := host.TransportPluginPID(a)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(t, open); !errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Read of a stream whose plugin died: %v, want ErrStreamAborted", err)
	}
	// The supervisor notices within its poll interval and waits a second
	// before relaunching: calls meanwhile are refused, saying why.
	h := a.(host.PluginHealth)
	testkit.Eventually(t, 30*time.Second, "the plugin reported down", func() bool {
		up, _, _ := h.Health()
		return !up
	})
	if _, err := a.Dial(ctx, core.Peer{ID: "node-b", Addr: b.Addr().String()}); !errors.Is(err, core.ErrPeerRefused) || !strings.Contains(err.Error(), "restarting") {
		t.Fatalf("Dial while the plugin restarts: %v, want ErrPeerRefused saying it restarts", err)
	}
	var la core.Link
	testkit.Eventually(t, time.Minute, "a link through the restarted plugin", func() bool {
		la, err = a.Dial(ctx, core.Peer{ID: "node-b", Addr: b.Addr().String()})
		if err != nil && !errors.Is(err, core.ErrPeerRefused) {
			t.Fatalf("Dial while restarting: %v, want ErrPeerRefused", err)
		}
		return err == nil
	})
	defer la.Close()
	s, err := la.OpenStream(ctx)
	if err != nil {
		t.Fatalf("OpenStream after the restart: %v", err)
	}
	defer s.Close()
	if p := host.TransportPluginPID(a); p == pid || p == 0 {
		t.Fatalf("plugin pid %d after the restart (was %d)", p, pid)
	}
	if a.Addr().String() != addr {
		t.Fatalf("address %v after the restart, was %s", a.Addr(), addr)
	}
	if _, err := s.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := b.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if data, err := readAll(t, got); err != nil || string(data) != "again" {
		t.Fatalf("read %q, %v through the restarted plugin", data, err)
	}
	// b's link to a, dialled before the restart, reaches the restarted
	// plugin's listener at the same address; the Accept that waited all
	// along gets the stream.
	var back core.Stream
	testkit.Eventually(t, time.Minute, "a stream to the restarted plugin", func() bool {
		back, err = l.OpenStream(ctx)
		return err == nil
	})
	defer back.Close()
	if _, err := back.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	if err := back.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-accepted:
		if r.err != nil {
			t.Fatalf("Accept across the restart: %v", r.err)
		}
		defer r.s.Close()
		if data, err := readAll(t, r.s); err != nil || string(data) != "back" {
			t.Fatalf("read %q, %v on the stream accepted after the restart", data, err)
		}
	case <-ctx.Done():
		t.Fatal("the Accept waiting across the restart got nothing")
	}
	up, restarts, lastErr := h.Health()
	if !up || restarts < 1 || lastErr == nil {
		t.Fatalf("Health = %v %d %v, want up after ≥1 restart", up, restarts, lastErr)
	}
	if got := pluginMetric(t, reg, "fibril_plugin_restarts_total"); got != float64(restarts) {
		t.Fatalf("fibril_plugin_restarts_total{kind=transport} = %v, want %d", got, restarts)
	}
	if got := pluginMetric(t, reg, "fibril_plugin_up"); got != 1 {
		t.Fatalf("fibril_plugin_up{kind=transport} = %v after the restart", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Accept(ctx); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// pluginMetric reads a plugin metric of the "tcpwrap" transport plugin.
func pluginMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metricstest.Value(t, reg, name, map[string]string{"kind": plugins.KindTransport, "name": "tcpwrap"})
}
