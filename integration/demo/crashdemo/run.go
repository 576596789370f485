package crashdemo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// The events the chart marks.
const (
	evPrivateKilled    = "private owner killed"
	evPrivateRestarted = "private owner restarted"
	evPublicKilled     = "public broker killed"
	evPublicRestarted  = "public broker restarted"
)

const topic = "orders"

// transcript writes timestamped lines (seconds since the demo's start) to
// its file and to Config.Out.
type transcript struct {
	t0 time.Time
	mu sync.Mutex
	w  io.Writer
}

func (t *transcript) say(format string, args ...any) {
	line := fmt.Sprintf("[%7.2fs] %s\n", time.Since(t.t0).Seconds(), fmt.Sprintf(format, args...))
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.w, line)
}

// run is the state of one demo run.
type run struct {
	cfg      Config
	t0       time.Time
	deadline time.Time // no loop of the run goes on past it
	tx       *transcript
	cl       *cluster
	led      *ledger
	guard    *dialGuard
	tr       *traffic

	parts            []uint32
	victim, follower string

	ownersMu sync.Mutex
	owners   map[uint32]string // as last read from the admin API

	mu      sync.Mutex // events and timings (the owners' poller fills in failovers)
	events  []Event
	timings []Timing
}

// Run runs the demo once and writes its outputs into cfg.OutDir. It
// returns the run's summary; an error means the demo could not be carried
// out (a broker that would not start, a partition never placed), not that
// a message was lost — the summary says that. The outputs are written
// whenever traffic started, also on error.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Summary{}, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return Summary{}, err
	}
	work := cfg.WorkDir
	if work == "" {
		dir, err := os.MkdirTemp("", "fibril-crashdemo-")
		if err != nil {
			return Summary{}, err
		}
		defer os.RemoveAll(dir)
		work = dir
	} else if err := os.MkdirAll(work, 0o700); err != nil {
		return Summary{}, err
	}
	tf, err := os.Create(filepath.Join(cfg.OutDir, "transcript.txt"))
	if err != nil {
		return Summary{}, err
	}
	defer tf.Close()
	r := &run{cfg: cfg, t0: time.Now()}
	r.deadline = r.t0.Add(cfg.lifetime())
	r.tx = &transcript{t0: r.t0, w: io.MultiWriter(tf, cfg.Out)}
	r.led = newLedger(r.t0)
	clientLog, err := os.Create(filepath.Join(work, "client.log"))
	if err != nil {
		return Summary{}, err
	}
	defer clientLog.Close()
	sum, err := r.main(ctx, work, slog.New(slog.NewTextHandler(clientLog, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		r.tx.say("demo failed: %v", err)
	}
	return sum, err
}

func (r *run) main(ctx context.Context, work string, clientLog *slog.Logger) (Summary, error) {
	cfg := &r.cfg
	r.tx.say("crash demo: three brokers as in contrib/swarm/compose.yaml — %s public, %s and %s private, on embedded raft", publicID, private1ID, private2ID)
	cl, err := newCluster(cfg, work)
	if err != nil {
		return Summary{}, err
	}
	r.cl = cl
	defer cl.stopAll()
	for _, n := range cl.nodes {
		if err := cl.start(n); err != nil {
			return Summary{}, err
		}
		role := "public  (its client address is the only one the client is given)"
		if n.private {
			role = "private (clients never get its address)"
		}
		r.tx.say("started %-16s pid %-7d client %s  admin %s  %s", n.id, n.pid(), n.client, n.admin, role)
	}
	for _, n := range cl.nodes {
		if err := cl.waitReady(ctx, n, 90*time.Second); err != nil {
			return Summary{}, err
		}
	}
	if err := cl.waitPlacing(ctx, 60*time.Second); err != nil {
		return Summary{}, err
	}
	r.tx.say("cluster ready: every broker live, placement running")
	// One follower per partition makes the failover target known in
	// advance: the partition's one in-sync follower (with the default two,
	// the controller picks between the two other brokers by load).
	if err := cl.setRuntime(ctx, "replication", "target_followers", 1, 30*time.Second); err != nil {
		return Summary{}, err
	}
	r.tx.say("replication.target_followers = 1 on every broker (durability majority_durable, the default: owner and follower fsync before a confirm)")

	r.guard = &dialGuard{public: cl.public().client, private: map[string]bool{}}
	for _, n := range cl.nodes[1:] {
		r.guard.private[n.client], r.guard.private[n.admin], r.guard.private[n.raft] = true, true, true
	}
	c, err := dialClient(ctx, cfg, r.guard, clientLog)
	if err != nil {
		return Summary{}, fmt.Errorf("client: %w", err)
	}
	defer c.Close()
	r.tx.say("client connected to %s as %q (its dialer refuses the private brokers' addresses)", r.guard.public, cfg.username)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = c.DeclareQueue(dctx, client.QueueSpec{Topic: topic, Partitions: uint32(cfg.Partitions)})
	cancel()
	if err != nil {
		return Summary{}, fmt.Errorf("declare %s: %w", topic, err)
	}
	if err := r.choosePartitions(ctx); err != nil {
		return Summary{}, err
	}

	// Traffic, the per-second lines and the owners' poller.
	r.tr = newTraffic(cfg, c, r.led, topic, r.parts, r.deadline)
	if err := r.tr.start(); err != nil {
		return Summary{}, err
	}
	r.tx.say("traffic: %d confirmed publishes/s (at most %d waiting), %d-byte payloads, to %s %s; one subscription acknowledging every delivery",
		cfg.Rate, cfg.Window, cfg.PayloadBytes, topic, partList(r.parts))
	trafficStart := r.led.now()
	stopBg := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { r.pollOwners(stopBg) })
	bg.Go(func() { r.report(stopBg) })
	stopped := false
	stopBackground := func() {
		if !stopped {
			stopped = true
			close(stopBg)
			bg.Wait()
		}
	}
	defer stopBackground()
	err = r.crashes(ctx)
	trafficEnd := r.led.now()
	if err == nil {
		err = r.drain(ctx)
	} else if serr := r.tr.stopProducing(cfg.PublishTimeout + 30*time.Second); serr != nil {
		r.tx.say("%v", serr)
	}
	stopBackground()
	r.tr.stopConsuming()
	_ = c.Close()
	sum := r.summarize(c.Stats(), trafficStart, trafficEnd)
	r.printTotals(sum)
	if werr := r.writeOutputs(sum); werr != nil && err == nil {
		err = werr
	}
	return sum, err
}

