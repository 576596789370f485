package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// campaignKills is how many kill -9s TestKillCampaign makes: a short
// campaign by default (CI), FIBRIL_KILL_CAMPAIGN=N for a long one.
func campaignKills(t *testing.T) int {
	v := os.Getenv("FIBRIL_KILL_CAMPAIGN")
	if v == "" {
		return 5
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("FIBRIL_KILL_CAMPAIGN=%q: want a number of kills", v)
	}
	return n
}

// A kill campaign on real processes: one public broker (the client's way
// in) and two private ones, a client publishing with confirms to every
// partition in turn and consuming all the while. One broker at a time,
// chosen at random — an owner, a follower or the gateway — is killed
// (kill -9), restarted, and waited for until every partition has a live
// owner and a full in-sync set again, before the next kill. Confirmed,
// delivered, lost (must be 0) and duplicate counts are printed, with the
// time from each kill of an owner to the first confirmed publish on each
// partition it owned, by a prober that retries every 20 ms with 300 ms
// timeouts (kills of the raft leader apart). FIBRIL_KILL_CAMPAIGN
// sets the number of kills, FIBRIL_KILL_SEED the random seed (printed),
// FIBRIL_KILL_OWNERS=1 kills only brokers that own a partition (a
// failover-time measurement), FIBRIL_KILL_LAYOUT=public runs three public
// brokers instead, the client knowing all three (so that the raft leader
// may be an owner and be killed), FIBRIL_KILL_VICTIM=leader kills the raft
// leader every time (when it is not the gateway), FIBRIL_TEST_DEFAULT_TIMING=1
// the default heartbeat and liveness TTL. The placement controller is
// reported apart from the raft leader: they are separate elections.
func TestKillCampaign(t *testing.T) {
	kills := campaignKills(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FIBRIL_KILL_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("kill campaign: %d kills, seed %d (FIBRIL_KILL_SEED to repeat the choice of victims)", kills, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var rc *raftCluster
	var c *client.Client
	var gateway *clusterNode // the client's only way in; nil with FIBRIL_KILL_LAYOUT=public
	if os.Getenv("FIBRIL_KILL_LAYOUT") == "public" {
		var addrs []string // fixed: a restarted broker comes back where the client knows it
		rc = startRaftClusterWith(t, 3, func(i int) []string {
			addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(freePort(t)))
			return []string{"--broker.listener.bind=" + addrs[i]}
		})
		c = newClient(t, addrs[0], func(o *client.Options) { o.Addrs = addrs })
	} else {
		pc := startPrivateCluster(t, "tcp")
		rc, c, gateway = pc.raftCluster, pc.client(t), pc.nodes[0]
	}
	const parts = 3
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	rc.placed(rc.nodes[0], "orders", parts)
	tr := startTraffic(t, c, []uint32{0, 1, 2}, time.Second, time.Duration(kills)*2*time.Minute)
	progress := func(n int, what string) {
		t.Helper()
		tr.progress(t, n, what)
	}
	// probe publishes to partition p with short timeouts until one is
	// confirmed (bounded), and returns how long after at that was: the
	// failover time a producer that retries at once sees.
	probe := func(p uint32, at time.Time, tag string) (time.Duration, bool) {
		pub := c.Publisher("orders", client.PublisherOptions{})
		for i := 0; time.Since(at) < 4*testTTL+2*waitTimeout; i++ {
			payload := fmt.Sprintf("probe-%s-%d", tag, i)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(payload)})
			cancel()
			if err == nil {
				tr.mu.Lock()
				tr.confirmed[payload] = true
				tr.mu.Unlock()
				return time.Since(at), true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return 0, false
	}
	progress(100, "100 confirmed publishes before the first kill")
	roles := map[string]int{}
	var leaderTimes, otherTimes []time.Duration
	for k := 1; k <= kills; k++ {
		topo := rc.topology(rc.nodes[0])
		victim := rc.nodes[rng.IntN(len(rc.nodes))]
		if os.Getenv("FIBRIL_KILL_OWNERS") == "1" {
			var owners []*clusterNode
			for _, nd := range rc.nodes {
				if nd == gateway {
					continue
				}
				if slices.ContainsFunc(topo.Partitions, func(p partitionView) bool { return p.Topic == "orders" && p.Owner == nd.id }) {
					owners = append(owners, nd)
				}
			}
			if len(owners) > 0 {
				victim = owners[rng.IntN(len(owners))]
			}
		}
		raftLeader := ""
		for _, nd := range rc.nodes {
			if metric(t, nd.broker, "fibril_raft_is_leader") == 1 {
				raftLeader = nd.id
			}
		}
		if os.Getenv("FIBRIL_KILL_VICTIM") == "leader" && raftLeader != "" && rc.node(raftLeader) != gateway {
			victim = rc.node(raftLeader)
		}
		var owned []uint32
		for _, p := range topo.Partitions {
			if p.Topic == "orders" && p.Owner == victim.id {
				owned = append(owned, p.Partition)
			}
		}
		leader, controller := victim.id == raftLeader, false
		for _, n := range topo.Nodes {
			controller = controller || n.ID == victim.id && n.Controller
		}
		role := "follower"
		switch {
		case victim == gateway:
			role = "gateway"
		case len(owned) > 0:
			role = "owner"
		}
		if leader {
			role += "+raft-leader"
		}
		if controller {
			role += "+controller"
		}
		roles[role]++
		killed := time.Now()
		victim.kill()
		if victim != gateway {
			// One prober per partition, all at once.
			times := make([]time.Duration, len(owned))
			oks := make([]bool, len(owned))
			var wg sync.WaitGroup
			for i, p := range owned {
				wg.Go(func() { times[i], oks[i] = probe(p, killed, fmt.Sprintf("%d-%d", k, p)) })
			}
			wg.Wait()
			for i, p := range owned {
				if !oks[i] {
					t.Fatalf("kill %d (%s %s): partition %d took no confirmed publish", k, role, victim.id, p)
				}
				if leader {
					leaderTimes = append(leaderTimes, times[i])
				} else {
					otherTimes = append(otherTimes, times[i])
				}
			}
		}
		if victim == gateway {
			time.Sleep(testTTL) // the client's only way in: nothing is confirmed until it is back
		} else {
			progress(20, fmt.Sprintf("20 confirmed publishes after kill %d (%s %s)", k, role, victim.id))
		}
		rc.restart(victim)
		fullyReplicated(t, rc, parts)
		progress(20, fmt.Sprintf("20 confirmed publishes after %s came back", victim.id))
	}
	n, missing, dups, extra := tr.finish(t)
	var b strings.Builder
	fmt.Fprintf(&b, "kill campaign (seed %d, heartbeat %d ms, TTL %v)\n", seed, testHeartbeatMS, testTTL)
	fmt.Fprintf(&b, "  kills          %d %v\n", kills, roles)
	fmt.Fprintf(&b, "  confirmed      %d\n  failed         %d (errors; the message may be stored)\n", n, tr.failed)
	fmt.Fprintf(&b, "  delivered      %d distinct\n  lost           %d\n  duplicates     %d\n  unconfirmed delivered %d\n",
		len(tr.delivered), missing, dups, extra)
	fmt.Fprintf(&b, "  kill → first confirm on the victim's partitions: raft leader %s; others %s", durations(leaderTimes), durations(otherTimes))
	t.Log(b.String())
}

// fullyReplicated waits until every partition of orders has a live owner
// and an in-sync set of every other broker.
func fullyReplicated(t *testing.T, rc *raftCluster, parts int) {
	t.Helper()
	testkit.Eventually(t, 2*waitTimeout, "every partition with a live owner and a full in-sync set", func() bool {
		n := 0
		for _, p := range rc.topology(rc.nodes[0]).Partitions {
			if p.Topic == "orders" && p.OwnerLive && len(p.InSync) == len(rc.nodes)-1 {
				n++
			}
		}
		return n == parts
	})
}

// durations summarises a set of durations: count, median and maximum.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("n=%d median %v max %v", len(s), s[len(s)/2].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
}

