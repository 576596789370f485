package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/coordtest"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/core/metricstest"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
	"github.com/fibrilgo/fibril/plugins/plugintest"
)

// testLog collects the host's log (go-plugin's lines and the plugin's
// stderr included) and prints it only when the test fails. It never calls
// t.Log from a plugin goroutine, which may outlive the test.
func testLog(t *testing.T) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("host log:\n%s", buf.String())
			mu.Unlock()
		}
	})
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// entry is a catalog entry for the test plugin under name.
func entry(name, command, sha string, args ...string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf("[[plugin]]\nkind = \"coordination\"\nname = %q\nversion = \"0.0.1-test\"\ncommand = %q\nargs = [%s]\nsha256 = %q\n\n",
		name, command, strings.Join(quoted, ", "), sha)
}

func writeCatalog(t *testing.T, entries ...string) *host.Catalog {
	t.Helper()
	path := filepath.Join(t.TempDir(), "catalog.toml")
	if err := os.WriteFile(path, []byte(strings.Join(entries, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := host.LoadCatalog(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func open(t *testing.T, name string, env plugins.CoordinationEnv, cat *host.Catalog, opts ...host.Option) (core.Coordinator, error) {
	t.Helper()
	c, err := host.OpenCoordination(bounded(t, time.Minute), name, env, cat, testLog(t), opts...)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

func mustOpen(t *testing.T, name string, env plugins.CoordinationEnv, cat *host.Catalog, opts ...host.Option) core.Coordinator {
	t.Helper()
	c, err := open(t, name, env, cat, opts...)
	if err != nil {
		t.Fatalf("OpenCoordination(%q): %v", name, err)
	}
	return c
}

// proxiedCluster runs n test plugin processes, each the member of one
// in-test memcoord store, reached through plugintest.Serve: every call
// crosses the real go-plugin boundary and the state outlives the plugin
// processes. Stop kills a member's process with SIGKILL and closes its
// host side so that it is not restarted: a crash of that broker.
func proxiedCluster(t *testing.T, n int, opts ...host.Option) *coordtest.Cluster {
	t.Helper()
	store := memcoord.NewStore(memcoord.Options{MinTTL: 500 * time.Millisecond})
	dir := plugintest.SocketDir(t)
	cat := writeCatalog(t, entry("test", testPlugin, testPluginSHA))
	cl := &coordtest.Cluster{}
	for i := range n {
		id := fmt.Sprintf("node-%d", i+1)
		member := func(context.Context, plugins.CoordinationEnv) (core.Coordinator, error) { return store.Member(id), nil }
		sock := plugintest.Serve(t, dir, member, plugins.Info{Name: "shared-store", Version: "test"})
		env := plugintest.Env(t, id)
		env.Config["socket"] = sock
		cl.Members = append(cl.Members, mustOpen(t, "test", env, cat, opts...))
	}
	cl.Stop = func(i int) {
		c := cl.Members[i]
		if pid := host.PluginPID(c); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = c.Close()
	}
	return cl
}

// TestConformanceThroughPluginProcess runs the whole Coordinator
// conformance suite against plugin processes: leases, watches and
// elections through gRPC, go-plugin and a proxy hop.
func TestConformanceThroughPluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts many plugin processes")
	}
	coordtest.Run(t, func(t *testing.T, n int) *coordtest.Cluster { return proxiedCluster(t, n) })
}

// TestConformanceInProcess runs the suite through plugintest, as a plugin
// author would.
func TestConformanceInProcess(t *testing.T) {
	plugintest.CoordinationConformance(t, plugins.Info{Name: "mem", Version: "test"}, func(t *testing.T, n int) []plugins.CoordinationFactory {
		store := memcoord.NewStore(memcoord.Options{MinTTL: 200 * time.Millisecond})
		var members []plugins.CoordinationFactory
		for i := range n {
			id := fmt.Sprintf("node-%d", i+1)
			members = append(members, func(context.Context, plugins.CoordinationEnv) (core.Coordinator, error) { return store.Member(id), nil })
		}
		return members
	})
}

func TestOpenExternalAnswers(t *testing.T) {
	cat := writeCatalog(t, entry("test", testPlugin, testPluginSHA, "--name=selftest"))
	c := mustOpen(t, "test", plugintest.Env(t, "node-1"), cat)
	ctx := bounded(t, 30*time.Second)
	v, err := c.CompareAndSet(ctx, "k", []byte("v"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompareAndSet(ctx, "k", []byte("w"), 0); !errors.Is(err, core.ErrVersionConflict) {
		t.Fatalf("conflicting CAS: %v, want ErrVersionConflict", err)
	}
	if _, err := c.Get(ctx, "/bad//key"); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("invalid key: %v, want ErrBadRequest", err)
	}
	kv, err := c.Get(ctx, "k")
	if err != nil || kv.Version != v || string(kv.Value) != "v" {
		t.Fatalf("Get = %+v, %v", kv, err)
	}
	if c.MinTTL() != 50*time.Millisecond {
		t.Fatalf("MinTTL = %v, want the plugin's 50ms", c.MinTTL())
	}
	h, ok := c.(host.PluginHealth)
	if !ok {
		t.Fatal("external coordinator does not implement PluginHealth")
	}
	if up, restarts, lastErr := h.Health(); !up || restarts != 0 || lastErr != nil {
		t.Fatalf("Health = %v %d %v", up, restarts, lastErr)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}

func TestChecksumMismatchRefused(t *testing.T) {
	wrong := strings.Repeat("ab", 32)
	cat := writeCatalog(t, entry("test", testPlugin, wrong))
	_, err := open(t, "test", plugintest.Env(t, "node-1"), cat)
	if !errors.Is(err, host.ErrChecksumMismatch) {
		t.Fatalf("OpenCoordination: %v, want ErrChecksumMismatch", err)
	}
	for _, want := range []string{testPlugin, testPluginSHA, wrong, cat.Path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// A binary replaced under a running plugin is refused at the restart: the
// checksum is verified before every launch.
func TestChecksumVerifiedOnRestart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin")
	data, err := os.ReadFile(testPlugin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cat := writeCatalog(t, entry("test", bin, testPluginSHA))
	c := mustOpen(t, "test", plugintest.Env(t, "node-1"), cat, host.WithRestartBackoff(50*time.Millisecond, 200*time.Millisecond))
	// Swap the file (rename keeps the running process's inode intact).
	tmp := bin + ".new"
	if err := os.WriteFile(tmp, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(host.PluginPID(c), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h := c.(host.PluginHealth)
	testkit.Eventually(t, 20*time.Second, "a refused restart", func() bool {
		_, _, lastErr := h.Health()
		return errors.Is(lastErr, host.ErrChecksumMismatch)
	})
	if _, err := c.Get(bounded(t, 10*time.Second), "k"); !errors.Is(err, core.ErrCoordinationUnavailable) {
		t.Fatalf("Get while the plugin cannot start: %v, want ErrCoordinationUnavailable", err)
	}
}

func TestIncompatibleAPIVersionRefused(t *testing.T) {
	cat := writeCatalog(t, entry("test", testPlugin, testPluginSHA, "--api-versions=99"))
	_, err := open(t, "test", plugintest.Env(t, "node-1"), cat)
	if !errors.Is(err, host.ErrIncompatibleAPIVersion) {
		t.Fatalf("OpenCoordination: %v, want ErrIncompatibleAPIVersion", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "API version 99") || !strings.Contains(msg, fmt.Sprint(plugins.APIVersions(plugins.KindCoordination))) {
		t.Fatalf("error does not name both sides' versions: %v", err)
	}
}

// A plugin offering a newer version too is used at the highest version
// both sides speak.
func TestAPIVersionNegotiatedDown(t *testing.T) {
	cat := writeCatalog(t, entry("test", testPlugin, testPluginSHA, "--api-versions=1,99"))
	c := mustOpen(t, "test", plugintest.Env(t, "node-1"), cat)
	if _, err := c.CompareAndSet(bounded(t, 30*time.Second), "k", nil, 0); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownBackend(t *testing.T) {
	cat := writeCatalog(t, entry("alpha", testPlugin, testPluginSHA), entry("beta", testPlugin, testPluginSHA))
	_, err := open(t, "gamma", plugintest.Env(t, "node-1"), cat)
	if !errors.Is(err, host.ErrUnknownPlugin) {
		t.Fatalf("err = %v, want ErrUnknownPlugin", err)
	}
	for _, want := range []string{`"gamma"`, "alpha, beta", cat.Path, "built-ins: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	_, err = open(t, "gamma", plugintest.Env(t, "node-1"), nil)
	if !errors.Is(err, host.ErrUnknownPlugin) || !strings.Contains(err.Error(), "plugins.catalog") {
		t.Fatalf("without a catalog: %v", err)
	}
}

var registerBuiltin sync.Once

func TestBuiltinWinsOverCatalog(t *testing.T) {
	registerBuiltin.Do(func() {
		plugins.RegisterCoordination("mem-builtin", func(_ context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
			if env.Logger == nil {
				return nil, errors.New("no logger given to the built-in")
			}
			return memcoord.NewStore(memcoord.Options{}).Member(string(env.NodeID)), nil
		})
	})
	cat := writeCatalog(t, entry("mem-builtin", testPlugin, testPluginSHA))
	c := mustOpen(t, "mem-builtin", plugintest.Env(t, "node-1"), cat)
	if _, ok := c.(host.PluginHealth); ok {
		t.Fatal("the catalog entry was used instead of the built-in")
	}
}

// Killing the plugin process: calls fail with ErrCoordinationUnavailable,
// the host restarts it, calls work again, the lease keeps its id and its
// keys (re-attached), and the restart is counted.
func TestRestartAfterKill(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := proxiedCluster(t, 1, host.WithRegisterer(reg), host.WithRestartBackoff(300*time.Millisecond, time.Second))
	c := cl.Members[0]
	ctx := bounded(t, time.Minute)
	l, err := c.GrantLease(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, "nodes/node-1", []byte("up"), 0); err != nil {
		t.Fatal(err)
	}
	wantMetric(t, reg, "fibril_plugin_up", 1)
	pid := host.PluginPID(c)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sawDown := false
	testkit.Eventually(t, 30*time.Second, "the restarted plugin to answer", func() bool {
		_, err := c.Get(ctx, "nodes/node-1")
		if errors.Is(err, core.ErrCoordinationUnavailable) {
			sawDown = true
		} else if err != nil {
			t.Fatalf("Get while restarting: %v, want ErrCoordinationUnavailable", err)
		}
		return err == nil
	})
	if !sawDown {
		t.Fatal("no call failed with ErrCoordinationUnavailable while the plugin was dead")
	}
	if p := host.PluginPID(c); p == pid || p == 0 {
		t.Fatalf("plugin pid %d after restart (was %d)", p, pid)
	}
	up, restarts, lastErr := c.(host.PluginHealth).Health()
	if !up || restarts < 1 || lastErr == nil {
		t.Fatalf("Health = %v %d %v, want up after ≥1 restart with the exit as last error", up, restarts, lastErr)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew after the restart: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatal("lease ended across the restart")
	default:
	}
	kv, err := c.Get(ctx, "nodes/node-1")
	if err != nil || kv.Lease != l.ID() || string(kv.Value) != "up" {
		t.Fatalf("node key after restart = %+v, %v; want bound to %s", kv, err, l.ID())
	}
	wantMetric(t, reg, "fibril_plugin_restarts_total", float64(restarts))
	wantMetric(t, reg, "fibril_plugin_up", 1)
}

// A backend that cannot re-attach leases (here: state in the dead process)
// reports the lease lost after the restart.
func TestRestartLosesUnattachableLease(t *testing.T) {
	cat := writeCatalog(t, entry("test", testPlugin, testPluginSHA))
	env := plugintest.Env(t, "node-1")
	env.Config["min_ttl_ms"] = "1000"
	c := mustOpen(t, "test", env, cat, host.WithRestartBackoff(50*time.Millisecond, 200*time.Millisecond))
	ctx := bounded(t, time.Minute)
	l, err := c.GrantLease(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(host.PluginPID(c), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lease not reported lost after a restart that could not re-attach it")
	}
	if err := l.Renew(ctx); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("Renew: %v, want ErrLeaseLost", err)
	}
	if !l.ValidUntil().IsZero() {
		t.Fatal("lost lease has a ValidUntil")
	}
}

func TestDescribe(t *testing.T) {
	info, err := host.Describe(bounded(t, 30*time.Second), testPlugin, []string{"--name=described", "--version=1.2.3"}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "described" || info.Kind != plugins.KindCoordination || info.Version != "1.2.3" || info.SDKVersion != plugins.SDKVersion {
		t.Fatalf("info = %+v", info)
	}
	if fmt.Sprint(info.APIVersions) != fmt.Sprint(plugins.APIVersions(plugins.KindCoordination)) {
		t.Fatalf("API versions %v", info.APIVersions)
	}
	if len(info.Config) != 2 || info.Config[0].Name != "socket" || info.Config[1].Default != "50" {
		t.Fatalf("config schema %+v", info.Config)
	}
	// A plugin this broker cannot use is still described.
	info, err = host.Describe(bounded(t, 30*time.Second), testPlugin, []string{"--api-versions=99"}, nil)
	if err != nil || fmt.Sprint(info.APIVersions) != "[99]" {
		t.Fatalf("describe of a v99 plugin: %+v, %v", info, err)
	}
	if _, err := host.Describe(bounded(t, 30*time.Second), "/bin/true", nil, nil); err == nil {
		t.Fatal("describing a non-plugin succeeded")
	}
}

// wantMetric checks the value of a plugin metric of the "test"
// coordination plugin.
func wantMetric(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	if got := metricstest.Value(t, reg, name, map[string]string{"kind": plugins.KindCoordination, "name": "test"}); got != want {
		t.Fatalf("%s = %v, want %v", name, got, want)
	}
}
