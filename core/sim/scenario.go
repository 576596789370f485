package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// Scenario is a cluster, a workload and the faults a run applies while
// the workload runs. Faults draws every choice (whom, when, how long)
// from r.Rand, so a seed fixes them.
type Scenario struct {
	Name   string
	Spec   Spec
	Parts  int
	Faults func(r *Run)
	// Before, when set, runs once the cluster is up, before the queue is
	// declared.
	Before func(r *Run)
	// Check adds scenario-specific checks after the drain.
	Check func(r *Run)
}

// Run is one scenario run: its cluster and what it learned.
type Run struct {
	*Cluster
	Topic  string
	Parts  int
	Owners map[uint32]string // at the start
}

// Gateway is the first public broker.
func (r *Run) Gateway() *Node { return r.Nodes[0] }

// Node returns the node with id.
func (r *Run) Node(id string) *Node {
	for _, n := range r.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// PrivateOwner picks, at random, a private node that owns a partition at
// the start (nil when none does).
func (r *Run) PrivateOwner() *Node {
	var ns []*Node
	seen := map[string]bool{}
	for p := range uint32(r.Parts) {
		if n := r.Node(r.Owners[p]); n != nil && n.Private && !seen[n.ID] {
			seen[n.ID] = true
			ns = append(ns, n)
		}
	}
	if len(ns) == 0 {
		return nil
	}
	return ns[r.Rand.IntN(len(ns))]
}

// Between is a random duration in [lo, hi).
func (r *Run) Between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Rand.Int64N(int64(hi-lo)))
}

// CutBoth partitions a and b.
func (r *Run) CutBoth(a, b *Node) {
	r.Net.Cut(a.Host, b.Host)
	r.Net.Cut(b.Host, a.Host)
	r.Ledger.Event("cut %s ⇄ %s", a.ID, b.ID)
}

// CutOneWay loses everything from a to b.
func (r *Run) CutOneWay(a, b *Node) {
	r.Net.Cut(a.Host, b.Host)
	r.Ledger.Event("cut %s → %s", a.ID, b.ID)
}

// Heal removes every cut.
func (r *Run) Heal() {
	r.Net.Heal()
	r.Ledger.Event("heal")
}

// CrashNode crashes n.
func (r *Run) CrashNode(n *Node) {
	r.Ledger.Event("crash %s", n.ID)
	r.Crash(n)
}

// RestartNode starts a crashed n again.
func (r *Run) RestartNode(n *Node) {
	if err := r.Restart(n); err != nil {
		r.Ledger.violate("restart %s: %v", n.ID, err)
		return
	}
	r.Ledger.Event("restart %s", n.ID)
}

// Admin makes an admin API request to n from the operators' host (which
// the client guard does not cover).
func (c *Cluster) Admin(n *Node, method, path string) (int, []byte, error) {
	return c.AdminBody(n, method, path, nil)
}