// choosePartitions waits until every partition of the queue has an owner
// and one in-sync follower, then picks the partitions the client uses: those
// of the private broker that owns the most partitions followed by the
// other private broker (so the first crash moves them from one private
// broker to the other), else those of the private broker that owns the
// most.
func (r *run) choosePartitions(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	var v *topologyView
	for {
		var err error
		v, err = r.cl.topology(ctx, r.cl.public())
		if err == nil && r.placed(v) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not placed with one in-sync follower per partition after 60 s (last error: %v)", topic, err)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	type pick struct{ parts []uint32 }
	best := map[string]*pick{} // owner → partitions followed by the other private broker
	any := map[string]*pick{}  // owner → all its partitions
	follower := map[uint32]string{}
	for _, p := range v.Partitions {
		if p.Topic != topic {
			continue
		}
		f := p.Followers[0].Node
		follower[p.Partition] = f
		r.tx.say("%s p%d: owner %s, follower %s (epoch %d)", topic, p.Partition, p.Owner, f, p.Epoch)
		if p.Owner == publicID {
			continue
		}
		if any[p.Owner] == nil {
			any[p.Owner] = &pick{}
		}
		any[p.Owner].parts = append(any[p.Owner].parts, p.Partition)
		if f != publicID {
			if best[p.Owner] == nil {
				best[p.Owner] = &pick{}
			}
			best[p.Owner].parts = append(best[p.Owner].parts, p.Partition)
		}
	}
	choose := func(m map[string]*pick) bool {
		for _, id := range []string{private1ID, private2ID} {
			if m[id] != nil && len(m[id].parts) > len(r.parts) {
				r.victim, r.parts = id, m[id].parts
			}
		}
		return r.victim != ""
	}
	if !choose(best) && !choose(any) {
		return fmt.Errorf("the private brokers own no partition of %s; the demo shows nothing", topic)
	}
	slices.Sort(r.parts)
	r.follower = follower[r.parts[0]]
	r.tx.say("the client uses %s %s: owner %s (private), follower %s", topic, partList(r.parts), r.victim, r.follower)
	return nil
}

// placed reports whether every partition of the queue has a live owner and
// one in-sync follower.
func (r *run) placed(v *topologyView) bool {
	n := 0
	for _, p := range v.Partitions {
		if p.Topic != topic {
			continue
		}
		if p.Owner == "" || !p.OwnerLive || len(p.Followers) != 1 || !p.Followers[0].InSync {
			return false
		}
		n++
	}
	return n == r.cfg.Partitions
}

func partList(parts []uint32) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprintf("p%d", p)
	}
	return strings.Join(s, ",")
}

