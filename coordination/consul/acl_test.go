package consul_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/coordination/consul/consultest"
	"github.com/fibrilgo/fibril/core"
)

// A token without a right the backend needs fails Open (or Register)
// with an error naming the missing rule; with every right, both work.
func TestACLMissingRightIsNamed(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{ACL: true})
	const kv = `key_prefix "acl/" { policy = "write" }`
	const sess = `session_prefix "" { policy = "write" }`
	const svc = `service "fibril" { policy = "write" }`
	cases := []struct {
		name, rules, want string
	}{
		{"nothing", "", `key_prefix "acl/"`},
		{"kv only", kv, `session_prefix ""`},
	}
	for _, tc := range cases {
		tok := agent.Token(t, "t-"+strings.ReplaceAll(tc.name, " ", "-"), tc.rules)
		_, err := open1(consul.Options{NodeID: "n1", Addresses: []string{agent.Addr}, Prefix: "acl", Token: tok})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrForbidden) {
			t.Fatalf("%s: Open: %v, want a forbidden error naming %s", tc.name, err, tc.want)
		}
		if strings.Contains(err.Error(), tok) {
			t.Fatalf("%s: the error shows the token: %v", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}

	coordOnly := agent.Token(t, "t-coord", kv+"\n"+sess)
	o := consul.Options{NodeID: "n1", Addresses: []string{agent.Addr}, Prefix: "acl", Token: coordOnly}
	c, err := open1(o)
	if err != nil {
		t.Fatalf("Open with key and session rights: %v", err)
	}
	defer c.Close()
	if _, err := c.CompareAndSet(context.Background(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	s := consul.Service{Name: "fibril", NodeID: "n1", Address: "127.0.0.1", Port: 1, CheckURL: "http://127.0.0.1:1/readyz",
		CheckInterval: time.Second, DeregisterAfter: time.Minute}
	if _, err := consul.Register(context.Background(), o, s); err == nil || !strings.Contains(err.Error(), `service "fibril"`) {
		t.Fatalf("Register without service:write: %v, want an error naming service \"fibril\"", err)
	}
	o.Token = agent.Token(t, "t-all", kv+"\n"+sess+"\n"+svc)
	r, err := consul.Register(context.Background(), o, s)
	if err != nil {
		t.Fatalf("Register with every right: %v", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func open1(o consul.Options) (*consul.Coordinator, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return consul.Open(ctx, o)
}
