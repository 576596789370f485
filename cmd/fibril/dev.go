package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// devNode is one broker of a `fibril dev` cluster.
type devNode struct {
	id                  string
	client, admin, raft string // loopback host:port
	dir                 string
	cmd                 *exec.Cmd
	exited              chan struct{}
	private             bool // broker.visibility = private
}

// runDev is `fibril dev`: a local cluster of N brokers on loopback ports,
// each a child process of this binary on embedded raft, for trying the
// cluster out and for tests. It prints one line per broker (node id, role,
// client address, admin URL) and "cluster ready" once every broker is
// ready and a declaration would be placed at once (waitDevReady); a
// broker that exits is reported and can be started again while the
// others run (superviseDev); it stops them all gracefully when ctx ends
// (Ctrl-C).
func runDev(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "restart" {
		return runDevRestart(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("fibril dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 3, "number of brokers")
	dir := fs.String("dir", "", "directory for the brokers' data and logs (default: a new temporary directory, removed at exit)")
	clientPort := fs.Int("client-port", 9876, "client port of the first broker; broker i uses this + i")
	adminPort := fs.Int("admin-port", 8081, "admin port of the first broker; broker i uses this + i")
	raftPort := fs.Int("raft-port", 7946, "raft port of the first broker; broker i uses this + i")
	restartAfter := fs.Duration("restart-after", 0, "start a broker that exited again by itself after this long (0: only on request)")
	backend := fs.String("backend", "raft", "coordination backend: raft, consul, or a plugin's name (--coordination is the same flag)")
	fs.StringVar(backend, "coordination", "raft", "coordination backend (same as --backend)")
	consulAddr := fs.String("consul-addr", "127.0.0.1:8500", "Consul agent the brokers use with --coordination consul")
	consulPrefix := fs.String("consul-prefix", "", "Consul KV prefix with --coordination consul (default: fibril-dev/ and a hash of --dir, so a restarted cluster finds its keys and two dev clusters never share them)")
	private := fs.Int("private", 0, "how many of the brokers (the last ones) are private: clients reach their partitions only through the public ones, which forward")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fibril dev [--nodes N] [--private K] [--dir DIR] [--client-port P] [--admin-port P] [--raft-port P] [--coordination raft|consul [--consul-addr HOST:PORT]] [-- broker flags...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *nodes < 1 || *nodes > 64 {
		fmt.Fprintln(stderr, "fibril dev: --nodes must be between 1 and 64")
		return exitUsage
	}
	if *private < 0 || *private >= *nodes {
		fmt.Fprintln(stderr, "fibril dev: --private must be between 0 and --nodes - 1 (at least one broker must be public)")
		return exitUsage
	}
	extra := fs.Args() // passed to every broker
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "fibril dev:", err)
		return exitError
	}
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "fibril-dev-"); err != nil {
			fmt.Fprintln(stderr, "fibril dev:", err)
			return exitError
		}
		defer os.RemoveAll(root)
	} else if err := os.MkdirAll(root, 0o700); err != nil {
		fmt.Fprintln(stderr, "fibril dev:", err)
		return exitError
	}
	secretPath, err := devSecret(root)
	if err != nil {
		fmt.Fprintln(stderr, "fibril dev:", err)
		return exitError
	}
	cluster := make([]*devNode, *nodes)
	var peers []string
	for i := range cluster {
		n := &devNode{
			id:      fmt.Sprintf("node-%d", i+1),
			client:  "127.0.0.1:" + strconv.Itoa(*clientPort+i),
			admin:   "127.0.0.1:" + strconv.Itoa(*adminPort+i),
			raft:    "127.0.0.1:" + strconv.Itoa(*raftPort+i),
			exited:  make(chan struct{}),
			private: i >= *nodes-*private,
		}
		n.dir = filepath.Join(root, n.id)
		cluster[i] = n
		peers = append(peers, n.id+"="+n.raft)
	}
	coord := func(n *devNode) []string {
		return []string{
			"--coordination.backend=" + *backend,
			"--coordination.raft.listen=" + n.raft,
			"--coordination.raft.peers=" + strings.Join(peers, ","),
			"--coordination.raft.bootstrap_expect=" + strconv.Itoa(len(peers)),
		}
	}
	if *backend == "consul" {
		prefix := *consulPrefix
		if prefix == "" {
			abs, _ := filepath.Abs(root)
			sum := sha256.Sum256([]byte(abs))
			prefix = "fibril-dev/" + hex.EncodeToString(sum[:4])
		}
		for _, n := range cluster {
			n.raft = "" // no raft port to bind
		}
		coord = func(*devNode) []string {
			return []string{"--coordination.backend=consul", "--coordination.consul.addresses=" + *consulAddr, "--coordination.consul.prefix=" + prefix}
		}
	}
	if err := devPortsFree(cluster); err != nil {
		fmt.Fprintln(stderr, "fibril dev:", err)
		return exitUsage
	}
	for _, n := range cluster {
		if err := n.start(exe, coord(n), secretPath, extra, environ); err != nil {
			fmt.Fprintln(stderr, "fibril dev:", err)
			stopDev(cluster)
			return exitError
		}
	}
	if err := waitDevReady(ctx, cluster); err != nil {
		fmt.Fprintln(stderr, "fibril dev:", err)
		for _, n := range cluster {
			fmt.Fprintf(stderr, "  %s log: %s\n", n.id, filepath.Join(n.dir, "broker.log"))
		}
		stopDev(cluster)
		return exitError
	}
	for _, n := range cluster {
		role, note := "public", ""
		if n.private {
			role, note = "private", "  (peers only: clients reach it through a public broker)"
		}
		fmt.Fprintf(stdout, "%s  %s  client %s  admin http://%s%s\n", n.id, role, n.client, n.admin, note)
	}
	fmt.Fprintf(stdout, "cluster ready: %d brokers, data and logs in %s; Ctrl-C stops them\n", len(cluster), root)
	superviseDev(ctx, cluster, root, func(n *devNode) error {
		return n.start(exe, coord(n), secretPath, extra, environ)
	}, *restartAfter, os.Stdin, stdout, stderr)
	stopDev(cluster)
	return exitOK
}

