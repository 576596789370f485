package integration

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// A partition owner cut off from the other brokers by the network while
// it keeps running and keeps its clients (harness_netns_test.go: three
// public brokers, each in a network namespace of its own on one bridge,
// one raft cluster, replication at its defaults: two followers,
// majority_durable). For an owner that is not the raft leader and for one
// that is, over tcp, and for the latter over quic:
//
//   - before the cut: confirmed publishes to the partition, its two
//     followers in sync as every node sees it;
//   - the cut: blackhole routes between the owner X and each other broker,
//     in both namespaces; the test process still reaches X;
//   - a single synchronous publisher on one connection to X: no publish it
//     begins once the cut is in place is ever confirmed (the copies a
//     confirm needs cannot reach the followers, and X cannot record a
//     smaller in-sync set), and every answer is ERROR 500 naming
//     replication.confirm_timeout_ms or ERROR 503 (once the network is
//     healed also a REDIRECT, which it must get once X follows again). A
//     publish in flight when the cut began may be confirmed: it counts as
//     confirmed;
//   - a client that knows only the two others (and whose dials to X fail,
//     as they would on their side of the cut) publishes with confirms: the
//     others show another owner with a higher epoch, and its confirms
//     resume;
//   - the heal: X becomes a follower of the partition and in sync again;
//     the others never show it as the owner again, and its own view moves
//     on to the new owner and epoch;
//   - everything is consumed through the others: every confirmed message is
//     delivered, and none that X took after the cut (its unconfirmed tail is
//     cut when it rejoins). Duplicates and other unconfirmed deliveries are
//     counted apart.
//
// Times from the cut and the heal are logged, never asserted. So is a
// moment after the heal, seen mostly when X was the raft leader, when X is
// ready again (a new liveness lease) while its own view still names it the
// owner in the old epoch: it then takes publishes into its log as owner,
// which end in ERROR 500 (nothing can confirm them) and are cut when it
// follows.
//
// The private-owner case runs the same scenario with node-2 and node-3
// private and X one of them: the others' client knows only the public
// node-1 (the gateway), which forwards to whichever private broker owns
// the partition, and its dialer fails the test on any other address; X's
// own publisher is an internal client (the test process reaches X).
func TestIsolatedOwnerFencedThenRejoins(t *testing.T) {
	requireNetns(t)
	// Both roles over tcp; over quic the one that also takes the raft
	// leader away; a private owner over tcp (about 10 s each: the four stay
	// within the CI budget).
	for _, c := range []struct {
		tr      string
		leader  bool
		private bool
	}{{"tcp", false, false}, {"tcp", true, false}, {"quic", true, false}, {"tcp", false, true}} {
		name := c.tr + "/owner"
		if c.private {
			name = c.tr + "/private-owner"
		}
		if c.leader {
			name += "-and-raft-leader"
		}
		t.Run(name, func(t *testing.T) { isolatedOwner(t, c.tr, c.leader, c.private) })
	}
}

const (
	// isoConfirmTimeoutMS shortens replication.confirm_timeout_ms (5000 by
	// default) so that the isolated owner answers sooner.
	isoConfirmTimeoutMS = 1500
	// isoXPublishTimeout bounds one publish to X: far above the confirm
	// timeout, so that no answer in time is a hang, not a slow machine.
	isoXPublishTimeout = time.Duration(isoConfirmTimeoutMS)*time.Millisecond + 15*time.Second
	isoPoll            = 100 * time.Millisecond
)

// isoClock holds the moments of the scenario (zero until they happen).
type isoClock struct {
	cutBegin, cutDone, heal atomic.Int64 // unix nanos
}

