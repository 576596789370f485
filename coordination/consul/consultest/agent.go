// Package consultest starts real Consul agents for tests, on loopback
// and free ports, and stops them by PID.
//
// The agent binary comes from FIBRIL_CONSUL_BIN, else the cache that
// integration/install-consul.sh fills (FIBRIL_CONSUL_CACHE, default
// ~/.cache/fibril-test), else consul on PATH. Without one a test skips
// with a message saying how to get it — unless FIBRIL_REQUIRE_CONSUL=1
// (.ci/run sets it), which turns the skip into a failure so CI can never
// pass by skipping.
package consultest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// ManagementToken is the ACL management token of an agent started with
// Options.ACL.
const ManagementToken = "fibril-test-management-token"

// Options shape an agent.
type Options struct {
	// Persistent runs a one-server cluster with a data directory (not
	// -dev), so that Restart keeps the store, as a real deployment would.
	Persistent bool
	// ACL enables ACLs with default policy deny; ManagementToken is the
	// management token.
	ACL bool
	// TLS adds an HTTPS listener (Agent.HTTPSAddr) that requires a client
	// certificate; Agent.TLS has the files. Plain HTTP stays on Addr.
	TLS bool
}

// Agent is one running Consul agent.
type Agent struct {
	// Addr is the HTTP API address (127.0.0.1:port).
	Addr string
	// HTTPSAddr and TLS are set with Options.TLS.
	HTTPSAddr string
	TLS       TLSFiles

	t       testing.TB
	bin     string
	args    []string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// Binary finds the agent binary, or skips (fails under
// FIBRIL_REQUIRE_CONSUL=1).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FIBRIL_CONSUL_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			unavailable(t, fmt.Sprintf("FIBRIL_CONSUL_BIN=%s: %v", p, err))
		}
		return p
	}
	cache := os.Getenv("FIBRIL_CONSUL_CACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "fibril-test")
		}
	}
	if cache != "" {
		found, _ := filepath.Glob(filepath.Join(cache, "consul-*", "consul"))
		sort.Strings(found)
		if len(found) > 0 {
			return found[len(found)-1]
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	unavailable(t, "no Consul agent binary (FIBRIL_CONSUL_BIN unset, none in the cache, none on PATH)")
	return ""
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("FIBRIL_REQUIRE_CONSUL") == "1" {
		t.Fatalf("Consul test cannot run: %s (FIBRIL_REQUIRE_CONSUL=1 makes this a failure)", why)
	}
	t.Skipf("skipped: %s; run integration/install-consul.sh to build one (set FIBRIL_REQUIRE_CONSUL=1 to fail instead)", why)
}

// Start starts an agent and waits until it has a leader. It is stopped
// when the test ends.
func Start(t testing.TB, o Options) *Agent {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	ports := freePorts(t, 4)
	https := -1
	var files TLSFiles
	if o.TLS {
		https = ports[3]
		files = writeTLS(t, dir)
	}
	hcl := fmt.Sprintf(`disable_update_check = true, ports { http = %d, serf_lan = %d, server = %d, https = %d, dns = -1, grpc = -1, grpc_tls = -1, serf_wan = -1 }`, ports[0], ports[1], ports[2], https)
	if o.TLS {
		hcl += fmt.Sprintf(` tls { defaults { ca_file = %q, cert_file = %q, key_file = %q }, https { verify_incoming = true } }`, files.CA, files.ServerCert, files.ServerKey)
	}
	if o.ACL {
		hcl += fmt.Sprintf(` acl { enabled = true, default_policy = "deny", tokens { initial_management = %q, agent = %q } }`, ManagementToken, ManagementToken)
	}
	args := []string{"agent", "-bind", "127.0.0.1", "-client", "127.0.0.1", "-log-level", "warn", "-node", "fibril-test-" + strconv.Itoa(ports[0]), "-hcl", hcl}
	if o.Persistent {
		args = append(args, "-server", "-bootstrap-expect", "1", "-data-dir", filepath.Join(dir, "data"), "-ui=false")
	} else {
		args = append(args, "-dev")
	}
	a := &Agent{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), TLS: files, t: t, bin: bin, args: args, logPath: filepath.Join(dir, "agent.log")}
	if o.TLS {
		a.HTTPSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(https))
	}
	a.start()
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(a.logPath); err == nil && len(b) > 0 {
				t.Logf("consul agent log (last 4 KiB):\n%s", tail(b, 4096))
			}
		}
	})
	return a
}

