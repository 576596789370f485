package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// streamLedger is what a scenario's client saw: payloads confirmed,
// delivered (and how often), publishes answered with an error, and the
// longest wait between two confirms on one partition.
type streamLedger struct {
	mu        sync.Mutex
	confirmed map[string]bool
	delivered map[string]int
	failed    int // publishes answered with an error (the message may be stored)
	lastOK    map[uint32]time.Time
	maxGap    time.Duration
}

func newLedger() *streamLedger {
	return &streamLedger{confirmed: map[string]bool{}, delivered: map[string]int{}, lastOK: map[uint32]time.Time{}}
}

func (l *streamLedger) counts() (confirmed, missing, duplicates, unconfirmedDelivered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.confirmed {
		if l.delivered[p] == 0 {
			missing++
		}
	}
	for p, n := range l.delivered {
		duplicates += n - 1
		if !l.confirmed[p] {
			unconfirmedDelivered++
		}
	}
	return len(l.confirmed), missing, duplicates, unconfirmedDelivered
}

// traffic is a producer publishing with confirms to the partitions of
// orders in turn and a consumer of all of orders, acknowledging
// everything, both running until finish.
type traffic struct {
	*streamLedger
	stop               chan struct{}
	produced, consumed chan struct{}
	sub                *client.Subscription
}

// startTraffic starts the producer (bounded in count and by limit) and the
// consumer on c. A publish waits at most publishTimeout; a failure must be
// retryable.
func startTraffic(t *testing.T, c *client.Client, parts []uint32, publishTimeout, limit time.Duration) *traffic {
	tr := &traffic{streamLedger: newLedger(), stop: make(chan struct{}), produced: make(chan struct{}), consumed: make(chan struct{})}
	go func() {
		defer close(tr.produced)
		pub := c.Publisher("orders", client.PublisherOptions{})
		deadline := time.Now().Add(limit)
		for i := 0; i < 5_000_000 && time.Now().Before(deadline); i++ {
			select {
			case <-tr.stop:
				return
			default:
			}
			p := parts[i%len(parts)]
			payload := fmt.Sprint("m", i)
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			_, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(payload)})
			cancel()
			now := time.Now()
			tr.mu.Lock()
			if err == nil {
				tr.confirmed[payload] = true
				if last, ok := tr.lastOK[p]; ok {
					tr.maxGap = max(tr.maxGap, now.Sub(last))
				}
				tr.lastOK[p] = now
			} else {
				tr.failed++
			}
			tr.mu.Unlock()
			if err != nil {
				if !client.Retryable(err) {
					t.Errorf("publish %s: %v, want a retryable error", payload, err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	tr.sub = subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 64})
	go func() {
		defer close(tr.consumed)
		for {
			d, err := tr.sub.Next(context.Background())
			if err != nil {
				select {
				case <-tr.stop:
				default:
					t.Logf("the consumer's subscription ended before the test stopped it: %v", err)
				}
				return
			}
			tr.mu.Lock()
			tr.delivered[string(d.Payload)]++
			tr.mu.Unlock()
			_ = d.Ack(context.Background()) // fire-and-forget; a lost ack redelivers
		}
	}()
	return tr
}

func (tr *traffic) confirmedSoFar() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.confirmed)
}

// progress waits until n more publishes are confirmed.
func (tr *traffic) progress(t *testing.T, n int, what string) {
	t.Helper()
	base := tr.confirmedSoFar()
	testkit.Eventually(t, 4*testTTL+2*waitTimeout, what, func() bool { return tr.confirmedSoFar() >= base+n })
}

// finish stops the producer, waits (bounded) until every confirmed
// message is delivered, stops the consumer, and fails the test for any
// confirmed message lost.
func (tr *traffic) finish(t *testing.T) (confirmed, missing, duplicates, unconfirmedDelivered int) {
	t.Helper()
	close(tr.stop)
	<-tr.produced
	testkit.EventuallyReport(t, 2*waitTimeout, func() bool {
		_, missing, _, _ := tr.counts()
		return missing == 0
	}, func() string {
		n, missing, _, _ := tr.counts()
		tr.mu.Lock()
		var miss []string
		for p := range tr.confirmed {
			if tr.delivered[p] == 0 {
				miss = append(miss, p)
			}
		}
		tr.mu.Unlock()
		slices.Sort(miss)
		return fmt.Sprintf("%d of %d confirmed messages not delivered, e.g. %v", missing, n, miss[:min(len(miss), 20)])
	})
	tr.sub.Close()
	<-tr.consumed
	confirmed, missing, duplicates, unconfirmedDelivered = tr.counts()
	if missing > 0 {
		t.Errorf("%d confirmed messages lost", missing)
	}
	return confirmed, missing, duplicates, unconfirmedDelivered
}

