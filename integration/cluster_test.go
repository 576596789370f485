package integration

// Cluster tests: real broker processes on embedded raft,
// 127.0.0.1 only. Timeouts scale with the configured liveness TTL.

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// Three brokers on raft: a queue declared at one broker is served through
// every broker; clients bootstrapped anywhere publish to every partition
// and consume everything, following the topology and REDIRECTs (S-114,
// S-116).
func TestClusterPublishConsumeEverywhere(t *testing.T) {
	rc := startRaftCluster(t, 3)
	c0 := newClient(t, rc.nodes[0].Addr)
	if _, err := c0.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	owners := rc.placed(rc.nodes[1], "orders", 6)
	spread := map[string]int{}
	for _, o := range owners {
		spread[o]++
	}
	if len(spread) != 3 {
		t.Fatalf("placement %v: want the 6 partitions on all 3 nodes", owners)
	}
	sent := map[string]bool{}
	for i, nd := range rc.nodes {
		c := newClient(t, nd.Addr)
		if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
			t.Fatal(err)
		}
		for p := range uint32(6) {
			payload := fmt.Sprintf("via-%d-p%d", i, p)
			publish(t, c, "orders", client.Message{Partition: u32(p), Payload: []byte(payload)})
			sent[payload] = true
		}
	}
	c := newClient(t, rc.nodes[2].Addr)
	if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	sub := subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 8})
	for len(sent) > 0 {
		d := next(t, sub, waitTimeout)
		if !sent[string(d.Payload)] {
			t.Fatalf("unexpected or duplicate delivery %q", d.Payload)
		}
		delete(sent, string(d.Payload))
		ack(t, d)
	}
}

// kill -9 of a partition owner with the default replication
// (majority_durable, two followers): an in-sync follower takes its
// written partition with a new epoch, the partition takes confirmed
// publishes again through the surviving brokers, the killed broker comes
// back as a follower in sync again, and every message confirmed before,
// during and after is delivered. The time from the kill to the first
// confirmed publish is logged.
func TestClusterOwnerKilledFailsOver(t *testing.T) {
	rc, c, owners, confirmed := ownerKillSetup(t)
	victimPart, victim := pickVictim(rc, owners)
	killed := time.Now()
	victim.kill()
	probe := newClient(t, rc.nodes[0].Addr)
	var took time.Duration
	after := 0
	testkit.Eventually(t, 4*testTTL+waitTimeout, "a confirmed publish to the dead owner's partition", func() bool {
		ctx := ctxT(t, time.Second)
		payload := fmt.Sprintf("p%d-after-%d", victimPart, after)
		if _, err := probe.Publisher("orders", client.PublisherOptions{}).PublishConfirmed(ctx,
			client.Message{Partition: u32(victimPart), Payload: []byte(payload)}); err != nil {
			return false
		}
		took = time.Since(killed)
		confirmed[payload] = true
		after++
		return true
	})
	t.Logf("failover (kill -9 → first confirmed publish through another broker): %v with TTL %v", took, testTTL)
	if o := rc.ownerOf(rc.nodes[0], "orders", victimPart); o == victim.id {
		t.Fatalf("partition %d still belongs to the dead owner %s after a confirmed publish", victimPart, o)
	}
	for i := range 20 {
		payload := fmt.Sprintf("p%d-after-%d", victimPart, after+i)
		publish(t, probe, "orders", client.Message{Partition: u32(victimPart), Payload: []byte(payload)})
		confirmed[payload] = true
	}
	rc.restart(victim)
	testkit.Eventually(t, waitTimeout, victim.id+" ready again", func() bool {
		code, _ := httpGet(t, victim.Admin, "/readyz", nil)
		return code == 200
	})
	testkit.Eventually(t, 2*waitTimeout, victim.id+" in sync again as a follower", func() bool {
		for _, p := range rc.topology(rc.nodes[0]).Partitions {
			if p.Topic == "orders" && p.Partition == victimPart {
				return p.Owner != victim.id && slices.Contains(p.InSync, victim.id)
			}
		}
		return false
	})
	drainConfirmed(t, rc, c, confirmed)
}

