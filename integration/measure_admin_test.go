package integration

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestMeasureQueuesAPI measures GET /admin/api/queues on a 3-broker raft
// cluster holding 10,000 queue partitions (100 queues × 100, placed over
// the three; without followers, which would put every partition's files
// on every broker, past this machine's 20,000 open files per process):
// the whole list, asked of one broker that fans out to the two others
// over NODE_ADMIN, one queue's description, and the topology (which the
// dashboard's Overview and Cluster pages read).
//
// It is a measurement, not a check: it runs only with FIBRIL_MEASURE=1.
//
//	FIBRIL_MEASURE=1 go test -run TestMeasureQueuesAPI -v -timeout 30m ./integration
func TestMeasureQueuesAPI(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") != "1" {
		t.Skip("a measurement; set FIBRIL_MEASURE=1 to run it")
	}
	rc := startClusterOn(t, raftBackend, 3, nil, "--coordination.heartbeat_interval_ms=1000", "--coordination.liveness_ttl_ms=4000")
	rc.setRuntime(rc.nodes[0], "replication", "target_followers", 0)
	nd := rc.nodes[0]
	timeGet := func(label, path string, n int) {
		var lat []time.Duration
		size := 0
		for range n {
			start := time.Now()
			code, body := httpGet(t, nd.Admin, path, nil)
			lat = append(lat, time.Since(start))
			if code != 200 {
				t.Fatalf("%s: %d %.300s", path, code, body)
			}
			size = len(body)
			if !strings.HasPrefix(path, "/admin/api/queues") {
				continue
			}
			var v struct {
				Queues []struct {
					Totals struct {
						Unreported int `json:"unreported"`
					} `json:"totals"`
				} `json:"queues"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatal(err)
			}
			for _, q := range v.Queues {
				if q.Totals.Unreported != 0 {
					t.Errorf("%s: %d partitions without numbers", path, q.Totals.Unreported)
				}
			}
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("%s: %d calls, p50 %v, p90 %v, max %v, answer %d KiB", label, n, lat[n/2].Round(time.Millisecond),
			lat[n*9/10].Round(time.Millisecond), lat[n-1].Round(time.Millisecond), size/1024)
	}
	measureDeclare(t, rc, 10, 100)
	timeGet("1,000 partitions, GET /admin/api/queues", "/admin/api/queues", 20)
	measureDeclare(t, rc, 100, 100) // q0000…q0099: the first 10 exist already
	timeGet("10,000 partitions, GET /admin/api/queues", "/admin/api/queues", 20)
	timeGet("10,000 partitions, GET /admin/api/queues/q0042 (100 partitions)", "/admin/api/queues/q0042", 20)
	// The dashboard's Overview and Cluster pages read the topology too.
	timeGet("10,000 partitions, GET /admin/api/topology", "/admin/api/topology", 20)
}