// event records and announces a crash or a restart.
func (r *run) event(label, node string, at time.Duration) Event {
	e := Event{At: secs(at), Label: label, Node: node}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	return e
}

// crashes is the scripted part: steady traffic, the private owner killed
// and restarted, the public broker killed and restarted, more traffic.
func (r *run) crashes(ctx context.Context) error {
	cfg := &r.cfg
	if !sleepCtx(ctx, cfg.Steady) {
		return ctx.Err()
	}

	// 1. The private owner of the client's partitions crashes.
	victim := r.cl.node(r.victim)
	if err := r.crash(victim, evPrivateKilled); err != nil {
		return err
	}
	if !sleepCtx(ctx, cfg.PrivateDown) {
		return ctx.Err()
	}
	if err := r.restart(ctx, victim, evPrivateRestarted); err != nil {
		return err
	}
	if !sleepCtx(ctx, cfg.Settle) {
		return ctx.Err()
	}

	// 2. The public broker — the client's only way in — crashes.
	pub := r.cl.public()
	if err := r.crash(pub, evPublicKilled); err != nil {
		return err
	}
	if !sleepCtx(ctx, cfg.PublicDown) {
		return ctx.Err()
	}
	if err := r.restart(ctx, pub, evPublicRestarted); err != nil {
		return err
	}
	if !sleepCtx(ctx, cfg.After) {
		return ctx.Err()
	}
	return nil
}

// crash kills n with SIGKILL, by PID, and starts measuring the recovery.
func (r *run) crash(n *node, label string) error {
	pid := n.pid()
	at := r.led.now()
	e := r.event(label, n.id, at)
	r.mu.Lock()
	r.timings = append(r.timings, Timing{Crash: label, Node: n.id, At: e.At})
	r.mu.Unlock()
	r.tx.say("*** %s: SIGKILL to %s (pid %d)", label, n.id, pid)
	if err := n.kill(); err != nil {
		return err
	}
	// Timed from the signal, counting only messages sent once the process
	// is gone (none of them can have been confirmed by it).
	r.led.addMark(label, at)
	r.tx.say("%s (pid %d) is gone: %s", n.id, pid, n.exitStatus())
	return nil
}

// restart starts n again on its data directory and ports and waits until
// it is ready.
func (r *run) restart(ctx context.Context, n *node, label string) error {
	at := r.led.now()
	if err := r.cl.start(n); err != nil {
		return err
	}
	e := r.event(label, n.id, at)
	if n == r.cl.public() {
		// The client's way in is back: how soon does it confirm again?
		r.led.addMark(label, at)
	}
	r.tx.say("*** %s: %s started again (pid %d) on its data directory", label, n.id, n.pid())
	if err := r.cl.waitReady(ctx, n, 90*time.Second); err != nil {
		return err
	}
	ready := secs(r.led.now()) - e.At
	r.tx.say("%s ready (/readyz 200) %.2f s after its restart", n.id, ready)
	r.mu.Lock()
	for i := range r.timings {
		if r.timings[i].Node == n.id && r.timings[i].RestartedAt == 0 {
			r.timings[i].RestartedAt = e.At
			r.timings[i].ReadyAfter = ready
		}
	}
	r.mu.Unlock()
	return nil
}

