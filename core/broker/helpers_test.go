package broker

// Test helpers shared by the broker's scenario tests: starting brokers and
// clusters (in-memory coordination), dialling them, scraping metrics and
// the admin API, and waiting for a condition.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/core/metricstest"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/plugins"
)

// loopbackOnly is the test-wide dialer guard: any dial outside 127.0.0.0/8
// and ::1 fails the test (tests only ever dial loopback).
func loopbackOnly(t testing.TB) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("dial %q: %v", addr, err)
			return nil, err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			t.Errorf("test tried to dial non-loopback address %s", addr)
			return nil, fmt.Errorf("refused: %s is not loopback", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// privateGuard is loopbackOnly for a client that must never reach the
// private brokers' client addresses in private: any attempt fails the test.
func privateGuard(t testing.TB, private map[string]bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	guard := loopbackOnly(t)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if private[addr] {
			t.Errorf("the client dialled the private broker at %s", addr)
			return nil, errors.New("private broker")
		}
		return guard(ctx, network, addr)
	}
}

func startBroker(t *testing.T, flags ...string) *Broker {
	t.Helper()
	cfg, _, err := config.Load(append([]string{
		"--server.data_dir=" + t.TempDir(),
		"--broker.listener.bind=127.0.0.1:0",
		"--admin.listener.bind=127.0.0.1:0",
	}, flags...), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown() })
	return b
}

func scrape(t *testing.T, b *Broker) string {
	t.Helper()
	resp, err := http.Get("http://" + b.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// memStores are the in-memory coordination clusters of this test
// process, by name: brokers started with coordination.backend = memtest
// and coordination.raft.peers = [name=127.0.0.1:1] share one.
var memStores = struct {
	sync.Mutex
	m     map[string]*memcoord.Store
	names map[testing.TB]string // the store of each test's cluster
	seq   int
}{m: map[string]*memcoord.Store{}, names: map[testing.TB]string{}}

func init() {
	plugins.RegisterCoordination("memtest", func(ctx context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
		name := env.Config["coordination.raft.peers"]
		memStores.Lock()
		defer memStores.Unlock()
		st := memStores.m[name]
		if st == nil {
			st = memcoord.NewStore(memcoord.Options{MinTTL: 50 * time.Millisecond, ElectionTTL: 300 * time.Millisecond})
			memStores.m[name] = st
		}
		return st.Member(string(env.NodeID)), nil
	})
}

// startMemCluster starts n brokers sharing one in-memory coordinator.
func startMemCluster(t *testing.T, n int) []*Broker {
	t.Helper()
	return startMemClusterWith(t, n, nil)
}

// startMemClusterWith is startMemCluster with extra flags for node i.
func startMemClusterWith(t testing.TB, n int, extra func(i int) []string) []*Broker {
	t.Helper()
	memStores.Lock()
	memStores.seq++ // a new store per run, also under -count
	name := fmt.Sprintf("%s-%d=127.0.0.1:1", memName(t), memStores.seq)
	memStores.names[t] = name
	memStores.Unlock()
	var out []*Broker
	for i := range n {
		args := []string{
			"--server.data_dir=" + t.TempDir(),
			"--broker.listener.bind=127.0.0.1:0",
			"--admin.listener.bind=127.0.0.1:0",
			"--coordination.backend=memtest",
			"--coordination.raft.peers=" + name,
			fmt.Sprintf("--coordination.node_id=n%d", i),
			"--coordination.heartbeat_interval_ms=50",
			"--coordination.liveness_ttl_ms=300",
		}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		cfg, _, err := config.Load(args, []string{"FIBRIL_CLUSTER_SECRET=test-secret"})
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.DiscardHandler)
		if os.Getenv("FIBRIL_TEST_LOG") != "" { // debugging aid: the brokers' logs in the test output
			log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("broker", i)
		}
		b, err := Start(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown() })
		out = append(out, b)
	}
	return out
}

func adminDo(t testing.TB, b *Broker, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+b.AdminAddr().String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// memMember is a handle on the in-memory coordinator of a memtest cluster.
func memMember(t *testing.T) core.Coordinator {
	memStores.Lock()
	defer memStores.Unlock()
	st := memStores.m[memStores.names[t]]
	if st == nil {
		t.Fatal("no memtest store for this test")
	}
	return st.Member("test-writer")
}

// dialClient connects the Go client to b as the built-in loopback user;
// the client is closed at cleanup.
func dialClient(ctx context.Context, t testing.TB, b *Broker) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{b.BrokerAddr().String()},
		Username: "fibril", Password: "fibril", Dial: loopbackOnly(t), TLS: clientTLS(b)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memName is the test's name as a node id (subtest names hold '/', ' ', ',').
func memName(t testing.TB) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == ',' || r == '=' {
			return '-'
		}
		return r
	}, t.Name())
}

// consumeDistinct takes deliveries from sub, acknowledging each, until it
// has seen n distinct payloads, which it returns; an error fails the test.
func consumeDistinct(ctx context.Context, t *testing.T, sub *client.Subscription, n int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for len(got) < n {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d distinct deliveries of %d: %v", len(got), n, err)
		}
		got[string(d.Payload)] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func tlsFlags(ca string) []string {
	return []string{"--tls.enabled", "--tls.auto_self_signed", "--tls.peer_ca_path=" + ca, "--tls.admin_enabled=false"}
}

// transportFlags are the flags that run a test cluster over transport tr:
// none for tcp (the default, plaintext), TLS with a shared peer CA for quic.
func transportFlags(t *testing.T, tr string) []string {
	if tr != "quic" {
		return nil
	}
	return append(tlsFlags(filepath.Join(t.TempDir(), "cluster-ca.pem")), "--transport.backend=quic")
}

// clientTLS is the client TLS configuration for b: nil when b serves
// plaintext.
func clientTLS(b *Broker) *tls.Config {
	if b.tls == nil {
		return nil
	}
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // each test broker has its own self-signed CA
}

// startPrivateCluster starts one public broker (n0) and n-1 private ones,
// and returns them with a client of the public broker whose dialer fails
// the test on any attempt to reach a private broker's client address.
func startPrivateCluster(t *testing.T, n int, extra ...string) ([]*Broker, *client.Client) {
	t.Helper()
	bs := startMemClusterWith(t, n, func(i int) []string {
		if i > 0 {
			return append([]string{"--broker.visibility=private"}, extra...)
		}
		return extra
	})
	private := map[string]bool{}
	for _, b := range bs[1:] {
		private[b.BrokerAddr().String()] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()},
		Username: "fibril", Password: "fibril", TLS: clientTLS(bs[0]), Dial: privateGuard(t, private)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return bs, c
}

// counterValue sums a metric family's samples in b's registry (0 when it
// has none).
func counterValue(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	v, _ := metricstest.Lookup(t, b.registry, name, nil)
	return v
}

// awaitPlaced waits until every partition of each queue (default group)
// is placed in b's view of the cluster.
func awaitPlaced(t *testing.T, b *Broker, within time.Duration, topics ...string) {
	t.Helper()
	testkit.Eventually(t, within, fmt.Sprintf("every partition of %v is placed", topics), func() bool {
		snap := b.cluster.cl.Snapshot()
		for _, topic := range topics {
			q := snap.Queue(topic, "")
			if q == nil {
				return false
			}
			for _, p := range q.Parts {
				if !p.Placed() {
					return false
				}
			}
		}
		return true
	})
}