// Under local_durable (S-138, D-5) a dead owner's written partitions stay
// with it: they answer 503 through the other brokers while its other
// partitions are unaffected, and once it is back every confirmed message
// is delivered. The time from the kill to the first 503 is the dead-owner
// detection time (logged).
func TestClusterLocalDurableOwnerKilledThenBack(t *testing.T) {
	rc, c, owners, confirmed := ownerKillSetup(t, "local_durable")
	victimPart, victim := pickVictim(rc, owners)
	killed := time.Now()
	victim.kill()
	// Through the surviving brokers: the victim's partition answers 503
	// (retryable, docs/protocol.md#answers), the others keep working.
	probe := newClient(t, rc.nodes[0].Addr)
	var detected time.Duration
	testkit.Eventually(t, 4*testTTL+waitTimeout, "the dead owner's partition answers 503", func() bool {
		ctx := ctxT(t, 200*time.Millisecond)
		_, err := probe.Publisher("orders", client.PublisherOptions{}).PublishConfirmed(ctx,
			client.Message{Partition: u32(victimPart), Payload: []byte("probe")})
		if brokerCode(err) == 503 {
			detected = time.Since(killed)
			return true
		}
		if err == nil {
			t.Fatalf("a publish to the dead owner's partition was confirmed")
		}
		return false
	})
	t.Logf("dead-owner detection (kill -9 → 503 through another broker): %v with TTL %v", detected, testTTL)
	testkit.Eventually(t, waitTimeout, "the node shown dead", func() bool {
		for _, n := range rc.topology(rc.nodes[0]).Nodes {
			if n.ID == victim.id {
				return !n.Live
			}
		}
		return false
	})
	for p := range uint32(3) {
		if p == victimPart {
			continue
		}
		payload := fmt.Sprintf("p%d-after", p)
		publish(t, probe, "orders", client.Message{Partition: u32(p), Payload: []byte(payload)})
		confirmed[payload] = true
	}
	// The written partition stayed with the dead owner (never re-placed).
	if o := rc.ownerOf(rc.nodes[0], "orders", victimPart); o != victim.id {
		t.Fatalf("written partition %d moved from the dead owner %s to %s", victimPart, victim.id, o)
	}
	rc.restart(victim)
	testkit.Eventually(t, waitTimeout, victim.id+" ready again", func() bool {
		code, _ := httpGet(t, victim.Admin, "/readyz", nil)
		return code == 200
	})
	drainConfirmed(t, rc, c, confirmed)
}

// ownerKillSetup starts three brokers (with replication.durability set
// to durability, when given), declares orders with 3 partitions and
// publishes 5 confirmed messages to each.
func ownerKillSetup(t *testing.T, durability ...string) (*raftCluster, *client.Client, map[uint32]string, map[string]bool) {
	rc := startRaftCluster(t, 3)
	if len(durability) > 0 {
		rc.setRuntime(rc.nodes[0], "replication", "durability", durability[0])
	}
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	owners := rc.placed(rc.nodes[0], "orders", 3)
	if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	confirmed := map[string]bool{}
	for p := range uint32(3) {
		for i := range 5 {
			payload := fmt.Sprintf("p%d-%d", p, i)
			publish(t, c, "orders", client.Message{Partition: u32(p), Payload: []byte(payload)})
			confirmed[payload] = true
		}
	}
	return rc, c, owners, confirmed
}

// pickVictim chooses a partition owned by another node than node-1 (the
// clients' bootstrap broker) and its owner.
func pickVictim(rc *raftCluster, owners map[uint32]string) (uint32, *clusterNode) {
	for p, o := range owners {
		if o != rc.nodes[0].id {
			return p, rc.node(o)
		}
	}
	rc.t.Fatal("node-1 owns every partition")
	return 0, nil
}

// drainConfirmed subscribes through node-1 and takes every confirmed
// message (probes and redeliveries aside), acknowledging each.
func drainConfirmed(t *testing.T, rc *raftCluster, c *client.Client, confirmed map[string]bool) {
	t.Helper()
	cons := newClient(t, rc.nodes[0].Addr)
	if _, err := cons.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	sub := subscribe(t, cons, "orders", client.SubscribeOptions{Prefetch: 16})
	for len(confirmed) > 0 {
		d := next(t, sub, waitTimeout)
		if string(d.Payload) != "probe" && !strings.Contains(string(d.Payload), "-after-") && !confirmed[string(d.Payload)] {
			t.Fatalf("unexpected delivery %q", d.Payload)
		}
		delete(confirmed, string(d.Payload))
		ack(t, d)
	}
}