// drain stops the producer, waits for every outcome, then waits (at most
// Drain) until every confirmed message was delivered, and stops the
// consumer.
func (r *run) drain(ctx context.Context) error {
	r.tx.say("publishing stops; waiting for the outcome of every publish in flight")
	if err := r.tr.stopProducing(r.cfg.PublishTimeout + 30*time.Second); err != nil {
		return err
	}
	start := time.Now()
	left := r.led.undelivered()
	r.tx.say("%d confirmed messages not delivered yet; draining for at most %v", left, r.cfg.Drain)
	for left > 0 && time.Since(start) < r.cfg.Drain {
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
		left = r.led.undelivered()
	}
	// A little longer, so a late duplicate is counted too.
	sleepCtx(ctx, time.Second)
	r.tx.say("drained after %.2f s: %d confirmed messages never delivered", time.Since(start).Seconds(), left)
	return nil
}

// pollOwners reads the assignments of the client's partitions twice a
// second from the first broker whose admin API answers, and reports every
// change of owner, followers or epoch.
func (r *run) pollOwners(stop <-chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := map[uint32]string{}
	for i := 0; i < 1_000_000 && time.Now().Before(r.deadline); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, from, err := r.cl.anyTopology(ctx)
		cancel()
		if err == nil {
			for _, p := range v.Partitions {
				if p.Topic != topic || !slices.Contains(r.parts, p.Partition) {
					continue
				}
				r.ownersMu.Lock()
				old, seen := r.owners[p.Partition]
				if r.owners == nil {
					r.owners = map[uint32]string{}
				}
				r.owners[p.Partition] = p.Owner
				r.ownersMu.Unlock()
				desc := describe(p)
				if seen && desc != last[p.Partition] {
					r.tx.say("%s p%d: %s (as %s sees it)", topic, p.Partition, desc, from)
				}
				last[p.Partition] = desc
				if seen && old != p.Owner {
					r.mu.Lock()
					for j := range r.timings {
						if r.timings[j].Node == old && r.timings[j].OwnerAfter == "" {
							r.timings[j].OwnerAfter = p.Owner
							r.timings[j].FailoverSeen = secs(r.led.now()) - r.timings[j].At
						}
					}
					r.mu.Unlock()
				}
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// describe renders a partition's assignment: epoch, owner, followers.
func describe(p partitionView) string {
	s := fmt.Sprintf("epoch %d, owner %s", p.Epoch, p.Owner)
	if !p.OwnerLive {
		s += " (not live)"
	}
	if len(p.Followers) == 0 {
		return s + ", no follower"
	}
	for _, f := range p.Followers {
		s += ", follower " + f.Node
		if !f.InSync {
			s += " (catching up)"
		} else {
			s += " (in sync)"
		}
	}
	return s
}

func (r *run) ownersLine() string {
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	if r.owners == nil {
		return "?"
	}
	var s []string
	for _, p := range r.parts {
		o := r.owners[p]
		if o == "" {
			o = "none"
		}
		s = append(s, fmt.Sprintf("p%d=%s", p, o))
	}
	return strings.Join(s, " ")
}

// report prints one line per second of traffic, for the second that just
// ended, and the recoveries measured meanwhile.
func (r *run) report(stop <-chan struct{}) {
	first := int(r.led.now()/time.Second) + 1 // the first whole second
	for sec := first; sec < first+100_000 && time.Now().Before(r.deadline); sec++ {
		wait := time.Until(r.t0.Add(time.Duration(sec+1)*time.Second + 20*time.Millisecond))
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		s := r.led.secondAt(sec)
		line := fmt.Sprintf("second %3d: sent %5d/s  confirmed %5d/s  delivered %5d/s", sec, s.published, s.confirmed, s.delivered)
		if s.redelivered > 0 {
			line += fmt.Sprintf(" (+%d again)", s.redelivered)
		}
		line += "  errors " + codesLine(s.byCode) + "  owners " + r.ownersLine()
		r.tx.say("%s", line)
		for _, news := range r.led.markNews() {
			r.tx.say("%s", news)
		}
	}
}

func secs(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}
