package integration

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// TestMeasureOwnerRestart1GiB measures how long an owner holding 1 GiB of
// queued data takes, after kill -9 and a restart, to serve its partition
// again (a restart must not cost minutes of unavailability). It is a measurement, not a check: it
// runs only with FIBRIL_MEASURE=1 and reports with t.Logf.
//
//	FIBRIL_MEASURE=1 go test -run TestMeasureOwnerRestart1GiB -v -timeout 30m ./integration
func TestMeasureOwnerRestart1GiB(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") != "1" {
		t.Skip("a measurement; set FIBRIL_MEASURE=1 to run it")
	}
	rc := startRaftCluster(t, 3)
	c := newClient(t, rc.nodes[0].Addr)
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "big", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	owner := rc.node(rc.placed(rc.nodes[0], "big", 1)[0])
	oc := newClient(t, owner.Addr)
	if _, err := oc.Topology(ctxT(t, opTimeout), ""); err != nil {
		t.Fatal(err)
	}
	const size, total = 1024, 1 << 20 // 1 GiB of payload
	payload := make([]byte, size)
	pub := oc.Publisher("big", client.PublisherOptions{})
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 1024)
	var failed error
	var mu sync.Mutex
	for i := range total {
		sem <- struct{}{}
		wg.Add(1)
		err := pub.PublishAsync(ctxT(t, 10*time.Minute), client.Message{Partition: u32(0), Payload: payload}, func(_ uint64, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			<-sem
			wg.Done()
		})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("published %d × %d B confirmed in %v", total, size, time.Since(start))
	owner.kill()
	restarted := time.Now()
	rc.restart(owner)
	processReady := time.Since(restarted)
	rc2 := newClient(t, rc.nodes[0].Addr)
	var served time.Duration
	testkit.Eventually(t, 10*time.Minute, "the owner serves its partition again", func() bool {
		_, err := rc2.Publisher("big", client.PublisherOptions{}).PublishConfirmed(ctxT(t, time.Second),
			client.Message{Partition: u32(0), Payload: []byte("after")})
		if err == nil {
			served = time.Since(restarted)
			return true
		}
		return false
	})
	t.Logf("owner with %s queued: process start to \"broker ready\" %v; kill -9 → restart → first confirmed publish through another broker %v",
		fmt.Sprintf("%d MiB", total*size>>20), processReady, served)
}