// The seed note's scenario: one public and two private brokers; a client
// of the public broker publishes with confirms to a privately owned
// partition and consumes all the while. The private owner is killed
// (kill -9) mid-stream: the partition fails over to another broker and
// the client keeps publishing with confirms and consuming through the
// public one. The killed broker is restarted and waited for until it is
// an in-sync follower again; then, while a private broker owns the
// partition, its owner is killed again (at most four kills; one broker
// down at a time, so the three voters keep a quorum). Which broker takes
// the partition is the controller's choice (the highest tail, then the
// lightest load); the public broker, the client's only way in, is never
// killed, so the scenario ends when it owns the partition. Every message the client saw confirmed is
// delivered; duplicates (redeliveries of unsettled messages) are counted
// apart. Over tcp and quic.
func TestPrivateOwnerFailsOverMidStream(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			pc := startPrivateCluster(t, tr)
			c := pc.client(t)
			const parts = 3
			if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			owners := pc.placed(pc.nodes[0], "orders", parts)
			part := uint32(parts)
			for p, o := range owners {
				if o != "node-1" && (part == parts || p < part) {
					part = p
				}
			}
			if part == parts {
				t.Fatal("the private brokers own nothing; the test proves nothing")
			}
			tr := startTraffic(t, c, []uint32{part}, 2*time.Second, 3*time.Minute)
			confirmedAfter := func(n int, what string) { t.Helper(); tr.progress(t, n, what) }
			confirmedAfter(200, "200 confirmed publishes before the first kill")
			seen := map[string]bool{owners[part]: true}
			for kill := 1; kill <= 4 && !(seen["node-1"] && len(seen) == 3); kill++ {
				owner := pc.ownerOf(pc.nodes[0], "orders", part)
				if owner == "node-1" {
					break // the public broker is the client's way in; the scenario ends with it owning
				}
				victim := pc.node(owner)
				killed := time.Now()
				victim.kill()
				confirmedAfter(100, fmt.Sprintf("100 confirmed publishes after kill %d (of %s)", kill, owner))
				now := pc.ownerOf(pc.nodes[0], "orders", part)
				t.Logf("kill %d: %s → %s; 100 confirms %v after the kill", kill, owner, now, time.Since(killed).Round(time.Millisecond))
				if now == owner {
					t.Fatalf("the partition took confirmed publishes while still assigned to the dead %s", owner)
				}
				seen[now] = true
				pc.restart(victim)
				pc.awaitInSync(t, "orders", part, victim.id)
				confirmedAfter(50, "50 confirmed publishes with "+victim.id+" back")
			}
			n, missing, dups, extra := tr.finish(t)
			t.Logf("owners %v; confirmed %d, failed publishes %d, delivered %d distinct, lost %d, duplicates %d, delivered without a confirm %d",
				keys(seen), n, tr.failed, len(tr.delivered), missing, dups, extra)
			if len(seen) < 2 {
				t.Errorf("the partition never failed over: owners %v", keys(seen))
			}
		})
	}
}

