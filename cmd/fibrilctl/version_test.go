package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// version prints this CLI's build and the broker's, as the release stamp
// made it; --client does not ask the broker; a broker that cannot be
// asked still gets the CLI's line and a failure.
func TestVersion(t *testing.T) {
	r := ctl(t, "", "version")
	mustOK(t, r, "version")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "fibrilctl ") ||
		!strings.HasPrefix(lines[1], "fibril v9.8.7-test (commit 0123456789ab, 2026-12-04T00:00:00Z, go1.") ||
		!strings.Contains(lines[1], "(standalone)") {
		t.Fatalf("version printed %q", r.stdout)
	}
	r = ctl(t, "", "version", "--json")
	mustOK(t, r, "version --json")
	var v struct {
		Client map[string]any `json:"client"`
		Broker struct {
			Build struct{ Version, Revision string } `json:"build"`
		} `json:"broker"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Client["go_version"] == nil ||
		v.Broker.Build.Version != "v9.8.7-test" || v.Broker.Build.Revision != "0123456789abcdef0123" {
		t.Fatalf("version --json: %v %s", err, r.stdout)
	}
	if r := ctl(t, "", "version", "--client", "--admin", "127.0.0.1:1"); r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("version --client: %+v", r)
	}
	if r := ctl(t, "", "version", "--admin", "127.0.0.1:1"); r.code != exitFail || !strings.HasPrefix(r.stdout, "fibrilctl ") ||
		!strings.Contains(r.stderr, "broker at 127.0.0.1:1") {
		t.Fatalf("version with no broker: %+v", r)
	}
}
