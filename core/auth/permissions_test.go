package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core"
)

func TestMatchTopic(t *testing.T) {
	for _, c := range []struct {
		pattern, topic string
		want           bool
	}{
		{"orders", "orders", true},
		{"orders", "orders2", false},
		{"*", "anything", true},
		{"orders.*", "orders.eu", true},
		{"orders.*", "orders.", true},
		{"orders.*", "orders", false},
		{"*.audit", "billing.audit", true},
		{"*.audit", "billing.audits", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"ab*ba", "aba", false}, // the prefix and the suffix may not overlap
	} {
		if got := matchTopic(c.pattern, c.topic); got != c.want {
			t.Errorf("matchTopic(%q, %q) = %v, want %v", c.pattern, c.topic, got, c.want)
		}
	}
}

func TestPermissionsAllows(t *testing.T) {
	ps := Permissions{
		{Topics: []string{"orders.*"}, Actions: []Action{ActionPublish}},
		{Topics: []string{"orders.*", "audit"}, Actions: []Action{ActionConsume}},
	}
	for _, c := range []struct {
		a     Action
		topic string
		want  bool
	}{
		{ActionPublish, "orders.eu", true},
		{ActionConsume, "orders.eu", true},
		{ActionDeclare, "orders.eu", false},
		{ActionPublish, "audit", false},
		{ActionConsume, "audit", true},
	} {
		if got := ps.Allows(c.a, c.topic); got != c.want {
			t.Errorf("Allows(%s, %s) = %v", c.a, c.topic, got)
		}
	}
	if !Permissions(nil).Allows(ActionDeclare, "x") || (Permissions{}).Allows(ActionConsume, "x") {
		t.Error("nil must allow everything and an empty list nothing")
	}
	for _, bad := range []Permissions{{{Topics: nil, Actions: []Action{ActionPublish}}}, {{Topics: []string{"x"}, Actions: []Action{"delete"}}},
		{{Topics: []string{"a/b"}, Actions: []Action{ActionPublish}}}} {
		if err := bad.Validate(); !errors.Is(err, core.ErrBadRequest) {
			t.Errorf("Validate(%+v) = %v", bad, err)
		}
	}
}

// A store is written in format 1 until a user has a permission list, then
// in format 2, which keeps the lists (an empty one too) across a reopen;
// clearing the last list goes back to format 1.
func TestStorePermissionsFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.json")
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"alice", "bob"} {
		if err := s.Add(n, "pw-"+n); err != nil {
			t.Fatal(err)
		}
	}
	format := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))[2] // {"format": N,
	}
	if f := format(); f != "1," {
		t.Fatalf("format %s without permissions", f)
	}
	alice := Permissions{{Topics: []string{"orders.*"}, Actions: []Action{ActionPublish, ActionConsume}}}
	if err := s.SetPermissions("alice", alice); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermissions("bob", Permissions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermissions("carol", nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("permissions of an unknown user: %v", err)
	}
	if err := s.SetPermissions("alice", Permissions{{Topics: []string{"x"}}}); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("an entry without actions: %v", err)
	}
	if f := format(); f != "2," {
		t.Fatalf("format %s with permissions", f)
	}
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if ps, ok := s2.Permissions("alice"); !ok || !ps.Allows(ActionPublish, "orders.eu") || ps.Allows(ActionDeclare, "orders.eu") {
		t.Fatalf("alice after a reopen: %+v %v", ps, ok)
	}
	if ps, _ := s2.Permissions("bob"); ps == nil || ps.Allows(ActionConsume, "x") {
		t.Fatalf("bob's empty list after a reopen: %#v", ps)
	}
	for _, n := range []string{"alice", "bob"} {
		if err := s2.SetPermissions(n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if f := format(); f != "1," {
		t.Fatalf("format %s after clearing every list", f)
	}
	if err := os.WriteFile(path, []byte(`{"format": 3, "users": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(path); err == nil || !strings.Contains(err.Error(), "format 3 is not supported") {
		t.Fatalf("a newer format: %v", err)
	}
}
