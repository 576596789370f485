package raft

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/testkit"
)

// Test timings: short enough for a quick suite, long enough that a loaded
// two-core machine running -race does not flap leaders constantly.
const (
	testRaftTimeout = 300 * time.Millisecond
	testSecret      = "test-cluster-secret"
	// waitLong bounds every wait; a healthy run needs a fraction of it.
	waitLong = 20 * time.Second
)

// logSink collects log records for assertions (and prints them when
// FIBRIL_TEST_LOG is set).
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	s.mu.Lock()
	s.lines = append(s.lines, b.String())
	s.mu.Unlock()
	if os.Getenv("FIBRIL_TEST_LOG") != "" {
		fmt.Fprintln(os.Stderr, b.String())
	}
	return nil
}

func (s *logSink) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &attrHandler{s: s, attrs: attrs}
}

func (s *logSink) WithGroup(string) slog.Handler { return s }

// contains reports whether a logged line holds every part.
func (s *logSink) contains(parts ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		ok := true
		for _, p := range parts {
			if !strings.Contains(l, p) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

type attrHandler struct {
	s     *logSink
	attrs []slog.Attr
}

func (h *attrHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h *attrHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(h.attrs...)
	return h.s.Handle(ctx, r)
}
func (h *attrHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &attrHandler{s: h.s, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}
func (h *attrHandler) WithGroup(string) slog.Handler { return h }

// cluster is an in-process raft cluster on 127.0.0.1.
type cluster struct {
	t       *testing.T
	mu      sync.Mutex
	members []*Coordinator // nil once stopped
	opts    []Options
	logs    []*logSink
}

// reserve binds n ephemeral loopback ports and keeps them open, so no
// other test can take them before the members start.
func reserve(t *testing.T, n int) []net.Listener {
	t.Helper()
	out := make([]net.Listener, n)
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out[i] = ln
	}
	return out
}

// baseOptions are one member's options; mod may adjust them.
func baseOptions(t *testing.T, id string, ln net.Listener, peers []Peer, expect int) (Options, *logSink) {
	sink := &logSink{}
	return Options{
		NodeID:            id,
		DataDir:           filepath.Join(t.TempDir(), id),
		Listen:            ln.Addr().String(),
		Peers:             peers,
		BootstrapExpect:   expect,
		Secret:            []byte(testSecret),
		RaftTimeout:       testRaftTimeout,
		HeartbeatInterval: 100 * time.Millisecond,
		LivenessTTL:       time.Second,
		Logger:            slog.New(sink),
		listener:          ln,
	}, sink
}

// newCluster starts n voters that bootstrap together.
func newCluster(t *testing.T, n int, mod func(i int, o *Options)) *cluster {
	t.Helper()
	lns := reserve(t, n)
	peers := make([]Peer, n)
	for i, ln := range lns {
		peers[i] = Peer{ID: fmt.Sprintf("n%d", i+1), Addr: ln.Addr().String()}
	}
	c := &cluster{t: t, members: make([]*Coordinator, n), opts: make([]Options, n), logs: make([]*logSink, n)}
	for i := range n {
		o, sink := baseOptions(t, peers[i].ID, lns[i], peers, n)
		if mod != nil {
			mod(i, &o)
		}
		c.opts[i], c.logs[i] = o, sink
	}
	for i := range n {
		m, err := Open(context.Background(), c.opts[i])
		if err != nil {
			t.Fatalf("open %s: %v", peers[i].ID, err)
		}
		c.members[i] = m
	}
	t.Cleanup(c.closeAll)
	return c
}

func (c *cluster) closeAll() {
	c.mu.Lock()
	ms := append([]*Coordinator(nil), c.members...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		if m != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.crash() // fast: no leadership transfers between dying members
			}()
		}
	}
	wg.Wait()
}

func (c *cluster) member(i int) *Coordinator {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i]
}

// stop crashes member i.
func (c *cluster) stop(i int) {
	c.mu.Lock()
	m := c.members[i]
	c.members[i] = nil
	c.mu.Unlock()
	if m != nil {
		m.crash()
	}
}

// restart reopens member i from its data directory at its address.
func (c *cluster) restart(i int) *Coordinator {
	c.t.Helper()
	c.stop(i)
	o := c.opts[i]
	o.listener = nil
	var m *Coordinator
	testkit.Eventually(c.t, waitLong, "rebind "+o.NodeID, func() bool {
		var err error
		m, err = Open(context.Background(), o)
		return err == nil
	})
	c.mu.Lock()
	c.members[i] = m
	c.mu.Unlock()
	return m
}

// leader waits for a member that leads and has caught up.
func (c *cluster) leader() (int, *Coordinator) {
	c.t.Helper()
	idx := -1
	testkit.Eventually(c.t, waitLong, "a ready leader", func() bool {
		for i := range c.members {
			m := c.member(i)
			if m != nil && m.raft.State() == hraft.Leader && m.readyTerm.Load() == m.raft.CurrentTerm() {
				idx = i
				return true
			}
		}
		return false
	})
	return idx, c.member(idx)
}

// follower returns a running member other than the leader.
func (c *cluster) follower(leader int) (int, *Coordinator) {
	for i := range c.members {
		if i != leader && c.member(i) != nil {
			return i, c.member(i)
		}
	}
	c.t.Fatal("no follower")
	return -1, nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

func mustSet(t *testing.T, c core.Coordinator, key, val string, version uint64) uint64 {
	t.Helper()
	v, err := c.CompareAndSet(ctxT(t), key, []byte(val), version)
	if err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
	return v
}

func mustGet(t *testing.T, c core.Coordinator, key string) core.KV {
	t.Helper()
	kv, err := c.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return kv
}

// servers returns member m's view of the configuration.
func servers(m *Coordinator) []hraft.Server {
	f := m.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return f.Configuration().Servers
}
