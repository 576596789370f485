package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// repartition on the standalone test broker: the admin API answers 404
// and says why; usage errors are caught before anything is sent.
func TestRepartitionStandalone(t *testing.T) {
	r := ctl(t, "", "repartition", "--topic", "orders", "--partitions", "4")
	if r.code != exitFail || !strings.Contains(r.stderr, "standalone") {
		t.Fatalf("repartition on a standalone broker: %+v", r)
	}
	for _, args := range [][]string{{"repartition"}, {"repartition", "--topic", "orders"},
		{"repartition", "--partitions", "4"}, {"repartition", "--topic", "orders", "--partitions", "0"},
		{"repartition", "--topic", "orders", "--partitions", "4", "extra"}} {
		if r := ctl(t, "", args...); r.code != exitUsage {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

// repartition sends POST /admin/api/repartition {topic, group?,
// partition_count} and prints the answer: here from canned answers in the
// shape core/broker serves.
func TestRepartitionRender(t *testing.T) {
	var bodies []map[string]any
	answers := []struct {
		status int
		body   string
	}{
		{200, `{"topic":"orders","group":"eu","partition_count":4,"status":"started","from":2,"to":4}`},
		{200, `{"topic":"orders","group":"","partition_count":2,"status":"unchanged"}`},
		{400, `{"code":"bad_request","message":"partition count 3 is neither a multiple nor a divisor of 2"}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/admin/api/repartition" {
			http.NotFound(w, r)
			return
		}
		data, _ := io.ReadAll(r.Body)
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Errorf("body %q: %v", data, err)
		}
		a := answers[len(bodies)]
		bodies = append(bodies, m)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")

	r := ctl(t, "", "--admin", admin, "repartition", "--topic", "orders", "--group", "eu", "--partitions", "4")
	mustOK(t, r, "repartition grow")
	if !strings.Contains(r.stdout, "started: queue orders (group eu) from 2 to 4 partitions") {
		t.Errorf("grow: stdout %q", r.stdout)
	}
	r = ctl(t, "", "--admin", admin, "repartition", "--topic", "orders", "--partitions", "2")
	mustOK(t, r, "repartition same count")
	if !strings.Contains(r.stdout, "unchanged: queue orders already has 2 partitions") {
		t.Errorf("unchanged: stdout %q", r.stdout)
	}
	r = ctl(t, "", "--admin", admin, "repartition", "--topic", "orders", "--partitions", "3")
	if r.code != exitFail || !strings.Contains(r.stderr, "neither a multiple nor a divisor") {
		t.Errorf("refused: %+v", r)
	}
	want := []map[string]any{
		{"topic": "orders", "group": "eu", "partition_count": 4.0},
		{"topic": "orders", "partition_count": 2.0},
		{"topic": "orders", "partition_count": 3.0},
	}
	if len(bodies) != len(want) {
		t.Fatalf("bodies %v", bodies)
	}
	for i, b := range bodies {
		if len(b) != len(want[i]) {
			t.Errorf("body %d: %v, want %v", i, b, want[i])
		}
		for k, v := range want[i] {
			if b[k] != v {
				t.Errorf("body %d: %s = %v, want %v", i, k, b[k], v)
			}
		}
	}
	// --json prints the answer as it came.
	answers = append(answers, struct {
		status int
		body   string
	}{200, `{"topic":"orders","group":"","partition_count":8,"status":"started","from":4,"to":8}`})
	r = ctl(t, "", "--admin", admin, "repartition", "--topic", "orders", "--partitions", "8", "--json")
	mustOK(t, r, "repartition --json")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out["status"] != "started" || out["to"] != 8.0 {
		t.Errorf("--json: %q (%v)", r.stdout, err)
	}
}
