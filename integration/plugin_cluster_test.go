package integration

// The raft backend as an external go-plugin binary: a
// 3-node cluster through the plugin boundary, and what an owner does when
// its coordination plugin dies (S-138, docs/cluster.md "What happens when…").

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// A 3-node cluster whose raft runs in external plugin processes serves
// like the built-in one. Then one owner's plugin is killed while its binary
// no longer matches the catalog's sha256, so the host cannot restart it:
// the owner must stop confirming before its lease could have been handed
// on (its last renewal + TTL), report not ready, and serve again once the
// plugin is back.
func TestClusterExternalRaftPlugin(t *testing.T) {
	catalog, binary := pluginCatalog(t, "github.com/fibrilgo/fibril/coordination/raft/cmd/fibril-coord-raft", "coordination", "raft-ext")
	rc := startRaftCluster(t, 3, "--coordination.backend=raft-ext", "--plugins.catalog="+catalog)
	// startRaftCluster put --coordination.backend=raft first; the later flag wins.
	for _, nd := range rc.nodes {
		if pluginPID(t, nd.broker) == 0 {
			t.Fatalf("%s runs no fibril-coord-raft plugin process", nd.id)
		}
	}
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "ext", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	owners := rc.placed(rc.nodes[0], "ext", 3)
	var part uint32
	var owner *clusterNode
	for p, o := range owners {
		part, owner = p, rc.node(o)
		break
	}
	oc := newClient(t, owner.Addr)
	if _, err := oc.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	publish(t, oc, "ext", client.Message{Partition: u32(part), Payload: []byte("before")})

	// Make restarts fail (sha256 mismatch), then kill the owner's plugin.
	good, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(binary+".tmp", append(append([]byte{}, good...), 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(binary+".tmp", binary); err != nil {
		t.Fatal(err)
	}
	pid := pluginPID(t, owner.broker)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Publish to the owner's partition, on the owner itself, until it
	// refuses; no confirm may come later than the last renewal + TTL.
	handOver := killed.Add(testTTL)
	refused := false
	for deadline := time.Now().Add(3 * testTTL); time.Now().Before(deadline); {
		_, err := oc.Publisher("ext", client.PublisherOptions{}).PublishConfirmed(ctxT(t, 200*time.Millisecond),
			client.Message{Partition: u32(part), Payload: []byte("during")})
		if err == nil {
			if at := time.Now(); at.After(handOver) {
				t.Fatalf("confirmed at %v after the kill; its lease could have been handed on at %v", at.Sub(killed), testTTL)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if brokerCode(err) == 503 {
			refused = true
			t.Logf("owner refused confirms %v after its plugin was killed (TTL %v): %v", time.Since(killed), testTTL, err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !refused {
		t.Fatal("the owner never answered 503 while its coordination plugin was down")
	}
	testkit.Eventually(t, waitTimeout, "the owner reports not ready", func() bool {
		code, _ := httpGet(t, owner.Admin, "/readyz", nil)
		return code == 503
	})
	// Restore the binary: the host restarts the plugin, the owner serves again.
	if err := os.WriteFile(binary+".tmp", good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(binary+".tmp", binary); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 4*waitTimeout, "the owner serves again", func() bool {
		_, err := oc.Publisher("ext", client.PublisherOptions{}).PublishConfirmed(ctxT(t, time.Second),
			client.Message{Partition: u32(part), Payload: []byte("after")})
		return err == nil
	})
	if m := metric(t, owner.broker, "fibril_plugin_restarts_total{kind=\"coordination\",name=\"raft-ext\"}"); m < 1 {
		t.Fatalf("fibril_plugin_restarts_total = %v, want ≥ 1", m)
	}
}
