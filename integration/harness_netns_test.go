package integration

// Network namespaces, for the tests that cut the network between brokers
// (isolation_test.go, faults_test.go). A lab is one namespace per host
// (198.18.n.2, .3, …) and the root namespace, where the test process is
// (198.18.n.1/24), joined by a bridge with a veth pair per host, so hosts
// reach each other at layer 2 and no host sysctl changes — or, for delay
// and loss, by a packet wire through the test process
// (harness_wire_test.go). Brokers run inside with `ip netns exec` (which
// execs the broker: the PID is the broker's). A cut is a pair of blackhole
// routes, one in each host's namespace; the test process still reaches
// every host. Addresses come from 198.18.0.0/15 only, and the test's
// dialer admits exactly the listeners the lab assigned.
//
// Everything a lab creates carries its random id in its name and is removed
// at cleanup; a namespace or link left by a test process that died without
// cleaning up (its PID is in the names and the bridge's alias) is removed
// by the next lab.
//
// Linux, root and ip(8) (iproute2) only: otherwise the test is skipped, or
// fails when FIBRIL_REQUIRE_NETNS=1 (CI sets it).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// labNS prefixes every namespace a lab creates: labNS<pid>-<id>-<host>.
const labNS = "fibrilit-"

// Fixed ports: every host has an address of its own.
const (
	labBrokerPort = 9876
	labAdminPort  = 8081
	labRaftPort   = 7946
)

// labRange is the only range lab hosts take addresses from (RFC 2544
// benchmarking space: never routed on the internet, never a real peer).
var labRange = netip.MustParsePrefix("198.18.0.0/15")

// requireNetns returns the path of ip(8), or skips t (fails it under
// FIBRIL_REQUIRE_NETNS=1) when the lab cannot be built here.
func requireNetns(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		netnsUnavailable(t, "network namespaces are Linux only (GOOS=%s)", runtime.GOOS)
	}
	if uid := os.Geteuid(); uid != 0 {
		netnsUnavailable(t, "not root (euid %d)", uid)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
			if st, serr := os.Stat(p); serr == nil && st.Mode().IsRegular() {
				return p
			}
		}
		netnsUnavailable(t, "ip(8) not found (install iproute2)")
	}
	return ip
}

func netnsUnavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("FIBRIL_REQUIRE_NETNS") == "1" {
		t.Fatalf("network namespace test cannot run: %s (FIBRIL_REQUIRE_NETNS=1 makes this a failure)", msg)
	}
	t.Skipf("skipped: %s; this test needs Linux, root and ip(8) to build network namespaces (set FIBRIL_REQUIRE_NETNS=1 to fail instead)", msg)
}

// netLab is one namespace per host, joined by a bridge (newNetLab) or a
// packet wire (newWireLab, harness_wire_test.go).
type netLab struct {
	t      *testing.T
	ipPath string
	id     string      // random, in every name
	tag    string      // labNS<pid>: the bridge's alias and the namespaces' prefix
	bridge string      // newNetLab's
	wire   *packetWire // newWireLab's
	subnet netip.Prefix
	gw     netip.Addr // the root namespace's address on the bridge
	hosts  []*labHost

	mu   sync.Mutex
	cuts map[[2]int]bool // blackhole route in host [0]'s namespace towards host [1]
}

type labHost struct {
	i    int
	ns   string
	veth string // on a bridge: the root namespace's end
	peer string // on a bridge: the namespace's end
	addr netip.Addr
}