// An owner frozen (SIGSTOP: a long pause, a VM stall, a partition that cuts
// it off) loses its partition to an in-sync follower; when it wakes up it
// is deposed: it cannot confirm anything (its lease is over and its
// followers serve the new epoch), its clients move, and it rejoins as a
// follower. Every confirmed message is delivered — a false confirm from
// the deposed owner would be a message its rejoining log drops.
func TestClusterFrozenOwnerIsDeposed(t *testing.T) {
	rc := startRaftCluster(t, 3)
	c := newClient(t, rc.nodes[0].Addr)
	const parts = 3
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	owners := rc.placed(rc.nodes[0], "orders", parts)
	fullyReplicated(t, rc, parts)
	var part uint32
	var victim *clusterNode
	for p, o := range owners {
		if o != rc.nodes[0].id {
			part, victim = p, rc.node(o)
			break
		}
	}
	if victim == nil {
		t.Fatal("node-1 owns every partition")
	}
	tr := startTraffic(t, c, []uint32{0, 1, 2}, time.Second, 3*time.Minute)
	tr.progress(t, 100, "100 confirmed publishes before the freeze")
	victim.signal(syscall.SIGSTOP)
	testkit.Eventually(t, 4*testTTL+waitTimeout, "the frozen owner's partition moves", func() bool {
		return rc.ownerOf(rc.nodes[0], "orders", part) != victim.id
	})
	tr.progress(t, 50, "50 confirmed publishes with the owner frozen")
	victim.signal(syscall.SIGCONT)
	testkit.Eventually(t, 2*waitTimeout, victim.id+" in sync again as a follower", func() bool {
		for _, p := range rc.topology(rc.nodes[0]).Partitions {
			if p.Topic == "orders" && p.Partition == part {
				return p.Owner != victim.id && slices.Contains(p.InSync, victim.id)
			}
		}
		return false
	})
	tr.progress(t, 50, "50 confirmed publishes after the thaw")
	n, missing, dups, extra := tr.finish(t)
	t.Logf("frozen owner: confirmed %d, failed %d, lost %d, duplicates %d, delivered without a confirm %d", n, tr.failed, missing, dups, extra)
}

