package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/cluster"
	"github.com/fibrilgo/fibril/core/testkit"
)

// undrainAnswer is POST /admin/api/undrain's answer.
type undrainAnswer struct {
	WasDraining      bool   `json:"was_draining"`
	OwnedPartitions  int    `json:"owned_partitions"`
	FencesLifted     int    `json:"fences_lifted"`
	FencedHandedOver int    `json:"fenced_handed_over"`
	FencesHeld       int    `json:"fences_held"`
	Note             string `json:"note"`
}

func undrainOK(t *testing.T, b *Broker) undrainAnswer {
	t.Helper()
	code, body := adminDo(t, b, "POST", "/admin/api/undrain", "")
	if code != 200 {
		t.Fatalf("undrain: %d %s", code, body)
	}
	var a undrainAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("undrain answer %q: %v", body, err)
	}
	return a
}

// nodeDraining reads node's draining flag from b's admin topology.
func nodeDraining(t *testing.T, b *Broker, node core.NodeID) bool {
	t.Helper()
	_, body := adminDo(t, b, "GET", "/admin/api/topology", "")
	var v struct {
		Nodes []struct {
			ID       core.NodeID `json:"id"`
			Draining bool        `json:"draining"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("topology %q: %v", body, err)
	}
	for _, n := range v.Nodes {
		if n.ID == node {
			return n.Draining
		}
	}
	t.Fatalf("no node %s in %s", node, body)
	return false
}

// Undrain clears the draining mark (S-128): the node reports ready again
// and placement gives it partitions again.
func TestClusterUndrain(t *testing.T) {
	bs := startMemCluster(t, 2)
	if code, body := adminDo(t, bs[1], "POST", "/admin/api/drain", `{"grace_ms": 0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "the draining flag is visible", func() bool {
		return nodeDraining(t, bs[0], bs[1].nodeID)
	})
	if code, _ := adminDo(t, bs[1], "GET", "/readyz", ""); code != 503 {
		t.Fatalf("readyz of a draining node: %d", code)
	}
	a := undrainOK(t, bs[1])
	if !a.WasDraining || a.FencesLifted != 0 || a.FencesHeld != 0 || !strings.Contains(a.Note, "GOING_AWAY") {
		t.Fatalf("undrain answered %+v", a)
	}
	testkit.Eventually(t, 5*time.Second, "the draining flag cleared everywhere", func() bool {
		return !nodeDraining(t, bs[0], bs[1].nodeID) && !nodeDraining(t, bs[1], bs[1].nodeID)
	})
	testkit.Eventually(t, 5*time.Second, "the undrained node ready again", func() bool {
		code, _ := adminDo(t, bs[1], "GET", "/readyz", "")
		return code == 200
	})
	// Placement deals partitions to it again.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "after", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a partition placed on the undrained node", func() bool {
		found := false
		bs[0].cluster.cl.Snapshot().AllPartitions(func(p cluster.Partition) {
			found = found || p.Node == bs[1].nodeID
		})
		return found
	})
	// Undrain is idempotent: again, it says the node was not draining.
	if a := undrainOK(t, bs[1]); a.WasDraining {
		t.Fatalf("second undrain answered %+v", a)
	}
}