// The node running placement is killed: another is elected and placement
// goes on (S-130).
func TestClusterControllerKilled(t *testing.T) {
	rc := startRaftCluster(t, 3)
	var ctrl *clusterNode
	testkit.Eventually(t, waitTimeout, "a placement controller", func() bool {
		for _, nd := range rc.nodes {
			for _, n := range rc.topology(nd).Nodes {
				if n.ID == nd.id && n.Controller {
					ctrl = nd
					return true
				}
			}
		}
		return false
	})
	ctrl.kill()
	var alive *clusterNode
	for _, nd := range rc.nodes {
		if nd != ctrl {
			alive = nd
		}
	}
	testkit.Eventually(t, 4*testTTL+waitTimeout, "the killed controller shown dead", func() bool {
		for _, n := range rc.topology(alive).Nodes {
			if n.ID == ctrl.id {
				return !n.Live
			}
		}
		return false
	})
	c := newClient(t, alive.Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "later", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	for p, o := range rc.placed(alive, "later", 4) {
		if o == ctrl.id {
			t.Fatalf("partition %d placed on the dead node", p)
		}
	}
	if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	publish(t, c, "later", client.Message{Partition: u32(3), Payload: []byte("x")})
}

// Drain (S-128): the drained node gets no new partitions, keeps serving
// what it owns, and nothing confirmed is lost.
func TestClusterDrainKeepsData(t *testing.T) {
	rc := startRaftCluster(t, 3)
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "before", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	rc.placed(rc.nodes[0], "before", 3)
	if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(3) {
		publish(t, c, "before", client.Message{Partition: u32(p), Payload: []byte(fmt.Sprint(p))})
	}
	drained := rc.nodes[2]
	code, body := httpPost(t, drained.Admin, "/admin/api/drain", `{"grace_ms": 0}`)
	if code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	testkit.Eventually(t, waitTimeout, "draining visible", func() bool {
		for _, n := range rc.topology(rc.nodes[0]).Nodes {
			if n.ID == drained.id {
				return n.Draining
			}
		}
		return false
	})
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "after", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	for p, o := range rc.placed(rc.nodes[0], "after", 4) {
		if o == drained.id {
			t.Fatalf("new partition %d placed on the draining node", p)
		}
	}
	sub := subscribe(t, newClient(t, rc.nodes[1].Addr, func(o *client.Options) {}), "before", client.SubscribeOptions{Prefetch: 4})
	got := map[string]bool{}
	for len(got) < 3 {
		d := next(t, sub, waitTimeout)
		got[string(d.Payload)] = true
		ack(t, d)
	}
}

// S-144, S-147: a user added at one broker authenticates at another; a
// runtime setting changed at one broker applies on all (S-173).
func TestClusterUsersAndSettingsShared(t *testing.T) {
	rc := startRaftCluster(t, 3)
	code, body := httpPost(t, rc.nodes[0].Admin, "/admin/api/users", `{"username":"alice","password":"correct horse battery"}`)
	if code != 201 {
		t.Fatalf("add user: %d %s", code, body)
	}
	testkit.Eventually(t, waitTimeout, "alice logs in at node-3", func() bool {
		ctx := ctxT(t, opTimeout)
		c, err := client.Dial(ctx, client.Options{Addrs: []string{rc.nodes[2].Addr}, Username: "alice",
			Password: "correct horse battery", Dial: newGuard(t).dial})
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	// A new default set at one broker applies at another: a queue
	// declared there without a count gets 5 partitions.
	rc.setRuntime(rc.nodes[1], "partitioning", "default_partition_count", 5)
	c := newClient(t, rc.nodes[2].Addr)
	n, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "defaulted"})
	if err != nil || n != 5 {
		t.Fatalf("declare without a count: %d partitions, %v; want 5", n, err)
	}
}

// A node with a wrong cluster secret cannot join (S-149).
func TestClusterWrongSecretCannotJoin(t *testing.T) {
	rc := startRaftCluster(t, 3)
	bad := filepath.Join(t.TempDir(), "wrong.secret")
	if err := os.WriteFile(bad, []byte("not-the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, nd := range rc.nodes {
		peers = append(peers, nd.id+"="+nd.raft)
	}
	raft := "127.0.0.1:" + strconv.Itoa(freePort(t))
	intruder := launchBroker(t, t.TempDir(),
		"--coordination.backend=raft", "--coordination.node_id=intruder",
		"--coordination.secret_path="+bad,
		"--coordination.raft.listen="+raft,
		"--coordination.raft.peers="+strings.Join(append(peers, "intruder="+raft), ","),
		"--coordination.heartbeat_interval_ms="+strconv.Itoa(testHeartbeatMS),
		"--coordination.liveness_ttl_ms="+strconv.Itoa(testTTLMS))
	time.Sleep(3 * testTTL)
	for _, n := range rc.topology(rc.nodes[0]).Nodes {
		if n.ID == "intruder" {
			t.Fatalf("a node with a wrong secret registered: %+v", n)
		}
	}
	if !intruder.exited() {
		intruder.kill()
	}
	if !strings.Contains(intruder.log.String(), "secret") {
		t.Errorf("the intruder's log does not say why it could not join:\n%s", tail(intruder.log.String(), 20))
	}
}

// Inter-broker TLS (tls.inter_broker follows tls.enabled): with
// tls.auto_self_signed every node mints its peer certificate from the
// cluster CA at tls.peer_ca_path (created by the first node), raft runs
// over mutual TLS verified by node id, and the cluster serves as usual. A
// node whose certificate comes from another CA cannot join even with the
// right cluster secret.
func TestClusterInterBrokerTLS(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "cluster-ca.pem")
	tlsFlags := []string{"--tls.enabled", "--tls.auto_self_signed", "--tls.peer_ca_path=" + ca, "--tls.admin_enabled=false"}
	rc := startRaftCluster(t, 3, tlsFlags...)
	if _, err := os.Stat(ca); err != nil {
		t.Fatalf("the cluster CA was not created: %v", err)
	}
	for _, nd := range rc.nodes {
		if _, err := os.Stat(filepath.Join(nd.DataDir, "tls", "peer", "peer.pem")); err != nil {
			t.Fatalf("%s minted no peer certificate: %v", nd.id, err)
		}
	}
	// Each broker serves clients with its own self-signed CA; this test is
	// about the inter-broker channel, so the client skips verification.
	insecure := func(o *client.Options) { o.TLS = &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // test of inter-broker TLS
	c := newClient(t, rc.nodes[0].Addr, insecure)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "secure", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	rc.placed(rc.nodes[1], "secure", 3)
	if _, err := c.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(3) {
		publish(t, c, "secure", client.Message{Partition: u32(p), Payload: []byte("x")})
	}

	// Same secret, another CA: refused at the TLS handshake.
	var peers []string
	for _, nd := range rc.nodes {
		peers = append(peers, nd.id+"="+nd.raft)
	}
	raft := "127.0.0.1:" + strconv.Itoa(freePort(t))
	other := filepath.Join(t.TempDir(), "other-ca.pem")
	args := []string{"--coordination.backend=raft", "--coordination.node_id=stranger",
		"--coordination.secret_path=" + rc.secret,
		"--coordination.raft.listen=" + raft,
		"--coordination.raft.peers=" + strings.Join(append(peers, "stranger="+raft), ","),
		"--coordination.heartbeat_interval_ms=" + strconv.Itoa(testHeartbeatMS),
		"--coordination.liveness_ttl_ms=" + strconv.Itoa(testTTLMS),
		"--tls.enabled", "--tls.auto_self_signed", "--tls.peer_ca_path=" + other, "--tls.admin_enabled=false"}
	stranger := launchBroker(t, t.TempDir(), args...)
	time.Sleep(3 * testTTL)
	for _, n := range rc.topology(rc.nodes[0]).Nodes {
		if n.ID == "stranger" {
			t.Fatalf("a node with a certificate from another CA registered: %+v", n)
		}
	}
	if !stranger.exited() {
		stranger.kill()
	}
	if l := stranger.log.String(); !strings.Contains(l, "certificate") {
		t.Errorf("the stranger's log does not show a certificate refusal:\n%s", tail(l, 15))
	}
}

// A follower whose disk lost the queue data (its queues directory wiped
// while it was down) catches up from the owner's checkpoint and log when
// it comes back, joins the in-sync set again, and can then take the
// partition over: after the owner is killed, every confirmed message is
// delivered from the rebuilt copy.
func TestClusterWipedFollowerCatchesUpAndTakesOver(t *testing.T) {
	rc := startRaftCluster(t, 3)
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	owner := rc.node(rc.placed(rc.nodes[0], "orders", 1)[0])
	var follower *clusterNode
	for _, nd := range rc.nodes {
		if nd != owner && nd != rc.nodes[0] {
			follower = nd
		}
	}
	if follower == nil { // node-1 owns it: either other node will do
		follower = rc.nodes[1]
	}
	confirmed := map[string]bool{}
	for i := range 300 {
		payload := fmt.Sprint("before-", i)
		publish(t, c, "orders", client.Message{Partition: u32(0), Payload: []byte(payload)})
		confirmed[payload] = true
	}
	follower.stop()
	if err := os.RemoveAll(filepath.Join(follower.DataDir, "queues")); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		payload := fmt.Sprint("while-down-", i)
		publish(t, c, "orders", client.Message{Partition: u32(0), Payload: []byte(payload)})
		confirmed[payload] = true
	}
	rc.restart(follower)
	testkit.Eventually(t, 2*waitTimeout, follower.id+" in sync again after its wipe", func() bool {
		for _, p := range rc.topology(rc.nodes[0]).Partitions {
			if p.Topic == "orders" && p.Partition == 0 {
				return slices.Contains(p.InSync, follower.id)
			}
		}
		return false
	})
	if owner == rc.nodes[0] {
		t.Logf("node-1 (the client's way in) owns the partition: the wiped %s caught up; no takeover to try", follower.id)
		return
	}
	// Kill the owner and make sure the rebuilt copy is the one that takes
	// over: the other in-sync member (node-1) is drained first, so only
	// the wiped follower may own partitions.
	if code, body := httpPost(t, rc.nodes[0].Admin, "/admin/api/drain", `{"grace_ms":0}`); code != 200 {
		t.Fatalf("drain node-1: %d %s", code, body)
	}
	owner.kill()
	probe := newClient(t, rc.nodes[0].Addr)
	testkit.Eventually(t, 4*testTTL+waitTimeout, "the rebuilt follower owns the partition", func() bool {
		return rc.ownerOf(rc.nodes[0], "orders", 0) == follower.id
	})
	publishRetrying(t, probe, 0, "after-failover", 4*testTTL+waitTimeout)
	confirmed["after-failover"] = true
	t.Logf("the wiped %s caught up and took the partition over from the killed %s", follower.id, owner.id)
	drainConfirmed(t, rc, probe, confirmed)
}

// A kill -9 leaves evidence: the owner's replication streams drop at once
// and nothing listens on its peer address any more. Its followers fence
// (they acknowledge nothing more of its epoch) and publish their tails,
// and the controller promotes one without waiting for the dead owner's
// lease — here 20 s, so the partition must take confirmed publishes again
// while the dead owner still counts as live. Nothing confirmed is lost,
// and the owner comes back as a follower (docs/cluster.md#replication).
func TestClusterOwnerCrashFailsOverBeforeItsLeaseEnds(t *testing.T) {
	rc := startRaftCluster(t, 3, "--coordination.liveness_ttl_ms=20000")
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	owners := rc.placed(rc.nodes[0], "orders", 3)
	confirmed := map[string]bool{}
	for p := range uint32(3) {
		for i := range 5 {
			payload := fmt.Sprintf("p%d-%d", p, i)
			publish(t, c, "orders", client.Message{Partition: u32(p), Payload: []byte(payload)})
			confirmed[payload] = true
		}
	}
	fullyReplicated(t, rc, 3)
	victimPart, victim := pickVictim(rc, owners)
	victim.kill()
	probe := newClient(t, rc.nodes[0].Addr)
	after := 0
	var liveAtFirstConfirm bool
	testkit.Eventually(t, 15*time.Second, "a confirmed publish to the crashed owner's partition, within its 20 s lease", func() bool {
		payload := fmt.Sprintf("p%d-after-%d", victimPart, after)
		if _, err := probe.Publisher("orders", client.PublisherOptions{}).PublishConfirmed(ctxT(t, time.Second),
			client.Message{Partition: u32(victimPart), Payload: []byte(payload)}); err != nil {
			return false
		}
		confirmed[payload] = true
		after++
		for _, n := range rc.topology(rc.nodes[0]).Nodes {
			if n.ID == victim.id {
				liveAtFirstConfirm = n.Live
			}
		}
		return true
	})
	if !liveAtFirstConfirm {
		t.Fatalf("%s's lease had ended before its partition took a confirm: the failover did not act on the crash evidence", victim.id)
	}
	if o := rc.ownerOf(rc.nodes[0], "orders", victimPart); o == victim.id {
		t.Fatalf("partition %d still belongs to the crashed owner %s after a confirmed publish", victimPart, o)
	}
	rc.restart(victim)
	testkit.Eventually(t, 2*waitTimeout, victim.id+" in sync again as a follower", func() bool {
		for _, p := range rc.topology(rc.nodes[0]).Partitions {
			if p.Topic == "orders" && p.Partition == victimPart {
				return p.Owner != victim.id && slices.Contains(p.InSync, victim.id)
			}
		}
		return false
	})
	drainConfirmed(t, rc, c, confirmed)
}
