package main

import (
	"encoding/json"
	"testing"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
)

// The measuring is benchkit's and tested there; these pin what jsbench
// adds: compare.sh's flags parse, and the JSON is flat (the shared fields
// beside the JetStream ones, as `fibrilctl bench --json` prints them).

func TestCompareFlagsParse(t *testing.T) {
	// Every flag compare.sh passes; port 1 on loopback refuses at once, so
	// the run fails in setup (exit 1), not on its flags (exit 2).
	args := []string{"--url", "nats://127.0.0.1:1", "--keep-stream", "--duration", "1s", "--warmup", "0s",
		"--drain", "1s", "--size", "1024", "--json", "--producers", "1", "--consumers", "1", "--window", "256",
		"--confirmed", "--prefetch", "256", "--max-ahead", "1024", "--rate", "5000", "--progress=false"}
	if code := run1(args); code != 1 {
		t.Fatalf("exit %d, want 1 (connection refused)", code)
	}
	if code := run1([]string{"--retention", "bogus"}); code != 2 {
		t.Fatalf("bad --retention: exit %d, want 2", code)
	}
}

func TestReplicasFlag(t *testing.T) {
	// The flags replication.sh passes (an R3 stream on a 3-node cluster)
	// parse: the run fails in setup (exit 1), not on its flags (exit 2).
	args := []string{"--url", "nats://127.0.0.1:1", "--replicas", "3", "--confirmed", "--size", "1024",
		"--window", "256", "--producers", "1", "--consumers", "0", "--duration", "1s", "--warmup", "0s",
		"--json", "--progress=false"}
	if code := run1(args); code != 1 {
		t.Fatalf("--replicas 3: exit %d, want 1 (connection refused)", code)
	}
	for _, bad := range []string{"0", "6", "-1"} {
		if code := run1([]string{"--replicas", bad}); code != 2 {
			t.Errorf("--replicas %s: exit %d, want 2", bad, code)
		}
	}
}

func TestResultJSONIsFlat(t *testing.T) {
	b, err := json.Marshal(result{&benchkit.Result{MsgsPerSec: 5, Lost: 1}, streamInfo{System: "jetstream", StreamMsgs: 7, Replicas: 3, StreamLeader: "nats-2"}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["msgs_per_sec"] != 5.0 || m["lost"] != 1.0 || m["system"] != "jetstream" || m["stream_msgs"] != 7.0 ||
		m["replicas"] != 3.0 || m["stream_leader"] != "nats-2" {
		t.Fatalf("JSON %s", b)
	}
	for _, k := range []string{"confirm_p99_us", "e2e_p999_us", "duplicates", "server_version", "retention", "cpu_per_msg_us"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
}
