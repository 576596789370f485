package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core/broker"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/memcoord"
)

// Ports every simulated broker uses on its own host.
const (
	clientPort = 9876
	peerPort   = 7946
	adminPort  = 8081
)

// Timings of a simulated cluster (simulated time costs nothing but the
// work done in it, so they are the production defaults).
const (
	heartbeatMS = 1000
	livenessMS  = 4000
	user        = "sim"
	password    = "sim-password-1"
)

// Spec says what cluster to run.
type Spec struct {
	Public, Private int // brokers; node ids n1 … in that order
}

// Cluster is one simulated cluster.
type Cluster struct {
	T      testing.TB
	Net    *Net
	Store  *memcoord.Store
	Nodes  []*Node
	Ledger *Ledger
	Rand   *rand.Rand // the run's randomness (faults, choices); one goroutine only

	domain   string
	root     string
	log      *slog.Logger
	mu       sync.Mutex
	forbid   map[string]string // address → why a client must never dial it
	clients  []*client.Client
	nclients int
}

// Node is one broker of a Cluster.
type Node struct {
	ID      string
	Host    string
	Private bool
	Dir     string
	B       *broker.Broker // nil while crashed
	c       *Cluster
}

// Addr is the node's client address.
func (n *Node) Addr() string { return n.Host + ":" + strconv.Itoa(clientPort) }

var domainSeq struct {
	sync.Mutex
	n int
}