func (n *devNode) start(exe string, coord []string, secretPath string, extra, environ []string) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(n.dir, "broker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := []string{
		"--server.data_dir=" + filepath.Join(n.dir, "data"),
		"--broker.listener.bind=" + n.client,
		"--broker.peer_advertise=" + n.client,
		"--admin.listener.bind=" + n.admin,
		"--coordination.node_id=" + n.id,
		"--coordination.secret_path=" + secretPath,
	}
	args = append(args, coord...)
	if n.private {
		args = append(args, "--broker.visibility=private")
	}
	n.cmd = exec.Command(exe, append(args, extra...)...)
	n.cmd.Env = devEnviron(environ)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.exited = exited
	// Its PID, for whoever wants to kill -9 this one broker.
	_ = os.WriteFile(filepath.Join(n.dir, "pid"), []byte(strconv.Itoa(n.cmd.Process.Pid)+"\n"), 0o600)
	go func() {
		_ = n.cmd.Wait()
		logf.Close()
		close(exited)
	}()
	return nil
}

// devPortsFree checks every port the cluster will bind before starting
// anything: a port already taken — another dev cluster, a broker — would
// otherwise answer the readiness probe in place of the broker that failed
// to bind it.
func devPortsFree(cluster []*devNode) error {
	for _, n := range cluster {
		for _, p := range []struct{ addr, flag string }{{n.client, "--client-port"}, {n.admin, "--admin-port"}, {n.raft, "--raft-port"}} {
			if p.addr == "" {
				continue
			}
			l, err := net.Listen("tcp", p.addr)
			if err != nil {
				return fmt.Errorf("%s cannot use %s (%v); choose other ports with %s", n.id, p.addr, err, p.flag)
			}
			l.Close()
		}
	}
	return nil
}