// A drain's handoff fences the partition at its log's end until a follower
// holds everything below it; an undrain while it waits lifts the fence, so
// confirms go on on the same owner.
func TestClusterUndrainLiftsAWaitingFence(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := core.PartitionRef{Topic: "orders"}
	declareOrders(ctx, t, bs[0])
	owner, _ := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, owner)
	pub := c.Publisher("orders", client.PublisherOptions{})
	publish := func(msg string, within time.Duration) error {
		pctx, pcancel := context.WithTimeout(ctx, within)
		defer pcancel()
		_, err := pub.PublishConfirmed(pctx, client.Message{Payload: []byte(msg)})
		return err
	}
	for i := range 10 {
		if err := publish(fmt.Sprint("before-", i), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// What handoffLocked does while no follower has caught up yet (the
	// drain itself would hand the partition over at once here).
	gs := &owner.cluster.gates
	gs.mu.Lock()
	og := gs.m[ref]
	if og == nil || !og.gated.Load() {
		gs.mu.Unlock()
		t.Fatalf("the owner's gate: %+v", og)
	}
	local, _ := og.gate.State()
	og.gate.SetFence(local)
	og.fencedAt, og.fencedSince = local+1, time.Now()
	gs.mu.Unlock()
	if err := publish("fenced", 500*time.Millisecond); err == nil {
		t.Fatal("a publish past the fence was confirmed")
	}
	a := undrainOK(t, owner)
	if a.WasDraining || a.FencesLifted != 1 || a.FencesHeld != 0 || a.FencedHandedOver != 0 || a.OwnedPartitions != 1 {
		t.Fatalf("undrain answered %+v", a)
	}
	testkit.Eventually(t, 10*time.Second, "a confirmed publish after the undrain", func() bool {
		return publish("after", 2*time.Second) == nil
	})
	if p, _ := owner.cluster.cl.Snapshot().Partition(ref); p.Node != owner.nodeID {
		t.Fatalf("the partition moved to %s", p.Node)
	}
}

// Partitions a drain already handed over stay with their new owners (a
// live owner is kept, S-128); the old owner is a candidate again.
func TestClusterUndrainAfterHandoff(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := core.PartitionRef{Topic: "orders"}
	declareOrders(ctx, t, bs[0])
	owner, followers := placedWithFollowers(t, bs, ref)
	c := dialClient(ctx, t, followers[0])
	pub := c.Publisher("orders", client.PublisherOptions{})
	for i := range 10 {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := adminDo(t, owner, "POST", "/admin/api/drain", `{"grace_ms":0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	var newOwner core.NodeID
	testkit.Eventually(t, 20*time.Second, "the partition handed to a follower", func() bool {
		p, _ := owner.cluster.cl.Snapshot().Partition(ref)
		newOwner = p.Node
		return p.Placed() && p.Node != owner.nodeID
	})
	a := undrainOK(t, owner)
	if !a.WasDraining || a.FencesLifted != 0 || a.FencesHeld != 0 || a.OwnedPartitions != 0 || !strings.Contains(a.Note, "handed over") {
		t.Fatalf("undrain answered %+v", a)
	}
	testkit.Eventually(t, 5*time.Second, "the old owner ready and not draining", func() bool {
		code, _ := adminDo(t, owner, "GET", "/readyz", "")
		return code == 200 && !nodeDraining(t, bs[0], owner.nodeID)
	})
	time.Sleep(300 * time.Millisecond) // a few controller passes
	if p, _ := bs[0].cluster.cl.Snapshot().Partition(ref); p.Node != newOwner {
		t.Fatalf("the partition moved from %s to %s after the undrain", newOwner, p.Node)
	}
	if _, err := pub.PublishConfirmed(ctx, client.Message{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
}

// A standalone broker's drain only sends GOING_AWAY and turns /readyz
// false (S-127); undrain turns it true again.
func TestStandaloneUndrain(t *testing.T) {
	b := startBroker(t)
	if code, body := adminDo(t, b, "POST", "/admin/api/drain", `{"grace_ms":0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	if code, _ := adminDo(t, b, "GET", "/readyz", ""); code != 503 {
		t.Fatalf("readyz of a draining broker: %d", code)
	}
	if a := undrainOK(t, b); !a.WasDraining {
		t.Fatalf("undrain answered %+v", a)
	}
	if code, body := adminDo(t, b, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz after undrain: %d %s", code, body)
	}
	// Not draining: the answer says so and readiness is left alone.
	if a := undrainOK(t, b); a.WasDraining {
		t.Fatalf("second undrain answered %+v", a)
	}
}