// ipRun runs ip(8) with args, bounded in time.
func ipRun(ipPath string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ipPath, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (l *netLab) run(args ...string) error {
	_, err := ipRun(l.ipPath, args...)
	return err
}

// must runs ip(8) during the set-up: a failure of the first command is
// "cannot build a lab here" (skip, or fail under FIBRIL_REQUIRE_NETNS=1);
// later ones fail the test.
func (l *netLab) must(first bool, args ...string) {
	l.t.Helper()
	if err := l.run(args...); err != nil {
		if first {
			netnsUnavailable(l.t, "%v", err)
		}
		l.t.Fatal(err)
	}
}

// newNetLab builds a lab of n hosts on a bridge; t's cleanup removes it.
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	l := newLab(t, n)
	l.bridge = "fbr" + l.id // ≤ 15 characters, like every link name here
	l.must(false, "link", "add", "name", l.bridge, "type", "bridge")
	t.Cleanup(func() { l.remove("link", "del", l.bridge) })
	l.must(false, "link", "set", "dev", l.bridge, "alias", l.tag)
	l.must(false, "addr", "add", netip.PrefixFrom(l.gw, 24).String(), "dev", l.bridge)
	l.must(false, "link", "set", "dev", l.bridge, "up")
	for _, h := range l.hosts {
		h.veth = fmt.Sprintf("fv%s%d", l.id, h.i)
		h.peer = fmt.Sprintf("fp%s%d", l.id, h.i)
		l.must(false, "link", "add", "name", h.veth, "type", "veth", "peer", "name", h.peer)
		// Deleting the root end deletes both ends (it runs before the
		// namespace goes, and after the brokers are killed).
		t.Cleanup(func() { l.remove("link", "del", h.veth) })
		l.must(false, "link", "set", "dev", h.veth, "alias", l.tag)
		l.must(false, "link", "set", "dev", h.peer, "netns", h.ns)
		l.must(false, "link", "set", "dev", h.veth, "master", l.bridge)
		l.must(false, "link", "set", "dev", h.veth, "up")
		l.must(false, "-n", h.ns, "addr", "add", netip.PrefixFrom(h.addr, 24).String(), "dev", h.peer)
		l.must(false, "-n", h.ns, "link", "set", "dev", h.peer, "up")
	}
	t.Logf("lab %s: bridge %s %v, hosts %v", l.id, l.bridge, l.subnet, l.addrs())
	return l
}

// newLab makes the namespaces of n hosts (loopback up, nothing joining
// them yet) and picks their addresses; newNetLab and newWireLab join them.
func newLab(t *testing.T, n int) *netLab {
	t.Helper()
	ipPath := requireNetns(t)
	sweepStaleLabs(t, ipPath)
	l := &netLab{
		t:      t,
		ipPath: ipPath,
		id:     fmt.Sprintf("%06x", rand.Uint32()&0xffffff),
		tag:    labNS + strconv.Itoa(os.Getpid()),
		cuts:   map[[2]int]bool{},
	}
	l.subnet = freeLabSubnet(t, ipPath)
	l.gw = l.subnet.Addr().Next()

	// Runs last: nothing of this lab may be left.
	t.Cleanup(l.checkGone)
	addr := l.gw
	for i := range n {
		addr = addr.Next()
		h := &labHost{i: i, ns: fmt.Sprintf("%s-%s-%d", l.tag, l.id, i), addr: addr}
		l.hosts = append(l.hosts, h)
		l.must(i == 0, "netns", "add", h.ns)
		t.Cleanup(func() { l.remove("netns", "del", h.ns) })
		l.must(false, "-n", h.ns, "link", "set", "dev", "lo", "up")
	}
	return l
}

func (l *netLab) addrs() []string {
	var out []string
	for _, h := range l.hosts {
		out = append(out, h.addr.String())
	}
	return out
}

// remove runs a cleanup command; a thing already gone is fine.
func (l *netLab) remove(args ...string) {
	out, err := ipRun(l.ipPath, args...)
	if err != nil && !strings.Contains(out, "Cannot find device") && !strings.Contains(out, "No such file") {
		l.t.Errorf("lab cleanup: %v", err)
	}
}

// checkGone fails the test when a namespace or link of this lab is left.
func (l *netLab) checkGone() {
	ns, err1 := ipRun(l.ipPath, "netns", "list")
	links, err2 := ipRun(l.ipPath, "-o", "link", "show")
	if err := errors.Join(err1, err2); err != nil {
		l.t.Errorf("lab cleanup check: %v", err)
		return
	}
	for _, line := range strings.Split(ns+"\n"+links, "\n") {
		if strings.Contains(line, l.id) {
			l.t.Errorf("lab %s left behind: %s", l.id, strings.TrimSpace(line))
		}
	}
}

