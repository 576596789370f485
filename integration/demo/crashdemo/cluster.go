package crashdemo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node ids, as in contrib/swarm/compose.yaml.
const (
	publicID   = "broker-public"
	private1ID = "broker-private-1"
	private2ID = "broker-private-2"
)

// node is one broker process of the demo's cluster, on fixed loopback
// ports that stay the same across its restarts.
type node struct {
	id                  string
	private             bool
	client, admin, raft string // 127.0.0.1:port
	dataDir, logPath    string
	args, env           []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	exitErr error
}

// cluster is the demo's three brokers: one public, two private, on embedded
// raft, launched by this process (it owns their PIDs).
type cluster struct {
	bin   string
	nodes []*node
	hc    *http.Client
}

// loopbackDial refuses every address outside 127.0.0.0/8 and ::1: the demo
// only ever talks to brokers on this machine.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dial %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("dial %q refused: the demo only dials 127.0.0.0/8 and ::1", addr)
	}
	return nil
}

// newCluster lays out the three brokers (ports, directories, flags) without
// starting them. The flags follow the Compose example: one raft voter per
// broker with bootstrap_expect 3, a cluster secret file, the two private
// brokers with broker.visibility=private, the built-in loopback login off
// and one application user, seeded by the public broker, from a password
// file. Heartbeat and liveness TTL are shortened so that a dead owner is
// noticed within seconds.
func newCluster(cfg *Config, work string) (*cluster, error) {
	secret := filepath.Join(work, "cluster.secret")
	if err := os.WriteFile(secret, []byte(randomHex(24)+"\n"), 0o600); err != nil {
		return nil, err
	}
	passwordFile := filepath.Join(work, "app.password")
	if err := os.WriteFile(passwordFile, []byte(cfg.password), 0o600); err != nil {
		return nil, err
	}
	c := &cluster{
		bin: cfg.FibrilBin,
		hc: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{DialContext: loopbackDial, DisableKeepAlives: true},
		},
	}
	port := func() (string, error) {
		p, err := cfg.FreePort()
		return "127.0.0.1:" + strconv.Itoa(p), err
	}
	var peers []string
	for _, id := range []string{publicID, private1ID, private2ID} {
		n := &node{id: id, private: id != publicID}
		for _, a := range []*string{&n.client, &n.admin, &n.raft} {
			addr, err := port()
			if err != nil {
				return nil, fmt.Errorf("a free port for %s: %w", id, err)
			}
			*a = addr
		}
		dir := filepath.Join(work, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		n.dataDir, n.logPath = filepath.Join(dir, "data"), filepath.Join(dir, "broker.log")
		c.nodes = append(c.nodes, n)
		peers = append(peers, id+"="+n.raft)
	}
	for _, n := range c.nodes {
		n.args = []string{
			"--config=",
			"--server.data_dir=" + n.dataDir,
			"--broker.listener.bind=" + n.client,
			"--broker.peer_advertise=" + n.client,
			"--admin.listener.bind=" + n.admin,
			"--coordination.backend=raft",
			"--coordination.node_id=" + n.id,
			"--coordination.secret_path=" + secret,
			"--coordination.raft.listen=" + n.raft,
			"--coordination.raft.peers=" + strings.Join(peers, ","),
			"--coordination.raft.bootstrap_expect=3",
			"--coordination.heartbeat_interval_ms=" + strconv.Itoa(cfg.HeartbeatMS),
			"--coordination.liveness_ttl_ms=" + strconv.Itoa(cfg.LivenessTTLMS),
			"--auth.allow_default_loopback=false",
			"--log.level=info",
		}
		n.env = cleanEnv()
		if n.private {
			n.args = append(n.args, "--broker.visibility=private")
		} else {
			n.env = append(n.env, "FIBRIL_AUTH_USERNAME="+cfg.username, "FIBRIL_AUTH_PASSWORD_FILE="+passwordFile)
		}
	}
	return c, nil
}

// cleanEnv is this process's environment without FIBRIL_* variables, so
// that only the demo's flags configure the brokers.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FIBRIL_") {
			env = append(env, kv)
		}
	}
	return env
}

func (c *cluster) node(id string) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (c *cluster) public() *node { return c.nodes[0] }

// start launches n's process on its data directory; its output goes to its
// log file. The child gets SIGKILL from the kernel if this process dies
// (dieWithParent), so a demo that is killed leaves no broker behind.
func (c *cluster) start(n *node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s is already running", n.id)
		}
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, n.args...)
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.exitErr = err
		n.mu.Unlock()
		close(done)
	}()
	return nil
}

func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

func (n *node) exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.done
}

func (n *node) running() bool {
	d := n.exited()
	if d == nil {
		return false
	}
	select {
	case <-d:
		return false
	default:
		return true
	}
}

// exitStatus describes how the last process ended.
func (n *node) exitStatus() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exitErr == nil {
		return "exit status 0"
	}
	return n.exitErr.Error()
}