// awaitInSync waits until node is in the in-sync set of topic's partition
// part, as node-1's topology shows it.
func (rc *raftCluster) awaitInSync(t *testing.T, topic string, part uint32, node string) {
	t.Helper()
	testkit.Eventually(t, 2*waitTimeout, node+" in sync again", func() bool {
		for _, p := range rc.topology(rc.nodes[0]).Partitions {
			if p.Topic == topic && p.Partition == part {
				return slices.Contains(p.InSync, node)
			}
		}
		return false
	})
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// replicaSet is one partition's owner and followers, from the admin
// topology.
type replicaSet struct {
	Owner     string `json:"owner"`
	Followers []struct {
		Node   string `json:"node"`
		InSync bool   `json:"in_sync"`
	} `json:"followers"`
}

// replicaSets reads every partition of orders from nd's admin topology.
func replicaSets(t *testing.T, nd *clusterNode) map[uint32]replicaSet {
	t.Helper()
	return replicaSetsOf(t, nd, "orders")
}

// replicaSetsOf reads every partition of a queue or stream topic from nd's
// admin topology.
func replicaSetsOf(t *testing.T, nd *clusterNode, topic string) map[uint32]replicaSet {
	t.Helper()
	code, body := httpGet(t, nd.Admin, "/admin/api/topology", nil)
	if code != 200 {
		t.Fatalf("%s topology: %d %s", nd.id, code, body)
	}
	var v struct {
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition uint32 `json:"partition"`
			replicaSet
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	out := map[uint32]replicaSet{}
	for _, p := range v.Partitions {
		if p.Topic == topic {
			out[p.Partition] = p.replicaSet
		}
	}
	return out
}

// The seed's scenario, path for path: one public and two private brokers,
// a client publishing with confirms and consuming through the public one;
// the private owner is killed mid-stream and the partition moves to the
// other private broker; the killed broker comes back; then the new owner
// is killed and the partition moves to the public broker. Every confirmed
// message is delivered. One follower per partition makes each move
// deterministic (with two, the promotion's load tie-break picks among
// equals); the default two are what TestPrivateOwnerFailsOverMidStream
// runs.
func TestPrivateOwnerFailsOverToPrivateThenPublic(t *testing.T) {
	pc := startPrivateCluster(t, "tcp")
	pc.setRuntime(pc.nodes[0], "replication", "target_followers", 1)
	c := pc.client(t)
	const parts = 3
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	// One follower each, spread evenly: one of the private brokers' partitions
	// is followed by the other private broker.
	var part uint32
	var first, second string
	testkit.EventuallyReport(t, waitTimeout, func() bool {
		for p, rs := range replicaSets(t, pc.nodes[0]) {
			if len(rs.Followers) != 1 || !rs.Followers[0].InSync {
				return false
			}
			if f := rs.Followers[0].Node; rs.Owner != "node-1" && f != "node-1" {
				part, first, second = p, rs.Owner, f
			}
		}
		return first != ""
	}, func() string { return fmt.Sprintf("replica sets %+v", replicaSets(t, pc.nodes[0])) })
	t.Logf("orders#%d: owner %s, follower %s", part, first, second)
	tr := startTraffic(t, c, []uint32{part}, 2*time.Second, 3*time.Minute)
	tr.progress(t, 200, "200 confirmed publishes before the first kill")
	fullAgain := func(what string) {
		t.Helper()
		testkit.EventuallyReport(t, 2*waitTimeout, func() bool {
			rs := replicaSets(t, pc.nodes[0])[part]
			return len(rs.Followers) == 1 && rs.Followers[0].InSync
		}, func() string { return fmt.Sprintf("%s: orders#%d %+v", what, part, replicaSets(t, pc.nodes[0])[part]) })
	}
	for i, want := range []string{second, "node-1"} {
		owner := pc.ownerOf(pc.nodes[0], "orders", part)
		victim := pc.node(owner)
		killed := time.Now()
		victim.kill()
		tr.progress(t, 100, fmt.Sprintf("100 confirmed publishes after killing %s", owner))
		now := pc.ownerOf(pc.nodes[0], "orders", part)
		t.Logf("kill %d: %s → %s; 100 confirms %v after the kill", i+1, owner, now, time.Since(killed).Round(time.Millisecond))
		if now != want {
			t.Fatalf("kill %d of %s: the partition went to %s, want %s", i+1, owner, now, want)
		}
		pc.restart(victim)
		fullAgain(victim.id + " back")
		tr.progress(t, 50, "50 confirmed publishes with "+victim.id+" back")
	}
	n, missing, dups, extra := tr.finish(t)
	t.Logf("confirmed %d, failed publishes %d, delivered %d distinct, lost %d, duplicates %d, delivered without a confirm %d",
		n, tr.failed, len(tr.delivered), missing, dups, extra)
}
