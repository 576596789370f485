package integration

// The harness: one broker binary built per run, broker processes with
// their logs, the loopback-only dialer guard, and the admin listener
// (HTTP, metrics). Clients and bounded waits: harness_client_test.go; raw
// frames: harness_raw_test.go; the TCP proxy: harness_proxy_test.go;
// clusters and plugin builds: harness_cluster_test.go.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Bounds of every wait. The machine is small and shared, so waits are
// generous; assertions stay exact.
const (
	readyTimeout = 60 * time.Second // process start until "broker ready"
	exitTimeout  = 30 * time.Second // SIGTERM/SIGKILL until the process is gone
	opTimeout    = 20 * time.Second // one client operation
	waitTimeout  = 20 * time.Second // a delivery or a condition that must come
)

// fibrilBin is the broker binary built by TestMain.
var fibrilBin string

// guardViolations counts dials refused by the loopback guard anywhere in
// the run; TestMain fails the run when it is not zero.
var guardViolations atomic.Int64

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fibril-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	fibrilBin = filepath.Join(dir, "fibril")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	// Built without -race even when the tests run raced: the broker is
	// the system under test, the race detector watches the test process.
	cmd := exec.Command(goBin, "build", "-o", fibrilBin, "github.com/fibrilgo/fibril/cmd/fibril")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: building cmd/fibril:", err)
		return 1
	}
	code := m.Run()
	if n := guardViolations.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "integration: %d dial(s) outside 127.0.0.0/8 and ::1 were refused\n", n)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// ---------------------------------------------------------------------------
// Logs

// lockedBuffer is a goroutine-safe log sink that keeps the newest bytes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const logKeep = 1 << 20

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.buf.Len() > 2*logKeep {
		tail := append([]byte(nil), b.buf.Bytes()[b.buf.Len()-logKeep:]...)
		b.buf.Reset()
		b.buf.WriteString("…(older lines dropped)\n")
		b.buf.Write(tail)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n lines.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("…(%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// dumpOnFailure prints a log buffer into the test log if the test failed.
func dumpOnFailure(t testing.TB, name string, b *lockedBuffer) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s ----\n%s", name, tail(b.String(), 400))
		}
	})
}

// testLogger returns a debug logger for a client whose lines are shown
// only when the test fails.
func testLogger(t testing.TB, name string) *slog.Logger {
	b := &lockedBuffer{}
	dumpOnFailure(t, "client log "+name, b)
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// ---------------------------------------------------------------------------
// Loopback guard

// checkLoopback accepts only literal addresses in 127.0.0.0/8 and ::1.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dial guard: %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("dial guard: refusing %q: tests only dial 127.0.0.0/8 and ::1", addr)
	}
	return nil
}

// guard is a dialer that refuses (and counts) every non-loopback address.
type guard struct{ refused atomic.Int64 }

func (g *guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkLoopback(addr); err != nil {
		g.refused.Add(1)
		guardViolations.Add(1)
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// newGuard returns a guard whose refusals fail t at cleanup.
func newGuard(t testing.TB) *guard {
	g := &guard{}
	t.Cleanup(func() {
		if n := g.refused.Load(); n > 0 {
			t.Errorf("dial guard refused %d non-loopback dial(s)", n)
		}
	})
	return g
}

// ---------------------------------------------------------------------------
// Broker processes

var brokerSeq atomic.Int64

// broker is one running (or finished) broker process.
type broker struct {
	t       testing.TB
	name    string
	DataDir string
	args    []string // extra flags, kept for restarts
	Addr    string   // client listener, from the "broker ready" line
	Admin   string   // admin listener, from the "broker ready" line

	cmd   *exec.Cmd
	log   *lockedBuffer
	ready chan [2]string
	done  chan struct{}
	state *os.ProcessState
}

// startBroker runs the broker on a new temporary data directory.
func startBroker(t testing.TB, args ...string) *broker {
	t.Helper()
	return startBrokerIn(t, t.TempDir(), args...)
}

// startBrokerIn runs the broker on dataDir, binding both listeners to
// 127.0.0.1:0, and waits for its "broker ready" line.
func startBrokerIn(t testing.TB, dataDir string, args ...string) *broker {
	t.Helper()
	b := launchBroker(t, dataDir, args...)
	b.waitReady()
	return b
}

// launchBroker starts the process without waiting for it to be ready (the
// members of a new cluster wait for each other's quorum).
func launchBroker(t testing.TB, dataDir string, args ...string) *broker {
	t.Helper()
	b := &broker{
		t:       t,
		name:    fmt.Sprintf("broker#%d", brokerSeq.Add(1)),
		DataDir: dataDir,
		args:    args,
		log:     &lockedBuffer{},
		ready:   make(chan [2]string, 1),
		done:    make(chan struct{}),
	}
	full := append([]string{
		"--config=",
		"--server.data_dir=" + dataDir,
		"--broker.listener.bind=127.0.0.1:0",
		"--admin.listener.bind=127.0.0.1:0",
		"--log.level=debug",
	}, args...)
	b.cmd = exec.Command(fibrilBin, full...)
	b.cmd.Env = cleanEnv()
	w := &readyWatcher{sink: b.log, ready: b.ready}
	b.cmd.Stdout, b.cmd.Stderr = w, w
	dumpOnFailure(t, b.name+" log ("+strings.Join(args, " ")+")", b.log)
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", b.name, err)
	}
	go func() {
		_ = b.cmd.Wait()
		b.state = b.cmd.ProcessState
		close(b.done)
	}()
	t.Cleanup(func() {
		if !b.exited() {
			_ = b.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-b.done:
			case <-time.After(exitTimeout):
				t.Errorf("%s (pid %d) did not exit after SIGKILL", b.name, b.cmd.Process.Pid)
			}
		}
	})
	return b
}

