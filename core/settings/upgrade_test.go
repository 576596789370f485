package settings

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// storedWithout stores d as an older version would have, without what
// drop removes from its JSON, and returns the file's path and bytes.
func storedWithout(t *testing.T, d Document, drop func(raw map[string]any)) (string, []byte) {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	drop(raw)
	b, _ = json.Marshal(raw)
	path := filepath.Join(t.TempDir(), "runtime-settings.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b
}

// dropSetting removes one setting of a group.
func dropSetting(group, key string) func(raw map[string]any) {
	return func(raw map[string]any) { delete(raw[group].(map[string]any), key) }
}

// A document stored before routing.declare_placement_timeout_ms existed
// opens with that setting's default (an upgrade must not refuse to start),
// and keeps every value the operator had set.
func TestDocumentFromBeforeANewRoutingSetting(t *testing.T) {
	old := seed()
	old.Version = 7
	old.Routing.ForwardTimeoutMS = 1234
	path, b := storedWithout(t, old, dropSetting("routing", "declare_placement_timeout_ms"))
	s, err := Open(path, seed())
	if err != nil {
		t.Fatalf("a document without the new setting: %v", err)
	}
	got := s.Current()
	if got.Version != 7 || got.Routing.ForwardTimeoutMS != 1234 || got.Routing.DeclarePlacementTimeoutMS != 5000 {
		t.Fatalf("opened %+v", got)
	}
	if _, err := parseDocument(b); err != nil {
		t.Fatalf("the shared document without the new setting: %v", err)
	}
}

// A document stored by a version without the replication group opens
// with the group's built-in defaults, from a file and from the
// coordinator alike, and keeps every value the operator had set.
func TestDocumentFromBeforeReplication(t *testing.T) {
	old := seed()
	old.Version = 4
	old.Delivery.InflightTTLMS = 777
	path, b := storedWithout(t, old, func(raw map[string]any) { delete(raw, "replication") })
	want := Replication{TargetFollowers: 2, Durability: "majority_durable", ConfirmTimeoutMS: 5000,
		ISRTimeoutMS: 10000, MinInSyncReplicas: 1}
	s, err := Open(path, seed())
	if err != nil {
		t.Fatalf("a document without the replication group: %v", err)
	}
	if got := s.Current(); got.Version != 4 || got.Delivery.InflightTTLMS != 777 || got.Replication != want {
		t.Fatalf("opened %+v", got)
	}
	d, err := parseDocument(b)
	if err != nil || d.Replication != want {
		t.Fatalf("the shared document without the replication group: %+v %v", d.Replication, err)
	}
}

// routing.expose_private_endpoints (core/routing/README.md#private-endpoints)
// is off by default and in a document stored before it existed; a Replace
// turns it on for the next reader at once (Current, Changed: no restart),
// the change persists, and a value that is not a boolean is refused.
func TestExposePrivateEndpointsSetting(t *testing.T) {
	if seed().Routing.ExposePrivateEndpoints {
		t.Fatal("routing.expose_private_endpoints defaults to on")
	}
	old := seed()
	old.Version = 3
	path, _ := storedWithout(t, old, dropSetting("routing", "expose_private_endpoints"))
	s, err := Open(path, seed())
	if err != nil {
		t.Fatalf("a document without the setting: %v", err)
	}
	if s.Current().Routing.ExposePrivateEndpoints {
		t.Fatal("a document without the setting opened with it on")
	}
	changed := s.Changed()
	d := s.Current()
	d.Routing.ExposePrivateEndpoints = true
	if _, err := s.Replace(3, d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("Replace did not signal the change")
	}
	if !s.Current().Routing.ExposePrivateEndpoints {
		t.Fatal("the change is not current")
	}
	s2, err := Open(path, seed())
	if err != nil || !s2.Current().Routing.ExposePrivateEndpoints || s2.Current().Version != 4 {
		t.Fatalf("after reopen: %+v %v", s2.Current().Routing, err)
	}
	_, b := storedWithout(t, old, func(raw map[string]any) { raw["routing"].(map[string]any)["expose_private_endpoints"] = "yes" })
	if _, err := parseDocument(b); err == nil {
		t.Fatal(`a document with expose_private_endpoints = "yes" was accepted`)
	}
}