// freeLabSubnet picks a random /24 of 198.18.0.0/15 that no route or
// address of the root namespace touches.
func freeLabSubnet(t *testing.T, ipPath string) netip.Prefix {
	t.Helper()
	var used []netip.Prefix
	for _, args := range [][]string{{"-4", "route", "show", "table", "all"}, {"-4", "-o", "addr", "show"}} {
		out, err := ipRun(ipPath, args...)
		if err != nil {
			netnsUnavailable(t, "%v", err)
		}
		for _, f := range strings.Fields(out) {
			if p, err := netip.ParsePrefix(f); err == nil {
				used = append(used, p.Masked())
			} else if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
				used = append(used, netip.PrefixFrom(a, 32))
			}
		}
	}
	base := labRange.Addr().As4()
	for range 64 {
		n := rand.IntN(512)
		b := base
		b[1] += byte(n / 256)
		b[2] = byte(n % 256)
		cand := netip.PrefixFrom(netip.AddrFrom4(b), 24)
		free := true
		for _, u := range used {
			if u.Bits() > 0 && u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free && labRange.Contains(cand.Addr()) {
			return cand
		}
	}
	t.Fatal("no free /24 in 198.18.0.0/15 after 64 tries")
	return netip.Prefix{}
}

// sweepStaleLabs removes the namespaces and links of labs whose test
// process is gone (a run killed by -timeout does not run its cleanups).
// It kills nothing: brokers die with the test process (Pdeathsig).
func sweepStaleLabs(t *testing.T, ipPath string) {
	t.Helper()
	alive := func(pid string) bool {
		_, err := os.Stat(filepath.Join("/proc", pid))
		return err == nil
	}
	out, err := ipRun(ipPath, "netns", "list")
	if err != nil {
		netnsUnavailable(t, "%v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], labNS) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(f[0], labNS), "-") // pid, id, host
		if len(parts) != 3 || alive(parts[0]) {
			continue
		}
		t.Logf("removing namespace %s of a test process that is gone", f[0])
		_, _ = ipRun(ipPath, "netns", "del", f[0])
		_, _ = ipRun(ipPath, "link", "del", "fv"+parts[1]+parts[2])
		_, _ = ipRun(ipPath, "link", "del", "fbr"+parts[1])
	}
	links, err := ipRun(ipPath, "-o", "link", "show")
	if err != nil {
		return
	}
	for _, line := range strings.Split(links, "\n") {
		i := strings.Index(line, "alias "+labNS)
		f := strings.Fields(line)
		if i < 0 || len(f) < 2 {
			continue
		}
		pid := strings.Fields(line[i+len("alias "+labNS):])
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if len(pid) == 0 || alive(pid[0]) || !(strings.HasPrefix(name, "fbr") || strings.HasPrefix(name, "fv")) {
			continue
		}
		t.Logf("removing link %s of a test process that is gone", name)
		_, _ = ipRun(ipPath, "link", "del", name)
	}
}

// cut makes a and b unreachable from each other, both ways: a blackhole
// route to the other's /32 in each namespace.
func (l *netLab) cut(a, b *labHost) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range [][2]*labHost{{a, b}, {b, a}} {
		if l.cuts[[2]int{d[0].i, d[1].i}] {
			continue
		}
		if err := l.run("-n", d[0].ns, "route", "add", "blackhole", netip.PrefixFrom(d[1].addr, 32).String()); err != nil {
			return err
		}
		l.cuts[[2]int{d[0].i, d[1].i}] = true
	}
	return nil
}