func isoAt(v *atomic.Int64) time.Time {
	if n := v.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func isoMark(v *atomic.Int64) time.Time {
	now := time.Now()
	v.Store(now.UnixNano())
	return now
}

// isoLedger is what the clients saw, by payload.
type isoLedger struct {
	mu        sync.Mutex
	confirmed map[string]bool
	xAfterCut map[string]bool // begun on X after the cut: may be stored on X, never confirmed
	delivered map[string]int
	offsets   map[string][]uint64 // delivery offsets of X's after-cut messages, for the report
}

func (l *isoLedger) confirm(p string) {
	l.mu.Lock()
	l.confirmed[p] = true
	l.mu.Unlock()
}

// xPublisher is the client of the isolated owner: one connection to X, one
// confirmed publish at a time, each answer classified.
type xPublisher struct {
	mu           sync.Mutex
	before       int            // confirmed publishes begun before the cut was complete
	inFlightOK   int            // of which confirmed after the cut began
	afterCut     int            // publishes begun after the cut was complete
	answers      map[string]int // non-confirm answers by kind
	firstErr     time.Time      // first error answer after the cut began
	first503     time.Time      // first 503 after the cut began (X's lease no longer surely valid)
	redirectedAt time.Time
	violations   []string // confirms after the cut; answers of a kind not allowed
	reconnects   int
	tookHealed   int    // publishes begun after the heal that X took as owner (answered 500 after the confirm timeout)
	timeline     []xRun // answers after the cut began, runs of one kind
	done         chan struct{}
}

// xRun is a run of answers of one kind from the isolated owner, timed
// from the start of the cut.
type xRun struct {
	kind        string
	n           int
	first, last time.Duration
}

func (xp *xPublisher) note(kind string, d time.Duration) {
	if n := len(xp.timeline); n > 0 && xp.timeline[n-1].kind == kind {
		xp.timeline[n-1].n++
		xp.timeline[n-1].last = d
		return
	}
	xp.timeline = append(xp.timeline, xRun{kind: kind, n: 1, first: d, last: d})
}

func (xp *xPublisher) timelineString() string {
	var parts []string
	for _, r := range xp.timeline {
		parts = append(parts, fmt.Sprintf("%s ×%d [%v…%v]", r.kind, r.n, r.first.Round(time.Millisecond), r.last.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

func (xp *xPublisher) errorsAfterCut() int {
	xp.mu.Lock()
	defer xp.mu.Unlock()
	return xp.answers["500 confirm_timeout_ms"] + xp.answers["503"]
}

func (xp *xPublisher) confirmedBefore() int {
	xp.mu.Lock()
	defer xp.mu.Unlock()
	return xp.before
}

// answerKind names a broker answer to a PUBLISH.
func answerKind(f client.Frame, err error) (kind string, offset uint64, ok bool) {
	if err != nil {
		return "no answer: " + err.Error(), 0, false
	}
	switch f.Op {
	case wire.OpPublishOK:
		var po wire.PublishOK
		if derr := f.Decode(&po); derr != nil {
			return "malformed PUBLISH_OK", 0, false
		}
		return "PUBLISH_OK", po.Offset, true
	case wire.OpError:
		var eb wire.ErrorBody
		if derr := eb.Decode(f.Body); derr != nil {
			return "malformed ERROR", 0, false
		}
		switch {
		case eb.Code == 500 && strings.Contains(eb.Message, "replication.confirm_timeout_ms"):
			return "500 confirm_timeout_ms", 0, false
		case eb.Code == 503:
			return "503", 0, false
		}
		return fmt.Sprintf("ERROR %d %q", eb.Code, eb.Message), 0, false
	case wire.OpRedirect:
		return "REDIRECT", 0, false
	}
	return "op " + f.Op.String(), 0, false
}

// runX publishes to X until stop, a REDIRECT (X knows it no longer owns
// the partition) or its bounds.
func (lc *labCluster) runX(t *testing.T, x *labNode, part uint32, led *isoLedger, clk *isoClock, stop <-chan struct{}) *xPublisher {
	xp := &xPublisher{answers: map[string]int{}, done: make(chan struct{})}
	logger := testLogger(t, "x-publisher")
	dial := func() (*client.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		return client.DialConn(ctx, x.Addr, client.ConnConfig{Username: lc.user, Password: lc.pass, TLS: lc.tls,
			Dial: lc.guard.dial, Logger: logger})
	}
	conn, err := dial()
	if err != nil {
		t.Fatalf("x-publisher: dial %s: %v", x.Addr, err)
	}
	go func() {
		defer close(xp.done)
		defer func() { conn.Close() }()
		deadline := time.Now().Add(3 * time.Minute)
		for i := 0; i < 200_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			payload := fmt.Sprintf("x-%d", i)
			cutDone := isoAt(&clk.cutDone)
			healedBefore := !isoAt(&clk.heal).IsZero()
			began := time.Now()
			after := !cutDone.IsZero()
			if after {
				led.mu.Lock()
				led.xAfterCut[payload] = true
				led.mu.Unlock()
			}
			ctx, cancel := context.WithTimeout(context.Background(), isoXPublishTimeout)
			f, err := conn.Do(ctx, wire.OpPublish, &wire.Publish{Topic: "orders", Partition: part, RequireConfirm: true,
				Payload: []byte(payload)})
			cancel()
			kind, off, ok := answerKind(f, err)
			now := time.Now()
			cutBegin, healAt := isoAt(&clk.cutBegin), isoAt(&clk.heal)
			xp.mu.Lock()
			if !cutBegin.IsZero() {
				tag := kind
				if healAt.IsZero() {
					tag = "cut:" + tag
				} else {
					tag = "healed:" + tag
				}
				xp.note(tag, now.Sub(cutBegin))
			}
			switch {
			case ok && after:
				xp.violations = append(xp.violations, fmt.Sprintf("%s begun %v after the cut was complete was CONFIRMED by the isolated owner at offset %d (answer %v after the cut)",
					payload, began.Sub(cutDone).Round(time.Millisecond), off, now.Sub(cutDone).Round(time.Millisecond)))
			case ok:
				xp.before++
				if !cutBegin.IsZero() {
					xp.inFlightOK++
				}
			default:
				if after {
					xp.afterCut++
				}
				xp.answers[kind]++
				if xp.firstErr.IsZero() && !cutBegin.IsZero() {
					xp.firstErr = now
				}
				if xp.first503.IsZero() && !cutBegin.IsZero() && kind == "503" {
					xp.first503 = now
				}
				if healedBefore && kind == "500 confirm_timeout_ms" {
					xp.tookHealed++
				}
				allowed := kind == "500 confirm_timeout_ms" || kind == "503" || (kind == "REDIRECT" && !healAt.IsZero())
				if !allowed {
					when := "before the cut was complete"
					if after {
						when = began.Sub(cutDone).Round(time.Millisecond).String() + " after the cut"
					}
					xp.violations = append(xp.violations, fmt.Sprintf("%s (begun %s): answered %s, want ERROR 500 naming replication.confirm_timeout_ms or 503 (or, once healed, REDIRECT)",
						payload, when, kind))
				}
				if kind == "REDIRECT" {
					xp.redirectedAt = now
				}
			}
			xp.mu.Unlock()
			if ok {
				led.confirm(payload)
				continue
			}
			if kind == "REDIRECT" {
				return // X follows the new owner now
			}
			if err != nil && conn.Err() != nil {
				// The connection ended: dial again (bounded), and say so.
				xp.mu.Lock()
				xp.reconnects++
				n := xp.reconnects
				xp.mu.Unlock()
				if n > 5 {
					return
				}
				conn.Close()
				if conn, err = dial(); err != nil {
					xp.mu.Lock()
					xp.violations = append(xp.violations, fmt.Sprintf("could not dial X again: %v", err))
					xp.mu.Unlock()
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond): // 503s come at once
			}
		}
	}()
	return xp
}

// othersPublisher is the client that knows only the brokers X was cut from.
type othersPublisher struct {
	mu          sync.Mutex
	confirmed   int
	failed      map[string]int // by error
	firstOK     time.Time
	refusedX    atomic.Int64 // dials of X refused (the client is on the other side of the cut)
	notRetrying []string
	done        chan struct{}
}

func (op *othersPublisher) confirmedSoFar() int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.confirmed
}

func errKind(err error) string {
	var be *client.Error
	switch {
	case errors.As(err, &be):
		if be.Code == 500 && strings.Contains(be.Message, "confirm_timeout_ms") {
			return "500 confirm_timeout_ms"
		}
		return fmt.Sprintf("ERROR %d", be.Code)
	case errors.Is(err, client.ErrOutcomeUnknown):
		return "outcome unknown"
	case errors.Is(err, client.ErrTooManyRedirects):
		return "too many redirects"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) {
		return "network"
	}
	return "other"
}

// runOthers publishes with confirms through c from start (closed) until stop.
func runOthers(c *client.Client, part uint32, op *othersPublisher, led *isoLedger, start, stop <-chan struct{}) {
	go func() {
		defer close(op.done)
		select {
		case <-start:
		case <-stop:
			return
		}
		pub := c.Publisher("orders", client.PublisherOptions{})
		deadline := time.Now().Add(3 * time.Minute)
		for i := 0; i < 50_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			payload := fmt.Sprintf("o-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := pub.PublishConfirmed(ctx, client.Message{Partition: u32(part), Payload: []byte(payload)})
			cancel()
			now := time.Now()
			op.mu.Lock()
			if err == nil {
				op.confirmed++
				if op.firstOK.IsZero() {
					op.firstOK = now
				}
			} else {
				op.failed[errKind(err)]++
				if !client.Retryable(err) && len(op.notRetrying) < 10 {
					op.notRetrying = append(op.notRetrying, fmt.Sprintf("%s: %v", payload, err))
				}
			}
			op.mu.Unlock()
			if err == nil {
				led.confirm(payload)
				continue
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

// othersClient is a client on the others' side of the cut: it knows the
// others and fails to reach X; with private brokers it knows only the
// public node-1, and may dial nothing else.
func (lc *labCluster) othersClient(t *testing.T, x *labNode, others []*labNode, private bool, refusedX *atomic.Int64) *client.Client {
	if private {
		return lc.newLabClient(t, lc.gatewayDial(t, lc.nodes[0]), lc.nodes[0])
	}
	return lc.newLabClient(t, lc.guard.across(x.listeners(), refusedX), others...)
}

// isoWait polls cond every isoPoll until it holds (true) or within passes
// (false).
func isoWait(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for range int(within/isoPoll) + 1 {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			break
		}
		time.Sleep(isoPoll)
	}
	return cond()
}

func isoSince(from, to time.Time) string {
	if from.IsZero() || to.IsZero() {
		return "never"
	}
	return to.Sub(from).Round(time.Millisecond).String()
}

func isolatedOwner(t *testing.T, tr string, leader, private bool) {
	started := time.Now()
	lab := newNetLab(t, 3)
	var lc *labCluster
	if private {
		lc = startLabClusterWith(t, lab, tr, func(i int) []string {
			if i == 0 {
				return nil
			}
			nowhere := netip.AddrPortFrom(lab.hosts[i].addr, labBrokerPort+1).String()
			return []string{"--broker.visibility=private", "--broker.listener.advertise=" + nowhere}
		})
	} else {
		lc = startLabCluster(t, lab, tr)
	}
	lc.setRuntime(lc.nodes[0], "replication", "confirm_timeout_ms", isoConfirmTimeoutMS)
	setup := lc.newLabClient(t, lc.guard.dial, lc.nodes...)
	if _, err := setup.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	// The partition to cut off: one owned by the controller (the raft
	// leader), or by another node.
	var ctrl *labNode
	owners := map[uint32]string{}
	if !isoWait(2*waitTimeout, func() bool {
		ctrl = lc.controller()
		v, err := lc.topology(lc.nodes[0])
		if ctrl == nil || err != nil {
			return false
		}
		for _, p := range v.Partitions {
			if p.Topic == "orders" && p.Owner != "" && p.OwnerLive {
				owners[p.Partition] = p.Owner
			}
		}
		return len(owners) == 3
	}) {
		t.Fatalf("no controller, or orders not placed: controller %v, owners %v", ctrl != nil, owners)
	}
	part := uint32(3)
	for p := range uint32(3) {
		if (owners[p] == ctrl.id) == leader && (!private || owners[p] != lc.nodes[0].id) && part == 3 {
			part = p
		}
	}
	if part == 3 {
		t.Fatalf("no partition fits (leader %v): controller %s, owners %v", leader, ctrl.id, owners)
	}
	led := &isoLedger{confirmed: map[string]bool{}, xAfterCut: map[string]bool{}, delivered: map[string]int{}, offsets: map[string][]uint64{}}
	for i := range 20 {
		payload := fmt.Sprintf("s-%d", i)
		publish(t, setup, "orders", client.Message{Partition: u32(part), Payload: []byte(payload)})
		led.confirm(payload)
	}
	// The owner and its two followers in sync, as every node sees it.
	var before labPartition
	if !isoWait(2*waitTimeout, func() bool {
		for _, nd := range lc.nodes {
			p, err := lc.partition(nd, "orders", part)
			if err != nil || p.Owner == "" || !p.OwnerLive || len(p.InSync) != 2 {
				return false
			}
			if nd != lc.nodes[0] && (p.Owner != before.Owner || p.Epoch != before.Epoch) {
				return false
			}
			before = p
		}
		return true
	}) {
		t.Fatalf("partition %d: no owner with two in-sync followers seen alike by every node; last %+v", part, before)
	}
	var x *labNode
	var others []*labNode
	for _, nd := range lc.nodes {
		if nd.id == before.Owner {
			x = nd
		} else {
			others = append(others, nd)
		}
	}
	if x == nil || len(others) != 2 {
		t.Fatalf("owner %q is not one of the nodes", before.Owner)
	}
	t.Logf("partition %d: owner %s (%s), epoch %d, in sync %v; controller %s", part, x.id, x.host.addr, before.Epoch, before.InSync, ctrl.id)

	clk := &isoClock{}
	stop, start := make(chan struct{}), make(chan struct{})
	var stopOnce sync.Once
	stopAll := func() { stopOnce.Do(func() { close(stop) }) }
	xp := lc.runX(t, x, part, led, clk, stop)
	op := &othersPublisher{failed: map[string]int{}, done: make(chan struct{})}
	oc := lc.othersClient(t, x, others, private, &op.refusedX)
	runOthers(oc, part, op, led, start, stop)
	// Whatever happens, the publishers end before the clients close.
	t.Cleanup(func() {
		stopAll()
		for _, d := range []chan struct{}{xp.done, op.done} {
			select {
			case <-d:
			case <-time.After(isoXPublishTimeout + 5*time.Second):
				t.Errorf("a publisher did not stop")
			}
		}
	})
	if !isoWait(waitTimeout, func() bool { return xp.confirmedBefore() >= 20 }) {
		t.Fatalf("the publisher on %s confirmed %d publishes before the cut, want 20", x.id, xp.confirmedBefore())
	}

	// The cut.
	isoMark(&clk.cutBegin)
	for _, o := range others {
		if err := lab.cut(x.host, o.host); err != nil {
			t.Fatal(err)
		}
	}
	cutDone := isoMark(&clk.cutDone)
	close(start)
	t.Logf("cut %s (%s) from %s and %s in %v", x.id, x.host.addr, others[0].id, others[1].id, cutDone.Sub(isoAt(&clk.cutBegin)).Round(time.Millisecond))

	// Failover, as the others see it.
	var after labPartition
	var failoverAt time.Time
	var xView labPartition
	var xReadyDuringCut = -1
	ok := isoWait(4*testTTL+2*waitTimeout, func() bool {
		if failoverAt.IsZero() {
			for _, o := range others {
				p, err := lc.partition(o, "orders", part)
				if err == nil && p.Owner != "" && p.Owner != x.id && p.Epoch > before.Epoch {
					failoverAt, after = time.Now(), p
					break
				}
			}
		}
		if xReadyDuringCut != 503 {
			if code, _, err := lc.http(x, "GET", "/readyz", ""); err == nil {
				xReadyDuringCut = code
			}
		}
		xp.mu.Lock()
		lapsed := !xp.first503.IsZero()
		xp.mu.Unlock()
		return !failoverAt.IsZero() && op.confirmedSoFar() >= 20 && xp.errorsAfterCut() >= 2 && lapsed &&
			time.Since(cutDone) >= 2*testTTL
	})
	if v, err := lc.partition(x, "orders", part); err == nil {
		xView = v
	}
	if !ok {
		xp.mu.Lock()
		answers := fmt.Sprint(xp.answers)
		xp.mu.Unlock()
		op.mu.Lock()
		failed := fmt.Sprint(op.failed)
		op.mu.Unlock()
		t.Fatalf("while cut: failover seen %v (%+v), %d confirms through the others (failures %s), X answers %s",
			!failoverAt.IsZero(), after, op.confirmedSoFar(), failed, answers)
	}
	if !slices.ContainsFunc(others, func(o *labNode) bool { return o.id == after.Owner }) {
		t.Errorf("failover to %q, want one of the others", after.Owner)
	}
	t.Logf("failover: %s → %s, epoch %d → %d; X's own view while cut: owner %s epoch %d; X /readyz while cut: %d",
		x.id, after.Owner, before.Epoch, after.Epoch, xView.Owner, xView.Epoch, xReadyDuringCut)

	// The heal.
	healAt := isoMark(&clk.heal)
	if err := lab.heal(); err != nil {
		t.Fatal(err)
	}
	// Until X is an in-sync follower as the others see it, and its own
	// view has moved on too: meanwhile, note when X is ready (its lease
	// surely valid) while its own view still names it the owner in the
	// old epoch (it would serve the partition then).
	var inSyncAt, xMovedAt, staleFirst, staleLast time.Time
	var last, xLast labPartition
	var wrongOwner []string
	if !isoWait(2*waitTimeout+4*testTTL, func() bool {
		if xMovedAt.IsZero() {
			code, _, cerr := lc.http(x, "GET", "/readyz", "")
			xv, err := lc.partition(x, "orders", part)
			now := time.Now()
			switch {
			case err != nil:
			case xv.Owner == x.id && xv.Epoch <= before.Epoch:
				if cerr == nil && code == 200 {
					if staleFirst.IsZero() {
						staleFirst = now
					}
					staleLast = now
				}
			default:
				xMovedAt, xLast = now, xv
			}
		}
		if inSyncAt.IsZero() {
			ok := true
			for _, o := range others {
				p, err := lc.partition(o, "orders", part)
				if err != nil {
					ok = false
					break
				}
				if p.Owner == x.id {
					wrongOwner = append(wrongOwner, fmt.Sprintf("%s shows %s as owner in epoch %d", o.id, x.id, p.Epoch))
				}
				last = p
			}
			found, inSync := last.follower(x.id)
			if ok && found && inSync && slices.Contains(last.InSync, x.id) && last.Owner != x.id {
				inSyncAt = time.Now()
			}
		}
		return !inSyncAt.IsZero() && !xMovedAt.IsZero()
	}) {
		t.Fatalf("after the heal, %s not an in-sync follower of partition %d within the bound (others' view %+v), or its own view did not move on (%v)",
			x.id, part, last, !xMovedAt.IsZero())
	}
	if !staleFirst.IsZero() {
		t.Errorf("after the heal, %s was ready (its lease surely valid) while its own view still named it the owner of partition %d in epoch %d, from %v to at least %v after the heal; its view moved on (owner %s, epoch %d) %v after the heal",
			x.id, part, before.Epoch, staleFirst.Sub(healAt).Round(time.Millisecond), staleLast.Sub(healAt).Round(time.Millisecond),
			xLast.Owner, xLast.Epoch, xMovedAt.Sub(healAt).Round(time.Millisecond))
	}
	for _, w := range wrongOwner {
		t.Errorf("after the heal: %s", w)
	}
	// Every node, X included, agrees: X follows, in an epoch past the old one.
	var views []string
	if !isoWait(waitTimeout, func() bool {
		views = views[:0]
		for _, nd := range lc.nodes {
			p, err := lc.partition(nd, "orders", part)
			if err != nil {
				return false
			}
			views = append(views, fmt.Sprintf("%s: owner %s epoch %d in sync %v", nd.id, p.Owner, p.Epoch, p.InSync))
			if p.Owner == x.id || p.Epoch <= before.Epoch {
				return false
			}
		}
		return true
	}) {
		t.Errorf("after the heal the nodes do not all show %s as a follower in a newer epoch: %v", x.id, views)
	}
	t.Logf("after the heal: %v", views)
	// A few more confirms through the others with X back, and X, a
	// follower again, redirects its publisher to the owner (which ends it);
	// then stop.
	base := op.confirmedSoFar()
	if !isoWait(waitTimeout, func() bool { return op.confirmedSoFar() >= base+20 }) {
		t.Errorf("no 20 confirms through the others after the heal (%d)", op.confirmedSoFar()-base)
	}
	select {
	case <-xp.done:
	case <-time.After(isoXPublishTimeout):
	}
	xp.mu.Lock()
	if xp.redirectedAt.IsZero() {
		t.Errorf("%s, a follower again, did not redirect its publisher to the owner within %v after it was in sync: %s", x.id, isoXPublishTimeout, xp.timelineString())
	}
	xp.mu.Unlock()
	stopAll()
	for _, d := range []chan struct{}{xp.done, op.done} {
		select {
		case <-d:
		case <-time.After(isoXPublishTimeout + 5*time.Second):
			t.Fatal("a publisher did not stop")
		}
	}

	// Consume everything through the others.
	var refusedC atomic.Int64
	cc := lc.othersClient(t, x, others, private, &refusedC)
	sub := subscribe(t, cc, "orders", client.SubscribeOptions{Prefetch: 64})
	missing := func() int {
		led.mu.Lock()
		defer led.mu.Unlock()
		n := 0
		for p := range led.confirmed {
			if led.delivered[p] == 0 {
				n++
			}
		}
		return n
	}
	consumeUntil := time.Now().Add(2 * waitTimeout)
	for i := 0; i < 1_000_000 && time.Now().Before(consumeUntil); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("consuming: %v", err)
			}
			if missing() == 0 {
				break // everything confirmed is in, and two quiet seconds for the rest
			}
			continue
		}
		p := string(d.Payload)
		led.mu.Lock()
		led.delivered[p]++
		if led.xAfterCut[p] {
			led.offsets[p] = append(led.offsets[p], d.Offset)
		}
		led.mu.Unlock()
		_ = d.Ack(context.Background())
	}
	sub.Close()

	// The ledger.
	led.mu.Lock()
	var lost, xDelivered []string
	dups, unconfirmed, unconfirmedX, unconfirmedO := 0, 0, 0, 0
	for p := range led.confirmed {
		if led.delivered[p] == 0 {
			lost = append(lost, p)
		}
	}
	for p, n := range led.delivered {
		dups += n - 1
		if led.confirmed[p] {
			continue
		}
		unconfirmed++
		switch {
		case led.xAfterCut[p]:
			xDelivered = append(xDelivered, fmt.Sprintf("%s at offset(s) %v", p, led.offsets[p]))
		case strings.HasPrefix(p, "x-"):
			unconfirmedX++
		default:
			unconfirmedO++
		}
	}
	confirmed, delivered, xAfter := len(led.confirmed), len(led.delivered), len(led.xAfterCut)
	led.mu.Unlock()
	slices.Sort(lost)
	slices.Sort(xDelivered)
	if len(lost) > 0 {
		t.Errorf("%d confirmed messages lost, e.g. %v", len(lost), lost[:min(len(lost), 20)])
	}
	if len(xDelivered) > 0 {
		t.Errorf("%d messages the isolated owner took after the cut (never confirmed) were delivered: %v", len(xDelivered), xDelivered[:min(len(xDelivered), 20)])
	}
	xp.mu.Lock()
	for _, v := range xp.violations {
		t.Errorf("isolated owner: %s", v)
	}
	if xp.afterCut == 0 {
		t.Errorf("no publish to the isolated owner began after the cut: the test proved nothing")
	}
	xAnswers, xBefore, xInFlight, xAfterN, xFirstErr, xFirst503, xRedirect, xReconnects := fmt.Sprint(xp.answers), xp.before, xp.inFlightOK, xp.afterCut, xp.firstErr, xp.first503, xp.redirectedAt, xp.reconnects
	xTimeline, xTookHealed := xp.timelineString(), xp.tookHealed
	xp.mu.Unlock()
	if xTookHealed > 0 {
		t.Errorf("%d publishes begun after the heal were taken by %s as owner in the old epoch (they waited out the confirm timeout)", xTookHealed, x.id)
	}
	op.mu.Lock()
	oConfirmed, oFailed, oFirst, oNotRetrying := op.confirmed, fmt.Sprint(op.failed), op.firstOK, op.notRetrying
	op.mu.Unlock()
	for _, e := range oNotRetrying {
		t.Errorf("client of the others: a publish failed with an error not worth retrying: %s", e)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "isolated owner over %s (heartbeat %d ms, TTL %v, confirm timeout %d ms)\n", tr, testHeartbeatMS, testTTL, isoConfirmTimeoutMS)
	fmt.Fprintf(&b, "  partition %d: %s (epoch %d) → %s (epoch %d)\n", part, x.id, before.Epoch, after.Owner, after.Epoch)
	fmt.Fprintf(&b, "  X publisher: %d confirmed before the cut (%d of them answered after it began), %d begun after the cut, 0 confirmed of those; answers %s; reconnects %d\n",
		xBefore, xInFlight, xAfterN, xAnswers, xReconnects)
	fmt.Fprintf(&b, "  X's answers from the start of the cut (heal at %v): %s\n", healAt.Sub(isoAt(&clk.cutBegin)).Round(time.Millisecond), xTimeline)
	fmt.Fprintf(&b, "  others' publisher: %d confirmed, failures %s, dials of X refused %d\n", oConfirmed, oFailed, op.refusedX.Load())
	fmt.Fprintf(&b, "  confirmed %d, delivered %d distinct, lost %d, duplicates %d\n", confirmed, delivered, len(lost), dups)
	fmt.Fprintf(&b, "  delivered but never confirmed: %d (X after the cut %d of %d; X before the cut %d; others %d)\n",
		unconfirmed, len(xDelivered), xAfter, unconfirmedX, unconfirmedO)
	fmt.Fprintf(&b, "  cut → first error on X          %s\n", isoSince(cutDone, xFirstErr))
	fmt.Fprintf(&b, "  cut → first 503 on X            %s\n", isoSince(cutDone, xFirst503))
	fmt.Fprintf(&b, "  cut → failover visible          %s\n", isoSince(cutDone, failoverAt))
	fmt.Fprintf(&b, "  cut → first confirm via others  %s\n", isoSince(cutDone, oFirst))
	fmt.Fprintf(&b, "  heal → X redirects              %s\n", isoSince(healAt, xRedirect))
	fmt.Fprintf(&b, "  heal → X's own view moves on    %s\n", isoSince(healAt, xMovedAt))
	fmt.Fprintf(&b, "  heal → X ready, stale view      %s … %s (publishes begun after the heal that X took as owner: %d)\n",
		isoSince(healAt, staleFirst), isoSince(healAt, staleLast), xTookHealed)
	fmt.Fprintf(&b, "  heal → X in sync                %s\n", isoSince(healAt, inSyncAt))
	fmt.Fprintf(&b, "  whole scenario                  %s", time.Since(started).Round(time.Millisecond))
	t.Log(b.String())
}