func (a *Agent) start() {
	a.t.Helper()
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		a.t.Fatal(err)
	}
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR=", "CONSUL_HTTP_TOKEN=")
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		a.t.Fatalf("start consul agent: %v", err)
	}
	a.cmd = cmd
	a.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(a.exited)
	}()
	if err := a.WaitLeader(90 * time.Second); err != nil {
		b, _ := os.ReadFile(a.logPath)
		a.Kill()
		a.t.Fatalf("consul agent on %s: %v\n%s", a.Addr, err, tail(b, 4096))
	}
}

// WaitLeader waits until the agent answers and its cluster has a leader.
func (a *Agent) WaitLeader(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
			return fmt.Errorf("agent exited")
		default:
		}
		var leader string
		if last = a.get("/v1/status/leader", &leader); last == nil {
			if leader != "" {
				// A leader is elected; the KV store answers once the
				// agent has synced its own node (ACL bootstrap included).
				if last = a.get("/v1/kv/fibril-test-ready?consistent", nil); last == nil || strings.Contains(last.Error(), "404") {
					return nil
				}
			} else {
				last = fmt.Errorf("no leader yet")
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", d, last)
}

// get reads an HTTP API path with the management token.
func (a *Agent) get(path string, out any) error { return a.do(http.MethodGet, path, nil, out) }

// Put writes body (JSON) to an HTTP API path with the management token
// and decodes the answer into out (nil: ignored).
func (a *Agent) Put(path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return a.do(http.MethodPut, path, b, out)
}

// do sends one request to the agent's HTTP API with the management token
// and decodes a 200 answer into out (nil: ignored).
func (a *Agent) do(method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+a.Addr+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Consul-Token", ManagementToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(buf.String()))
	}
	if out != nil {
		return json.Unmarshal(buf.Bytes(), out)
	}
	return nil
}

// Token creates an ACL token carrying a new policy with rules (HCL) and
// returns its secret; rules "" gives a token without any policy.
func (a *Agent) Token(t testing.TB, name, rules string) string {
	t.Helper()
	var tok struct{ SecretID string }
	body := map[string]any{"Description": name}
	if rules != "" {
		var pol struct{ ID string }
		if err := a.Put("/v1/acl/policy", map[string]any{"Name": name, "Rules": rules}, &pol); err != nil {
			t.Fatal(err)
		}
		body["Policies"] = []map[string]string{{"ID": pol.ID}}
	}
	if err := a.Put("/v1/acl/token", body, &tok); err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

// Get reads an HTTP API path (with the management token when ACLs are on)
// and decodes its JSON answer into out.
func (a *Agent) Get(path string, out any) error { return a.get(path, out) }

// PID is the agent's process id (0 when stopped).
func (a *Agent) PID() int {
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// Stop ends the agent with SIGTERM (SIGKILL after 10 s) and waits.
func (a *Agent) Stop() { a.signal(syscall.SIGTERM, 10*time.Second) }

// Kill ends the agent with SIGKILL and waits.
func (a *Agent) Kill() { a.signal(syscall.SIGKILL, 0) }

func (a *Agent) signal(sig syscall.Signal, grace time.Duration) {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(sig)
	select {
	case <-a.exited:
	case <-time.After(grace):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
	a.cmd = nil
}

// Restart stops the agent and starts it again on the same ports (and,
// when Persistent, the same data directory), waiting for a leader.
func (a *Agent) Restart() {
	a.t.Helper()
	a.Stop()
	a.start()
}

// freePorts returns n ports for an agent (testkit.FreePort: below the
// kernel's ephemeral range, so no other process takes one before the
// agent binds it).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = testkit.FreePort(t)
	}
	return out
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