// devEnviron keeps the caller's environment minus FIBRIL_* settings that
// would fight the per-node flags (a developer's FIBRIL_DATA_DIR, say).
func devEnviron(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if strings.HasPrefix(kv, "FIBRIL_") && !strings.HasPrefix(kv, "FIBRIL_LOG_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// devSecret makes the cluster secret file every dev broker reads.
func devSecret(root string) (string, error) {
	path := filepath.Join(root, "cluster.secret")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	return path, os.WriteFile(path, []byte(hex.EncodeToString(b[:])+"\n"), 0o600)
}

// waitDevReady waits (bounded) until every broker's /readyz answers 200
// and then until a declaration would be placed (devPlacementReady): a
// broker is ready as soon as it holds its lease, but a queue declared
// then would wait for the placement controller and for the other nodes to
// be seen live, so "cluster ready" waits for those too.
func waitDevReady(ctx context.Context, cluster []*devNode) error {
	deadline := time.Now().Add(60 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	wait := func(what string, ok func(*devNode) bool) error {
		for _, n := range cluster {
			for !ok(n) {
				select {
				case <-n.exited:
					return fmt.Errorf("%s exited during startup", n.id)
				case <-ctx.Done():
					return ctx.Err()
				default:
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s: %s after 60 s", n.id, what)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		return nil
	}
	if err := wait("not ready", func(n *devNode) bool {
		resp, err := hc.Get("http://" + n.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return err
	}
	return wait("the cluster does not place partitions yet (no placement controller, or not every broker live in its view)",
		func(n *devNode) bool { return devPlacementReady(hc, n, cluster) })
}

// devPlacementReady reports whether n's view of the cluster would place
// a declaration at once, from its admin topology API: every dev broker is
// a live, non-draining member, and the node running the placement
// controller has been seen (a node flags only itself as controller, so
// every broker's answer is consulted until one says so). A topology API
// the dev process may not read (admin authentication or admin TLS turned
// on through the extra broker flags) cannot tell, and is not waited for.
func devPlacementReady(hc *http.Client, n *devNode, cluster []*devNode) bool {
	view, ok := devTopology(hc, n)
	if !ok {
		return false
	}
	if view == nil {
		return true // cannot tell: readiness alone
	}
	live := map[string]bool{}
	for _, m := range view.Nodes {
		if m.Live && !m.Draining {
			live[m.ID] = true
		}
	}
	for _, m := range cluster {
		if !live[m.id] {
			return false
		}
	}
	for _, m := range cluster {
		v, ok := devTopology(hc, m)
		if !ok {
			return false
		}
		if v == nil {
			return true
		}
		for _, node := range v.Nodes {
			if node.ID == m.id && node.Controller {
				return true
			}
		}
	}
	return false
}

// devTopologyView is the part of GET /admin/api/topology dev reads.
type devTopologyView struct {
	Nodes []struct {
		ID         string `json:"id"`
		Live       bool   `json:"live"`
		Draining   bool   `json:"draining"`
		Controller bool   `json:"controller"`
	} `json:"nodes"`
}

// devTopology reads n's topology view. ok is false while it cannot be
// read yet; a nil view with ok means it will not be readable (401, 403:
// admin authentication is on; or the admin listener speaks TLS).
func devTopology(hc *http.Client, n *devNode) (view *devTopologyView, ok bool) {
	resp, err := hc.Get("http://" + n.admin + "/admin/api/topology")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
		return nil, true
	default:
		return nil, false
	}
	var v devTopologyView
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&v); err != nil {
		return nil, false
	}
	return &v, true
}

// stopDev sends SIGTERM to every broker it started (by PID) and waits for
// them, killing any that has not exited after 20 s.
func stopDev(cluster []*devNode) {
	for _, n := range cluster {
		if n.cmd != nil && n.cmd.Process != nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	timeout := time.After(20 * time.Second)
	for _, n := range cluster {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		select {
		case <-n.exited:
		case <-timeout:
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	}
}