// AdminBody is Admin with a request body.
func (c *Cluster) AdminBody(n *Node, method, path string, body []byte) (int, []byte, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return c.Net.Dial(ctx, c.Net.Host("ops"), addr)
		}}}
	req, err := http.NewRequest(method, "http://"+n.Host+":"+strconv.Itoa(adminPort)+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// topology is what a node's /admin/api/topology says, in part.
type topology struct {
	Nodes []struct {
		ID         string `json:"id"`
		Controller bool   `json:"controller"`
	} `json:"nodes"`
	Partitions []struct {
		Topic     string `json:"topic"`
		Partition uint32 `json:"partition"`
		Owner     string `json:"owner"`
		OwnerLive bool   `json:"owner_live"`
	} `json:"partitions"`
}

func (c *Cluster) topology(n *Node) (topology, error) {
	code, body, err := c.Admin(n, http.MethodGet, "/admin/api/topology")
	if err != nil {
		return topology{}, err
	}
	if code != http.StatusOK {
		return topology{}, fmt.Errorf("%s topology: %d %s", n.ID, code, body)
	}
	var v topology
	err = json.Unmarshal(body, &v)
	return v, err
}

// Controller is the node that says it runs placement (nil if none says so).
func (c *Cluster) Controller() *Node {
	for _, n := range c.Nodes {
		if n.B == nil {
			continue
		}
		v, err := c.topology(n)
		if err != nil {
			continue
		}
		for _, x := range v.Nodes {
			if x.ID == n.ID && x.Controller {
				return n
			}
		}
	}
	return nil
}

// owners waits (simulated time) until every partition of topic has a
// live owner as n sees it.
func (c *Cluster) owners(n *Node, topic string, parts int, within time.Duration) (map[uint32]string, error) {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		v, err := c.topology(n)
		if err == nil {
			out := map[uint32]string{}
			for _, p := range v.Partitions {
				if p.Topic == topic && p.Owner != "" && p.OwnerLive {
					out[p.Partition] = p.Owner
				}
			}
			if len(out) == parts {
				return out, nil
			}
			err = fmt.Errorf("%d of %d partitions owned: %v", len(out), parts, out)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("%s not placed within %v: %v", topic, within, last)
}

// SetRuntime changes one runtime setting (group.key) through n.
func (c *Cluster) SetRuntime(n *Node, group, key string, value any) error {
	code, body, err := c.Admin(n, http.MethodGet, "/admin/api/runtime-settings")
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
	grp, ok := view.Settings[group].(map[string]any)
	if !ok {
		return fmt.Errorf("runtime settings: no group %s", group)
	}
	grp[key] = value
	put, _ := json.Marshal(map[string]any{"expected_version": view.Version, "settings": view.Settings})
	code, body, err = c.AdminBody(n, http.MethodPut, "/admin/api/runtime-settings", put)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("put runtime settings: %d %s %v", code, body, err)
	}
	return nil
}

// Outcome is the result of one run.
type Outcome struct {
	Seed       uint64
	Scenario   string
	Summary    string
	Timeline   string
	Violations []string
	Simulated  time.Duration
	Confirmed  int
	Unknown    int // publishes whose outcome the client could not know (504)
}

func (o Outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s, seed %d (re-run: go test ./core/sim -run 'TestSimulation$' -args -sim.seed=%d -sim.scenario=%s)\n", o.Scenario, o.Seed, o.Seed, o.Scenario)
	fmt.Fprintf(&b, "  %s; %v simulated\n", o.Summary, o.Simulated.Round(time.Millisecond))
	for _, v := range o.Violations {
		fmt.Fprintf(&b, "  VIOLATION: %s\n", v)
	}
	if len(o.Violations) > 0 {
		fmt.Fprintf(&b, "  timeline:\n    %s\n", strings.ReplaceAll(o.Timeline, "\n", "\n    "))
	}
	return b.String()
}

// Play runs scenario sc with seed: start the cluster, declare the queue,
// run a paced producer and a consumer through the public brokers while the
// faults happen, heal everything, drain, check. Call it inside a synctest
// bubble (simulated time); it shuts the cluster down before returning.
func Play(t testing.TB, seed uint64, sc Scenario) Outcome {
	started := time.Now()
	c := NewCluster(t, seed, sc.Spec)
	defer c.Shutdown()
	r := &Run{Cluster: c, Topic: "orders", Parts: sc.Parts}
	out := Outcome{Seed: seed, Scenario: sc.Name}
	finish := func() Outcome {
		out.Summary = c.Ledger.Summary()
		out.Timeline = c.Ledger.Timeline()
		out.Violations = c.Ledger.Violations()
		out.Simulated = time.Since(started)
		c.Ledger.mu.Lock()
		out.Confirmed, out.Unknown = len(c.Ledger.confirmed), len(c.Ledger.unknown)
		c.Ledger.mu.Unlock()
		return out
	}
	var public []*Node
	for _, n := range c.Nodes {
		if !n.Private {
			public = append(public, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, _, err := c.Client(ctx, public...)
	if err != nil {
		c.Ledger.violate("client: %v", err)
		return finish()
	}
	if sc.Before != nil {
		sc.Before(r)
	}
	if _, err := cl.DeclareQueue(ctx, client.QueueSpec{Topic: r.Topic, Partitions: uint32(r.Parts)}); err != nil {
		c.Ledger.violate("declare: %v", err)
		return finish()
	}
	if r.Owners, err = c.owners(r.Gateway(), r.Topic, r.Parts, time.Minute); err != nil {
		c.Ledger.violate("%v", err)
		return finish()
	}
	c.Ledger.Event("owners %v", r.Owners)
	stop := make(chan struct{})
	produced, consumed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(produced)
		c.Produce(cl, r.Topic, r.Parts, 5000, "m", stop, 100*time.Millisecond)
	}()
	cc, _, err := c.Client(ctx, public...)
	if err != nil {
		c.Ledger.violate("consumer client: %v", err)
		close(stop)
		<-produced
		return finish()
	}
	go func() {
		defer close(consumed)
		if err := c.Consume(cc, r.Topic, stop); err != nil {
			c.Ledger.Event("consumer ended: %v", err)
		}
	}()
	time.Sleep(2 * time.Second)
	sc.Faults(r)
	// Everything heals: cuts, coordination, crashed brokers.
	r.Heal()
	for _, n := range c.Nodes {
		c.Store.ResumeMember(n.ID)
		if n.B == nil {
			r.RestartNode(n)
		}
	}
	time.Sleep(10 * time.Second) // traffic after the heal
	close(stop)
	<-produced
	<-consumed
	// The consumer's session holds what it was delivered and never took
	// (its prefetch, a delivery that came with the stop): closing its
	// client ends the session, which releases them to the drain. A
	// subscription's own close does not: the protocol has no unsubscribe.
	_ = cc.Close()
	c.Ledger.Event("producer and consumer stopped")
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	dc, _, err := c.Client(dctx, public...)
	if err != nil {
		c.Ledger.violate("drain client: %v", err)
		return finish()
	}
	if err := c.Drain(dc, r.Topic, 2*time.Minute, 30*time.Second); err != nil {
		c.Ledger.violate("drain: %v", err)
	}
	_ = dc.Close()
	// Past every lease and grace: nothing acknowledged may come back.
	time.Sleep(time.Minute)
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if rc, _, err := c.Client(rctx, public...); err != nil {
		c.Ledger.violate("recheck client: %v", err)
	} else if err := c.Recheck(rc, r.Topic, 30*time.Second); err != nil {
		c.Ledger.violate("recheck: %v", err)
	}
	c.Ledger.Check()
	if sc.Check != nil {
		sc.Check(r)
	}
	return finish()
}