// NewCluster starts spec's brokers; seed feeds Rand. The cluster shuts
// down at t's cleanup (Shutdown).
func NewCluster(t testing.TB, seed uint64, spec Spec) *Cluster {
	t.Helper()
	domainSeq.Lock()
	domainSeq.n++
	domain := fmt.Sprintf("sim%d", domainSeq.n)
	domainSeq.Unlock()
	c := &Cluster{
		T:      t,
		Net:    newNet(domain),
		Store:  newStore(),
		Ledger: newLedger(),
		Rand:   rand.New(rand.NewPCG(seed, seed^0x5eed)),
		domain: domain,
		root:   t.TempDir(),
		log:    slog.New(slog.DiscardHandler),
		forbid: map[string]string{},
	}
	if os.Getenv("FIBRIL_SIM_LOG") != "" {
		c.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c.Net.guard = c.guard
	addWorld(domain, &world{net: c.Net, store: c.Store})
	for i := range spec.Public + spec.Private {
		n := &Node{ID: fmt.Sprintf("n%d", i+1), Private: i >= spec.Public, c: c}
		n.Host = c.Net.Host(n.ID)
		n.Dir = filepath.Join(c.root, n.ID)
		if n.Private {
			c.forbid[n.Addr()] = n.ID + "'s client listener (private)"
			c.forbid[c.hidden(n)] = n.ID + "'s advertised address (private)"
		}
		c.forbid[n.Host+":"+strconv.Itoa(peerPort)] = n.ID + "'s peer listener"
		c.forbid[n.Host+":"+strconv.Itoa(adminPort)] = n.ID + "'s admin listener"
		c.Nodes = append(c.Nodes, n)
	}
	// Started together: each waits for the cluster to form.
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// hidden is a private node's advertised client address: a host nothing
// listens on, which no client may ever dial.
func (c *Cluster) hidden(n *Node) string {
	return c.Net.Host("hidden-"+n.ID) + ":" + strconv.Itoa(clientPort)
}

func (n *Node) start() error {
	c := n.c
	args := []string{
		"--config=",
		"--server.data_dir=" + n.Dir,
		"--broker.listener.bind=" + n.Addr(),
		"--broker.peer_listener.bind=" + n.Host + ":" + strconv.Itoa(peerPort),
		"--broker.peer_advertise=" + n.Host + ":" + strconv.Itoa(peerPort),
		"--admin.listener.bind=" + n.Host + ":" + strconv.Itoa(adminPort),
		"--transport.backend=sim",
		"--coordination.backend=sim",
		"--coordination.node_id=" + n.ID,
		"--" + coordKey + "=sim=" + n.Host + ":1",
		"--coordination.heartbeat_interval_ms=" + strconv.Itoa(heartbeatMS),
		"--coordination.liveness_ttl_ms=" + strconv.Itoa(livenessMS),
		"--log.level=debug",
	}
	if n.Private {
		args = append(args, "--broker.visibility=private", "--broker.listener.advertise="+c.hidden(n))
	}
	cfg, _, err := config.Load(args, []string{"FIBRIL_CLUSTER_SECRET=sim-cluster-secret",
		"FIBRIL_AUTH_USERNAME=" + user, "FIBRIL_AUTH_PASSWORD=" + password})
	if err != nil {
		return fmt.Errorf("%s: config: %w", n.ID, err)
	}
	b, err := broker.StartIn(broker.Env{Listen: c.Net.Listen}, cfg, c.log.With("node", n.ID))
	if err != nil {
		return fmt.Errorf("%s: start: %w", n.ID, err)
	}
	n.B = b
	return nil
}

// Crash ends n the way a killed process ends: its connections reset, its
// listeners gone, its coordination calls failing (so its leases run out
// at their TTL, not at a goodbye). Its data directory stays. The broker's
// goroutines are then shut down behind the cut, so that nothing it does
// after the crash reaches anyone; unlike SIGKILL that also writes out
// what it had buffered (never something it confirmed, which was durable
// already).
func (c *Cluster) Crash(n *Node) {
	if n.B == nil {
		return
	}
	c.Store.PauseMember(n.ID)
	c.Net.Crash(n.Host)
	_ = n.B.Shutdown()
	n.B = nil
}

// Restart starts a crashed n again on its data directory.
func (c *Cluster) Restart(n *Node) error {
	if n.B != nil {
		return nil
	}
	c.Net.Revive(n.Host)
	c.Store.ResumeMember(n.ID)
	return n.start()
}

// Shutdown stops every client and broker.
func (c *Cluster) Shutdown() {
	c.mu.Lock()
	cls := c.clients
	c.clients = nil
	c.mu.Unlock()
	for _, cl := range cls {
		_ = cl.Close()
	}
	for _, n := range c.Nodes {
		if n.B != nil {
			_ = n.B.Shutdown()
			n.B = nil
		}
	}
	removeWorld(c.domain)
}

// guard fails every dial of a client to an address it must never reach.
func (c *Cluster) guard(from, addr string) error {
	c.mu.Lock()
	why, bad := c.forbid[addr]
	c.mu.Unlock()
	if !bad || !c.isClientHost(from) {
		return nil
	}
	c.Ledger.violate("client %s dialled %s: %s", from, addr, why)
	return &net.OpError{Op: "dial", Net: "tcp", Addr: simAddr(addr), Err: fmt.Errorf("sim guard: a client may not dial %s", why)}
}

func (c *Cluster) isClientHost(h string) bool {
	if h == c.Net.Host("ops") { // the operators' host (Admin)
		return false
	}
	for _, n := range c.Nodes {
		if n.Host == h {
			return false
		}
	}
	return true
}

// Client connects a new client host to the brokers in via (their client
// addresses only, as a load balancer would give them).
func (c *Cluster) Client(ctx context.Context, via ...*Node) (*client.Client, string, error) {
	c.mu.Lock()
	c.nclients++
	host := c.Net.Host("client" + strconv.Itoa(c.nclients))
	c.mu.Unlock()
	var addrs []string
	for _, n := range via {
		addrs = append(addrs, n.Addr())
	}
	cl, err := client.Dial(ctx, client.Options{
		Addrs:    addrs,
		Username: user,
		Password: password,
		Dial: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return c.Net.Dial(ctx, host, addr)
		},
		Logger: c.log.With("client", host),
	})
	if err != nil {
		return nil, host, err
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl, host, nil
}
