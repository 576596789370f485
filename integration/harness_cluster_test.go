package integration

// The cluster harness: raft clusters of broker processes (each node on
// ports of its own), their topology as the admin API shows it, the
// private-node cluster, and out-of-process plugins built once per run.
// Moved unchanged from the scenario files that first needed them.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// Cluster timing in these tests: a heartbeat every 250 ms and a 1.5 s
// liveness TTL. FIBRIL_TEST_DEFAULT_TIMING=1 runs them with the defaults
// (1 s, 4 s) instead — how the dead-owner detection time is measured.
var (
	testHeartbeatMS = 250
	testTTLMS       = 1500
	testTTL         = time.Duration(testTTLMS) * time.Millisecond
)

func init() {
	if os.Getenv("FIBRIL_TEST_DEFAULT_TIMING") == "1" {
		testHeartbeatMS, testTTLMS = 1000, 4000
		testTTL = time.Duration(testTTLMS) * time.Millisecond
	}
}

type clusterNode struct {
	*broker
	id, raft string
	args     []string
}

type raftCluster struct {
	t      *testing.T
	nodes  []*clusterNode
	secret string // the cluster secret file every node reads
}

// freePort is testkit.FreePort (ports below the ephemeral range, never
// handed out twice in this process).
func freePort(t testing.TB) int {
	t.Helper()
	return testkit.FreePort(t)
}

// startRaftCluster starts n brokers forming one raft cluster and waits
// until every one is ready. extra flags go to every node.
func startRaftCluster(t *testing.T, n int, extra ...string) *raftCluster {
	t.Helper()
	return startRaftClusterWith(t, n, nil, extra...)
}

// startRaftClusterWith is startRaftCluster with flags for node i (after
// extra, so they win).
func startRaftClusterWith(t *testing.T, n int, perNode func(i int) []string, extra ...string) *raftCluster {
	t.Helper()
	return startClusterOn(t, raftBackend, n, perNode, extra...)
}

// backend gives each node of a new cluster its coordination flags (the
// node's id and address fields are set; args is not yet).
type backend func(t *testing.T, nodes []*clusterNode) [][]string

// raftBackend: every node a voter of one embedded raft cluster, on a raft
// port of its own.
func raftBackend(t *testing.T, nodes []*clusterNode) [][]string {
	var peers []string
	for _, nd := range nodes {
		nd.raft = "127.0.0.1:" + strconv.Itoa(freePort(t))
		peers = append(peers, nd.id+"="+nd.raft)
	}
	out := make([][]string, len(nodes))
	for i, nd := range nodes {
		out[i] = []string{
			"--coordination.backend=raft",
			"--coordination.raft.listen=" + nd.raft,
			"--coordination.raft.peers=" + strings.Join(peers, ","),
			"--coordination.raft.bootstrap_expect=" + strconv.Itoa(len(nodes)),
		}
	}
	return out
}