// heal removes every cut.
func (l *netLab) heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for k := range l.cuts {
		from, to := l.hosts[k[0]], l.hosts[k[1]]
		if err := l.run("-n", from.ns, "route", "del", "blackhole", netip.PrefixFrom(to.addr, 32).String()); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(l.cuts, k)
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// Dialing: only what the lab assigned

// labGuard admits exactly the listeners the lab assigned; any other
// address fails the test.
type labGuard struct {
	t       *testing.T
	allowed map[string]bool
	refused atomic.Int64
}

func (g *labGuard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if !g.allowed[addr] {
		g.refused.Add(1)
		g.t.Errorf("dial guard: refusing %s %q: this test dials only the lab's listeners", network, addr)
		return nil, fmt.Errorf("dial guard: refusing %q", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// across returns a dialer for a client on the far side of a cut: the
// addresses in blocked are refused with an error (and counted), as the
// network would; the guard applies to the rest.
func (g *labGuard) across(blocked map[string]bool, count *atomic.Int64) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if blocked[addr] {
			count.Add(1)
			return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("%s is on the other side of the cut", addr)}
		}
		return g.dial(ctx, network, addr)
	}
}

// ---------------------------------------------------------------------------
// Brokers in the lab

// launchLabBroker starts a broker inside host h's namespace, every
// listener on h's address, without waiting for it to be ready.
func (l *netLab) launchLabBroker(t *testing.T, h *labHost, args ...string) *broker {
	t.Helper()
	b := &broker{
		t:       t,
		name:    fmt.Sprintf("broker#%d@%s", brokerSeq.Add(1), h.addr),
		DataDir: t.TempDir(),
		args:    args,
		log:     &lockedBuffer{},
		ready:   make(chan [2]string, 1),
		done:    make(chan struct{}),
	}
	full := append([]string{
		"netns", "exec", h.ns, fibrilBin,
		"--config=",
		"--server.data_dir=" + b.DataDir,
		"--broker.listener.bind=" + netip.AddrPortFrom(h.addr, labBrokerPort).String(),
		"--broker.peer_advertise=" + netip.AddrPortFrom(h.addr, labBrokerPort).String(),
		"--admin.listener.bind=" + netip.AddrPortFrom(h.addr, labAdminPort).String(),
		"--log.level=debug",
	}, args...)
	b.cmd = exec.Command(l.ipPath, full...)
	b.cmd.Env = cleanEnv()
	// Should the test process die without its cleanups, the broker dies too.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := &readyWatcher{sink: b.log, ready: b.ready}
	b.cmd.Stdout, b.cmd.Stderr = w, w
	dumpOnFailure(t, b.name+" log", b.log)
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

// waitReadyAt waits for the "broker ready" line and requires the
// addresses the lab assigned.
func waitReadyAt(b *broker, addr, admin string) {
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
	if b.Addr != addr || b.Admin != admin {
		t.Fatalf("%s ready on %s (admin %s), want %s (admin %s)", b.name, b.Addr, b.Admin, addr, admin)
	}
}

type labNode struct {
	*broker
	id   string
	host *labHost
}

// labCluster is a raft cluster of one public broker per lab host.
type labCluster struct {
	t      *testing.T
	lab    *netLab
	nodes  []*labNode
	guard  *labGuard
	tls    *tls.Config // the clients' (nil: plaintext)
	user   string
	pass   string
	client *http.Client // admin API, through the guard
}

// startLabCluster starts a broker on every host of lab, forming one raft
// cluster with inter-broker transport tr (quic runs with TLS, as it must),
// creates a broker user for the test (the built-in login is for loopback
// clients only) and waits until every node is ready.
func startLabCluster(t *testing.T, lab *netLab, tr string) *labCluster {
	t.Helper()
	return startLabClusterWith(t, lab, tr, nil)
}

// startLabClusterWith is startLabCluster with flags of node i's own
// (perNode may be nil).
func startLabClusterWith(t *testing.T, lab *netLab, tr string, perNode func(i int) []string) *labCluster {
	t.Helper()
	dir := t.TempDir()
	secret := filepath.Join(dir, "cluster.secret")
	if err := os.WriteFile(secret, []byte("integration-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &labGuard{t: t, allowed: map[string]bool{}}
	t.Cleanup(func() {
		if n := g.refused.Load(); n > 0 {
			t.Errorf("dial guard refused %d dial(s) outside the lab's listeners", n)
		}
	})
	lc := &labCluster{t: t, lab: lab, guard: g, user: "isolation", pass: "isolation-test-password"}
	lc.client = &http.Client{Transport: &http.Transport{DialContext: g.dial, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	extra := []string{"--transport.backend=" + tr}
	if tr == "quic" {
		extra = append(extra, "--tls.enabled", "--tls.auto_self_signed", "--tls.peer_ca_path="+filepath.Join(dir, "cluster-ca.pem"),
			"--tls.admin_enabled=false")
		lc.tls = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // each broker has its own self-signed CA; this test is about the network
	}
	var peers []string
	for i, h := range lab.hosts {
		nd := &labNode{id: fmt.Sprintf("node-%d", i+1), host: h}
		lc.nodes = append(lc.nodes, nd)
		peers = append(peers, nd.id+"="+netip.AddrPortFrom(h.addr, labRaftPort).String())
		g.allowed[netip.AddrPortFrom(h.addr, labBrokerPort).String()] = true
		g.allowed[netip.AddrPortFrom(h.addr, labAdminPort).String()] = true
	}
	for i, nd := range lc.nodes {
		args := append([]string{
			"--coordination.backend=raft",
			"--coordination.node_id=" + nd.id,
			"--coordination.secret_path=" + secret,
			"--coordination.raft.listen=" + netip.AddrPortFrom(nd.host.addr, labRaftPort).String(),
			"--coordination.raft.peers=" + strings.Join(peers, ","),
			"--coordination.raft.bootstrap_expect=" + strconv.Itoa(len(lab.hosts)),
			"--coordination.heartbeat_interval_ms=" + strconv.Itoa(testHeartbeatMS),
			"--coordination.liveness_ttl_ms=" + strconv.Itoa(testTTLMS),
		}, extra...)
		if perNode != nil {
			args = append(args, perNode(i)...)
		}
		nd.broker = lab.launchLabBroker(t, nd.host, args...)
	}
	for _, nd := range lc.nodes {
		waitReadyAt(nd.broker, netip.AddrPortFrom(nd.host.addr, labBrokerPort).String(),
			netip.AddrPortFrom(nd.host.addr, labAdminPort).String())
	}
	for _, nd := range lc.nodes {
		testkit.Eventually(t, waitTimeout, nd.id+" ready", func() bool {
			code, _, err := lc.http(nd, http.MethodGet, "/readyz", "")
			return err == nil && code == 200
		})
	}
	body, _ := json.Marshal(map[string]string{"username": lc.user, "password": lc.pass})
	if code, out, err := lc.http(lc.nodes[0], http.MethodPost, "/admin/api/users", string(body)); err != nil || code != 201 {
		t.Fatalf("add user: %d %s %v", code, out, err)
	}
	for _, nd := range lc.nodes {
		testkit.Eventually(t, waitTimeout, "the test user logs in at "+nd.id, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			c, err := client.DialConn(ctx, nd.Addr, client.ConnConfig{Username: lc.user, Password: lc.pass, TLS: lc.tls, Dial: g.dial})
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	}
	return lc
}

// http makes one admin API request.
func (lc *labCluster) http(nd *labNode, method, path, body string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+nd.Admin+path, rd)
	if err != nil {
		return 0, "", err
	}
	resp, err := lc.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), err
}

// labPartition is one partition of GET /admin/api/topology.
type labPartition struct {
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
	OwnerLive bool   `json:"owner_live"`
	Followers []struct {
		Node   string `json:"node"`
		Live   bool   `json:"live"`
		InSync bool   `json:"in_sync"`
	} `json:"followers"`
	InSync []string `json:"in_sync"`
}

// labTopology is GET /admin/api/topology as nd sees it.
type labTopology struct {
	Nodes []struct {
		ID         string `json:"id"`
		Live       bool   `json:"live"`
		Controller bool   `json:"controller"` // set only in the controller's own view
	} `json:"nodes"`
	Partitions []labPartition `json:"partitions"`
}

func (lc *labCluster) topology(nd *labNode) (labTopology, error) {
	code, body, err := lc.http(nd, http.MethodGet, "/admin/api/topology", "")
	if err != nil {
		return labTopology{}, err
	}
	if code != 200 {
		return labTopology{}, fmt.Errorf("%s topology: %d %s", nd.id, code, body)
	}
	var v labTopology
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return labTopology{}, err
	}
	return v, nil
}

// partition returns topic/p as nd sees it.
func (lc *labCluster) partition(nd *labNode, topic string, p uint32) (labPartition, error) {
	v, err := lc.topology(nd)
	if err != nil {
		return labPartition{}, err
	}
	for _, x := range v.Partitions {
		if x.Topic == topic && x.Partition == p {
			return x, nil
		}
	}
	return labPartition{}, fmt.Errorf("%s: no partition %s/%d", nd.id, topic, p)
}

// controller returns the node running placement (the raft leader's), as
// it says itself.
func (lc *labCluster) controller() *labNode {
	for _, nd := range lc.nodes {
		v, err := lc.topology(nd)
		if err != nil {
			continue
		}
		for _, n := range v.Nodes {
			if n.ID == nd.id && n.Controller {
				return nd
			}
		}
	}
	return nil
}

func (lp labPartition) follower(id string) (found, inSync bool) {
	for _, f := range lp.Followers {
		if f.Node == id {
			return true, f.InSync
		}
	}
	return false, false
}

// setRuntime changes one runtime setting through nd and waits until every
// node applied it.
func (lc *labCluster) setRuntime(nd *labNode, group, key string, value any) {
	t := lc.t
	t.Helper()
	code, body, err := lc.http(nd, http.MethodGet, "/admin/api/runtime-settings", "")
	if err != nil || code != 200 {
		t.Fatalf("settings: %d %s %v", code, body, err)
	}
	var view struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	grp, ok := view.Settings[group].(map[string]any)
	if !ok {
		t.Fatalf("settings: no group %s in %s", group, body)
	}
	grp[key] = value
	put, _ := json.Marshal(map[string]any{"expected_version": view.Version, "settings": view.Settings})
	if code, body, err := lc.http(nd, http.MethodPut, "/admin/api/runtime-settings", string(put)); err != nil || code != 200 {
		t.Fatalf("put settings: %d %s %v", code, body, err)
	}
	want, _ := json.Marshal(value)
	testkit.Eventually(t, waitTimeout, "every node applies "+group+"."+key, func() bool {
		for _, n := range lc.nodes {
			_, body, err := lc.http(n, http.MethodGet, "/admin/api/runtime-settings", "")
			if err != nil || !strings.Contains(body, fmt.Sprintf("%q:%s", key, want)) {
				return false
			}
		}
		return true
	})
}

// newLabClient dials a client bootstrapped on nodes as the test user,
// through dial (the guard's, or a cut-aware one from across).
func (lc *labCluster) newLabClient(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), nodes ...*labNode) *client.Client {
	t.Helper()
	var addrs []string
	for _, nd := range nodes {
		addrs = append(addrs, nd.Addr)
	}
	return newClient(t, addrs[0], func(o *client.Options) {
		o.Addrs, o.Username, o.Password, o.TLS, o.Dial = addrs, lc.user, lc.pass, lc.tls, dial
	})
}

// listeners is the set of nd's listeners (what a cut makes unreachable).
func (nd *labNode) listeners() map[string]bool {
	return map[string]bool{
		netip.AddrPortFrom(nd.host.addr, labBrokerPort).String(): true,
		netip.AddrPortFrom(nd.host.addr, labAdminPort).String():  true,
	}
}
