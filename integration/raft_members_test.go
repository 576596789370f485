package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core/testkit"
)

// The raft group through the admin API of a real three-broker cluster:
// every broker is a voter; a broker that is gone shows unreachable;
// removing a reachable voter then is refused (409: no quorum would be
// left), removing the one that is gone works, and the other two keep
// serving and agreeing.
func TestRaftMembersAdmin(t *testing.T) {
	rc := startRaftCluster(t, 3)
	a, gone := rc.nodes[0], rc.nodes[2]
	type member struct {
		ID        string `json:"id"`
		Voter     bool   `json:"voter"`
		Leader    bool   `json:"leader"`
		Reachable bool   `json:"reachable"`
	}
	members := func() []member {
		t.Helper()
		code, body := httpGet(t, a.Admin, "/admin/api/raft/members", nil)
		if code != 200 {
			t.Fatalf("raft members: %d %s", code, body)
		}
		var v struct{ Members []member }
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		return v.Members
	}
	ms := members()
	leaders := 0
	for _, m := range ms {
		if !m.Voter || !m.Reachable {
			t.Errorf("member %+v", m)
		}
		if m.Leader {
			leaders++
		}
	}
	if len(ms) != 3 || leaders != 1 {
		t.Fatalf("members %+v", ms)
	}

	gone.broker.kill()
	testkit.Eventually(t, waitTimeout, gone.id+" unreachable", func() bool {
		for _, m := range members() {
			if m.ID == gone.id {
				return !m.Reachable
			}
		}
		return false
	})
	other := rc.nodes[1]
	if code, body := httpDo(t, "POST", a.Admin, "/admin/api/raft/remove", `{"node":"`+other.id+`"}`); code != 409 || !strings.Contains(body, "quorum") {
		t.Fatalf("removing a reachable voter with one gone: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", a.Admin, "/admin/api/raft/remove", `{"node":"`+gone.id+`"}`); code != 200 {
		t.Fatalf("removing the broker that is gone: %d %s", code, body)
	}
	if ms := members(); len(ms) != 2 {
		t.Fatalf("members after the removal: %+v", ms)
	}
	// The two that are left make the quorum: a write through one is seen
	// by the other.
	_, body := httpGet(t, other.Admin, "/admin/api/runtime-settings", nil)
	var view struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	view.Settings["delivery"].(map[string]any)["expiry_batch_max"] = 4096
	put, _ := json.Marshal(map[string]any{"expected_version": view.Version, "settings": view.Settings})
	if code, body := httpDo(t, "PUT", other.Admin, "/admin/api/runtime-settings", string(put)); code != 200 {
		t.Fatalf("a write with two voters left: %d %s", code, body)
	}
	testkit.Eventually(t, waitTimeout, a.id+" sees the write", func() bool {
		_, body := httpGet(t, a.Admin, "/admin/api/runtime-settings", nil)
		return strings.Contains(body, `"expiry_batch_max":4096`)
	})
}