// startClusterOn starts n brokers coordinating through be and waits until
// every one is ready; extra flags go to every node, then perNode(i).
func startClusterOn(t *testing.T, be backend, n int, perNode func(i int) []string, extra ...string) *raftCluster {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(secret, []byte("integration-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := &raftCluster{t: t, secret: secret}
	for i := range n {
		rc.nodes = append(rc.nodes, &clusterNode{id: fmt.Sprintf("node-%d", i+1)})
	}
	coordination := be(t, rc.nodes)
	for i, nd := range rc.nodes {
		nd.args = append(append([]string{
			"--coordination.node_id=" + nd.id,
			"--coordination.secret_path=" + secret,
			"--coordination.heartbeat_interval_ms=" + strconv.Itoa(testHeartbeatMS),
			"--coordination.liveness_ttl_ms=" + strconv.Itoa(testTTLMS),
		}, coordination[i]...), extra...)
		if perNode != nil {
			nd.args = append(nd.args, perNode(i)...)
		}
		nd.broker = launchBroker(t, t.TempDir(), nd.args...)
	}
	for _, nd := range rc.nodes {
		nd.waitReady()
	}
	for _, nd := range rc.nodes {
		testkit.Eventually(t, waitTimeout, nd.id+" ready", func() bool {
			code, _ := httpGet(t, nd.Admin, "/readyz", nil)
			return code == 200
		})
	}
	return rc
}

// restart starts a stopped node again on its data directory and raft port.
func (rc *raftCluster) restart(nd *clusterNode) {
	rc.t.Helper()
	nd.broker = nd.broker.restart()
}

// topologyView is GET /admin/api/topology.
type topologyView struct {
	Nodes []struct {
		ID         string `json:"id"`
		Live       bool   `json:"live"`
		Draining   bool   `json:"draining"`
		Controller bool   `json:"controller"`
	} `json:"nodes"`
	Partitions []partitionView `json:"partitions"`
}

// partitionView is one partition of GET /admin/api/topology.
type partitionView struct {
	Topic     string   `json:"topic"`
	Partition uint32   `json:"partition"`
	Owner     string   `json:"owner"`
	Epoch     uint64   `json:"epoch"`
	Written   bool     `json:"written"`
	OwnerLive bool     `json:"owner_live"`
	Endpoints []string `json:"client_endpoints"`
	InSync    []string `json:"in_sync"`
}

// setRuntime changes one runtime setting (group.key) through nd's admin
// API and waits until every node of the cluster applied it.
func (rc *raftCluster) setRuntime(nd *clusterNode, group, key string, value any) {
	t := rc.t
	t.Helper()
	code, body := httpGet(t, nd.Admin, "/admin/api/runtime-settings", nil)
	if code != 200 {
		t.Fatalf("settings: %d %s", code, body)
	}
	var view struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	view.Settings[group].(map[string]any)[key] = value
	put, _ := json.Marshal(map[string]any{"expected_version": view.Version, "settings": view.Settings})
	if code, body := httpDo(t, "PUT", nd.Admin, "/admin/api/runtime-settings", string(put)); code != 200 {
		t.Fatalf("put settings: %d %s", code, body)
	}
	want, _ := json.Marshal(value)
	testkit.Eventually(t, waitTimeout, "every node applies "+group+"."+key, func() bool {
		for _, n := range rc.nodes {
			_, body := httpGet(t, n.Admin, "/admin/api/runtime-settings", nil)
			if !strings.Contains(body, fmt.Sprintf("%q:%s", key, want)) {
				return false
			}
		}
		return true
	})
}

func (rc *raftCluster) topology(nd *clusterNode) topologyView {
	rc.t.Helper()
	code, body := httpGet(rc.t, nd.Admin, "/admin/api/topology", nil)
	if code != 200 {
		rc.t.Fatalf("%s topology: %d %s", nd.id, code, body)
	}
	var v topologyView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		rc.t.Fatal(err)
	}
	return v
}

func (rc *raftCluster) node(id string) *clusterNode {
	for _, nd := range rc.nodes {
		if nd.id == id {
			return nd
		}
	}
	rc.t.Fatalf("no node %s", id)
	return nil
}

// placed waits until every partition of topic has a live owner, as nd
// sees it, and returns partition → owner.
func (rc *raftCluster) placed(nd *clusterNode, topic string, count int) map[uint32]string {
	rc.t.Helper()
	var owners map[uint32]string
	testkit.Eventually(rc.t, waitTimeout, topic+" placed", func() bool {
		owners = map[uint32]string{}
		for _, p := range rc.topology(nd).Partitions {
			if p.Topic == topic && p.Owner != "" && p.OwnerLive {
				owners[p.Partition] = p.Owner
			}
		}
		return len(owners) == count
	})
	return owners
}

func brokerCode(err error) int {
	var be *client.Error
	if errors.As(err, &be) {
		return int(be.Code)
	}
	return 0
}

// ownerOf returns the node owning partition p of topic, as nd sees it.
func (rc *raftCluster) ownerOf(nd *clusterNode, topic string, p uint32) string {
	for _, x := range rc.topology(nd).Partitions {
		if x.Topic == topic && x.Partition == p {
			return x.Owner
		}
	}
	return ""
}

// pluginBuild is one plugin binary built once per test run.
type pluginBuild struct {
	once sync.Once
	path string
	err  error
}

var pluginBuilds sync.Map // package path → *pluginBuild

// pluginCatalog builds the plugin binary of package pkg (once per run),
// copies it into a directory of the test's — a test may change its copy —
// and writes a catalog naming it kind/name with its sha256.
func pluginCatalog(t *testing.T, pkg, kind, name string) (catalog, binary string) {
	t.Helper()
	v, _ := pluginBuilds.LoadOrStore(pkg, &pluginBuild{})
	pb := v.(*pluginBuild)
	pb.once.Do(func() {
		dir, err := os.MkdirTemp("", "fibril-plugin-")
		if err != nil {
			pb.err = err
			return
		}
		pb.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", pb.path, pkg)
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			pb.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	if pb.err != nil {
		t.Fatal(pb.err)
	}
	dir := t.TempDir()
	binary = filepath.Join(dir, filepath.Base(pkg))
	data, err := os.ReadFile(pb.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(binary, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	catalog = filepath.Join(dir, "plugins.toml")
	entry := fmt.Sprintf("[[plugin]]\nkind = %q\nname = %q\nversion = \"0.1.0\"\ncommand = %q\nsha256 = %q\n",
		kind, name, binary, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(catalog, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	return catalog, binary
}

// pluginPID finds the coordination plugin process the broker started (a
// child of the broker's own process).
func pluginPID(t *testing.T, b *broker) int {
	t.Helper()
	parent := strconv.Itoa(b.cmd.Process.Pid)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc: cannot find the plugin process")
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		rp := strings.LastIndexByte(s, ')')
		if rp < 0 || !strings.Contains(s[:rp], "fibril-coord") {
			continue
		}
		if f := strings.Fields(s[rp+1:]); len(f) > 1 && f[1] == parent {
			return pid
		}
	}
	return 0
}

type privateCluster struct {
	*raftCluster
	forbidden map[string]bool // addresses the client must never dial
}

// startPrivateCluster starts node-1 public and node-2, node-3 private, each
// with broker.peer_advertise set explicitly, over transport tr.
func startPrivateCluster(t *testing.T, tr string, flags ...string) *privateCluster {
	t.Helper()
	return startPrivateClusterOn(t, raftBackend, tr, flags...)
}

// startPrivateClusterOn is startPrivateCluster on another backend.
func startPrivateClusterOn(t *testing.T, be backend, tr string, flags ...string) *privateCluster {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	extra := append([]string{"--tls.enabled", "--tls.auto_self_signed", "--tls.peer_ca_path=" + ca, "--tls.admin_enabled=false",
		"--transport.backend=" + tr}, flags...)
	forbidden := map[string]bool{}
	rc := startClusterOn(t, be, 3, func(i int) []string {
		bind := "127.0.0.1:" + strconv.Itoa(freePort(t))
		flags := []string{"--broker.listener.bind=" + bind, "--broker.peer_advertise=" + bind}
		if i > 0 {
			nowhere := "127.0.0.1:" + strconv.Itoa(freePort(t)) // nothing listens here
			forbidden[bind], forbidden[nowhere] = true, true
			flags = append(flags, "--broker.visibility=private", "--broker.listener.advertise="+nowhere)
		}
		return flags
	}, extra...)
	return &privateCluster{raftCluster: rc, forbidden: forbidden}
}

// client dials the public broker; its dialer fails the test on any attempt
// to reach a private broker. opts apply first (the guarded dialer wraps
// whatever Dial they leave).
func (pc *privateCluster) client(t *testing.T, opts ...clientOpt) *client.Client {
	t.Helper()
	return newClient(t, pc.nodes[0].Addr, append(opts, func(o *client.Options) {
		o.TLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // each broker has its own self-signed CA; this test is about routing
		inner := o.Dial
		o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if pc.forbidden[addr] {
				t.Errorf("the client dialled the private broker address %s", addr)
				return nil, errors.New("private broker address")
			}
			return inner(ctx, network, addr)
		}
	})...)
}