// waitReady waits for the "broker ready" line and checks the addresses.
func (b *broker) waitReady() {
	t := b.t
	t.Helper()
	select {
	case a := <-b.ready:
		b.Addr, b.Admin = a[0], a[1]
	case <-b.done:
		t.Fatalf("%s exited before it was ready: %v", b.name, b.state)
	case <-time.After(readyTimeout):
		t.Fatalf("%s not ready within %v", b.name, readyTimeout)
	}
	if err := checkLoopback(b.Addr); err != nil {
		t.Fatalf("%s: broker address: %v", b.name, err)
	}
	if err := checkLoopback(b.Admin); err != nil {
		t.Fatalf("%s: admin address: %v", b.name, err)
	}
}

// cleanEnv is the test environment without FIBRIL_* variables, so that
// nothing but the flags configures the broker.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FIBRIL_") {
			env = append(env, kv)
		}
	}
	return env
}

// readyWatcher copies the process output into the log buffer and reports
// the addresses of the first "broker ready" line.
type readyWatcher struct {
	sink    *lockedBuffer
	ready   chan [2]string
	partial []byte
	sent    bool
}

var readyLine = regexp.MustCompile(`msg="broker ready".* broker=(\S+) admin=(\S+)`)

func (w *readyWatcher) Write(p []byte) (int, error) {
	_, _ = w.sink.Write(p)
	if w.sent {
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if m := readyLine.FindStringSubmatch(line); m != nil {
			w.ready <- [2]string{m[1], m[2]}
			w.sent = true
			w.partial = nil
			break
		}
	}
	return len(p), nil
}

func (b *broker) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the broker's process, by PID.
func (b *broker) signal(sig syscall.Signal) {
	b.t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		b.t.Fatalf("%s: signal %v: %v", b.name, sig, err)
	}
}

// waitExit waits (bounded) for the process to end and returns its state.
func (b *broker) waitExit() *os.ProcessState {
	b.t.Helper()
	select {
	case <-b.done:
		return b.state
	case <-time.After(exitTimeout):
		b.t.Fatalf("%s (pid %d) still running %v after the signal", b.name, b.cmd.Process.Pid, exitTimeout)
		return nil
	}
}

// stop shuts the broker down gracefully (SIGTERM) and requires exit 0.
func (b *broker) stop() {
	b.t.Helper()
	b.signal(syscall.SIGTERM)
	if st := b.waitExit(); st.ExitCode() != 0 {
		b.t.Fatalf("%s: exit after SIGTERM: %v, want status 0", b.name, st)
	}
}

// kill ends the broker with SIGKILL (a crash).
func (b *broker) kill() {
	b.t.Helper()
	b.signal(syscall.SIGKILL)
	b.waitExit()
}

// restart starts a new process on the same data directory with the same
// flags (on new ports).
func (b *broker) restart() *broker {
	b.t.Helper()
	if !b.exited() {
		b.t.Fatalf("%s: restart while still running", b.name)
	}
	return startBrokerIn(b.t, b.DataDir, b.args...)
}

// ---------------------------------------------------------------------------
// Admin listener

// httpGet fetches path from the admin listener (plain HTTP unless tc is
// set) and returns the status and body.
func httpGet(t testing.TB, admin, path string, tc *tls.Config) (int, string) {
	t.Helper()
	return httpDoTLS(t, http.MethodGet, admin, path, "", tc)
}

// httpPost and httpDo send a JSON body to the (plain HTTP) admin listener.
func httpPost(t testing.TB, admin, path, body string) (int, string) {
	t.Helper()
	return httpDoTLS(t, http.MethodPost, admin, path, body, nil)
}

func httpDo(t testing.TB, method, admin, path, body string) (int, string) {
	t.Helper()
	return httpDoTLS(t, method, admin, path, body, nil)
}

func httpDoTLS(t testing.TB, method, admin, path, body string, tc *tls.Config) (int, string) {
	t.Helper()
	g := newGuard(t)
	tr := &http.Transport{DialContext: g.dial, TLSClientConfig: tc, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, opTimeout), method, scheme+"://"+admin+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, string(out)
}

// metrics scrapes /metrics into series → value ("name" or
// `name{label="v"}` exactly as exposed).
func metrics(t testing.TB, b *broker) map[string]float64 {
	t.Helper()
	code, body := httpGet(t, b.Admin, "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d", code)
	}
	out := make(map[string]float64)
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// metric returns one series, failing when it is not exposed.
func metric(t testing.TB, b *broker, series string) float64 {
	t.Helper()
	m := metrics(t, b)
	v, ok := m[series]
	if !ok {
		t.Fatalf("metric %s not exposed", series)
	}
	return v
}
