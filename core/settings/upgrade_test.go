package settings

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A document stored before routing.declare_placement_timeout_ms existed
// opens with that setting's default (an upgrade must not refuse to start),
// and keeps every value the operator had set.
func TestDocumentFromBeforeANewRoutingSetting(t *testing.T) {
	old := seed()
	old.Version = 7
	old.Routing.ForwardTimeoutMS = 1234
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw["routing"].(map[string]any), "declare_placement_timeout_ms")
	b, _ = json.Marshal(raw)
	path := filepath.Join(t.TempDir(), "runtime-settings.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
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