// A rolling restart under load: each of three brokers in turn is drained
// (its partitions handed to in-sync followers), stopped once it owns
// nothing, started again and waited for until every partition is fully
// replicated, while a client of all three publishes with confirms to
// every partition and consumes. No confirmed message is lost, and the
// longest wait between two confirms on one partition is printed (the
// handoff moments).
func TestRollingRestartUnderLoad(t *testing.T) {
	// Fixed client ports: a restarted broker comes back where the client
	// knows it, as in a real deployment.
	var addrs []string
	rc := startRaftClusterWith(t, 3, func(i int) []string {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(freePort(t)))
		return []string{"--broker.listener.bind=" + addrs[i]}
	})
	c := newClient(t, addrs[0], func(o *client.Options) { o.Addrs = addrs })
	const parts = 3
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	rc.placed(rc.nodes[0], "orders", parts)
	fullyReplicated(t, rc, parts)
	tr := startTraffic(t, c, []uint32{0, 1, 2}, 2*time.Second, 5*time.Minute)
	tr.progress(t, 100, "100 confirmed publishes before the restarts")
	for _, nd := range rc.nodes {
		other := rc.nodes[0]
		if other == nd {
			other = rc.nodes[1]
		}
		if code, body := httpPost(t, nd.Admin, "/admin/api/drain", `{"grace_ms":500}`); code != 200 {
			t.Fatalf("drain %s: %d %s", nd.id, code, body)
		}
		testkit.Eventually(t, 2*waitTimeout, nd.id+" hands over every partition it owns", func() bool {
			for _, p := range rc.topology(other).Partitions {
				if p.Topic == "orders" && p.Owner == nd.id {
					return false
				}
			}
			return true
		})
		// As an operator would: let the clients move off before stopping
		// it, and let them settle after it is back.
		time.Sleep(time.Second)
		nd.stop()
		tr.progress(t, 20, "20 confirmed publishes with "+nd.id+" down")
		rc.restart(nd)
		fullyReplicated(t, rc, parts)
		time.Sleep(time.Second)
		tr.progress(t, 20, "20 confirmed publishes with "+nd.id+" back")
	}
	n, missing, dups, extra := tr.finish(t)
	tr.mu.Lock()
	gap := tr.maxGap
	tr.mu.Unlock()
	t.Logf("rolling restart: confirmed %d, failed %d, lost %d, duplicates %d, delivered without a confirm %d; longest wait between two confirms on a partition %v",
		n, tr.failed, missing, dups, extra, gap.Round(time.Millisecond))
}