// signal sends sig to n's process, by PID, and waits (at most limit) for it
// to exit.
func (n *node) signal(sig syscall.Signal, limit time.Duration) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("%s was never started", n.id)
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s (pid %d): %v: %w", n.id, cmd.Process.Pid, sig, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("%s (pid %d) still running %v after %v", n.id, cmd.Process.Pid, limit, sig)
	}
}

// kill is a crash: SIGKILL to the broker's PID.
func (n *node) kill() error { return n.signal(syscall.SIGKILL, 30*time.Second) }

// stopAll ends every broker still running: SIGTERM, then SIGKILL for any
// that has not exited after 15 s.
func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		wg.Go(func() {
			if err := n.signal(syscall.SIGTERM, 15*time.Second); err != nil {
				_ = n.kill()
			}
		})
	}
	wg.Wait()
}

// waitReady waits until n's /readyz answers 200, at most limit; it fails at
// once if the process exits.
func (c *cluster) waitReady(ctx context.Context, n *node, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if code, _, err := c.get(ctx, n, "/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-n.exited():
			return fmt.Errorf("%s exited during startup (%s); log: %s", n.id, n.exitStatus(), n.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v; log: %s", n.id, limit, n.logPath)
		}
	}
}

// get fetches path from n's admin listener.
func (c *cluster) get(ctx context.Context, n *node, path string) (int, []byte, error) {
	return c.do(ctx, http.MethodGet, n, path, nil)
}

func (c *cluster) do(ctx context.Context, method string, n *node, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.admin+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, out, err
}

// topologyView is the part of GET /admin/api/topology the demo reads.
type topologyView struct {
	Nodes []struct {
		ID         string `json:"id"`
		Live       bool   `json:"live"`
		Controller bool   `json:"controller"`
	} `json:"nodes"`
	Partitions []partitionView `json:"partitions"`
}

type partitionView struct {
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
	OwnerLive bool   `json:"owner_live"`
	Followers []struct {
		Node   string `json:"node"`
		InSync bool   `json:"in_sync"`
	} `json:"followers"`
}

// topology reads n's view of the cluster.
func (c *cluster) topology(ctx context.Context, n *node) (*topologyView, error) {
	code, body, err := c.get(ctx, n, "/admin/api/topology")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s topology: %d %s", n.id, code, strings.TrimSpace(string(body)))
	}
	var v topologyView
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("%s topology: %w", n.id, err)
	}
	return &v, nil
}

// anyTopology reads the topology from the first broker that answers, the
// public one first: the operator's view, which outlives any one broker.
func (c *cluster) anyTopology(ctx context.Context) (*topologyView, string, error) {
	var errs []error
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		v, err := c.topology(ctx, n)
		if err == nil {
			return v, n.id, nil
		}
		errs = append(errs, err)
	}
	return nil, "", errors.Join(append(errs, errors.New("no broker answered"))...)
}

// waitPlacing waits until the public broker sees all three brokers live and
// some broker runs the placement controller, so that a declaration is
// placed at once (as `fibril dev` waits before "cluster ready").
func (c *cluster) waitPlacing(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if c.placing(ctx) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster does not place partitions after %v", limit)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (c *cluster) placing(ctx context.Context) bool {
	v, err := c.topology(ctx, c.public())
	if err != nil {
		return false
	}
	live := map[string]bool{}
	for _, m := range v.Nodes {
		live[m.ID] = m.Live
	}
	for _, n := range c.nodes {
		if !live[n.id] {
			return false
		}
	}
	for _, n := range c.nodes {
		w, err := c.topology(ctx, n)
		if err != nil {
			return false
		}
		for _, m := range w.Nodes {
			if m.ID == n.id && m.Controller {
				return true
			}
		}
	}
	return false
}

// setRuntime sets one runtime setting (group.key) through the public
// broker's admin API and waits until every broker applied it.
func (c *cluster) setRuntime(ctx context.Context, group, key string, value any, limit time.Duration) error {
	code, body, err := c.get(ctx, c.public(), "/admin/api/runtime-settings")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("runtime settings: %d %s %v", code, body, err)
	}
	var view struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(body, &view); err != nil {
		return err
	}
	g, ok := view.Settings[group].(map[string]any)
	if !ok {
		return fmt.Errorf("runtime settings have no group %q", group)
	}
	g[key] = value
	put, _ := json.Marshal(map[string]any{"expected_version": view.Version, "settings": view.Settings})
	if code, body, err := c.do(ctx, http.MethodPut, c.public(), "/admin/api/runtime-settings", put); err != nil || code != http.StatusOK {
		return fmt.Errorf("put runtime settings: %d %s %v", code, body, err)
	}
	want, _ := json.Marshal(value)
	needle := fmt.Sprintf("%q:%s", key, want)
	deadline := time.Now().Add(limit)
	for {
		applied := 0
		for _, n := range c.nodes {
			if _, body, err := c.get(ctx, n, "/admin/api/runtime-settings"); err == nil && bytes.Contains(body, []byte(needle)) {
				applied++
			}
		}
		if applied == len(c.nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s.%s not applied by every broker after %v", group, key, limit)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
