package auth

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

var (
	loopback4 = netip.MustParseAddr("127.0.0.1")
	remote4   = netip.MustParseAddr("192.0.2.10")
)

func newAuth(t *testing.T, secret string, allowDefault bool, users ...string) (*Authenticator, *Store) {
	t.Helper()
	s, _ := openTemp(t)
	for _, u := range users {
		if err := s.Add(u, u+"-pw"); err != nil {
			t.Fatal(err)
		}
	}
	var sec []byte
	if secret != "" {
		sec = []byte(secret)
	}
	return NewAuthenticator(Options{Store: s, ClusterSecret: sec, AllowDefaultLoopback: allowDefault}), s
}

func wantDenied(t *testing.T, p Principal, err error, msgPart string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted as %v, want denial containing %q", p, msgPart)
	}
	if !errors.Is(err, core.ErrUnauthorized) {
		t.Fatalf("denial does not wrap ErrUnauthorized: %v", err)
	}
	if !p.IsZero() {
		t.Fatalf("denial returned principal %v", p)
	}
	if !strings.Contains(err.Error(), msgPart) {
		t.Fatalf("denial %q does not contain %q", err, msgPart)
	}
}

func TestNodePrincipal(t *testing.T) {
	ctx := context.Background()
	a, _ := newAuth(t, "s3cret", true)
	p, err := a.Check(ctx, NodePrincipal, "s3cret", remote4)
	if err != nil {
		t.Fatal(err)
	}
	if p != (Principal{Name: "@node", Node: true, Method: MethodNodeSecret}) {
		t.Fatalf("node principal = %+v", p)
	}
	p, err = a.Check(ctx, NodePrincipal, "s3cret-not", remote4)
	wantDenied(t, p, err, "wrong cluster secret")
	p, err = a.Check(ctx, NodePrincipal, "", remote4)
	wantDenied(t, p, err, "wrong cluster secret")

	none, _ := newAuth(t, "", true)
	p, err = none.Check(ctx, NodePrincipal, "", loopback4)
	wantDenied(t, p, err, "FIBRIL_CLUSTER_SECRET")
	p, err = none.Check(ctx, NodePrincipal, "anything", loopback4)
	wantDenied(t, p, err, "FIBRIL_CLUSTER_SECRET")
	if none.HasClusterSecret() || !a.HasClusterSecret() {
		t.Fatal("HasClusterSecret wrong")
	}
}

// Step 1 comes first: even a store cannot hold "@node", and the node check
// costs no argon2 run.
func TestDecisionOrderNodeFirst(t *testing.T) {
	n := countVerifications(t)
	a, _ := newAuth(t, "s3cret", true, "alice")
	if _, err := a.Check(context.Background(), NodePrincipal, "s3cret", remote4); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 0 {
		t.Fatalf("@node login ran %d argon2 verifications", n.Load())
	}
}

func TestStoredUsers(t *testing.T) {
	ctx := context.Background()
	a, _ := newAuth(t, "", true, "alice")
	p, err := a.Check(ctx, "alice", "alice-pw", remote4)
	if err != nil {
		t.Fatal(err)
	}
	if p != (Principal{Name: "alice", Method: MethodPassword}) {
		t.Fatalf("principal = %+v", p)
	}
	p, err = a.Check(ctx, "alice", "nope", remote4)
	wantDenied(t, p, err, "fibrilctl users add")
	p, err = a.Check(ctx, "mallory", "alice-pw", remote4)
	wantDenied(t, p, err, "fibrilctl users add")
	// Unknown user and wrong password are indistinguishable by message.
	_, e1 := a.Check(ctx, "alice", "nope", remote4)
	_, e2 := a.Check(ctx, "mallory", "nope", remote4)
	if e1.Error() != e2.Error() {
		t.Fatalf("messages differ: %q vs %q", e1, e2)
	}
}

func TestDefaultPairLoopback(t *testing.T) {
	ctx := context.Background()
	a, _ := newAuth(t, "", true, "alice")
	for _, peer := range []string{"127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "::1%lo"} {
		p, err := a.Check(ctx, DefaultUser, DefaultPassword, netip.MustParseAddr(peer))
		if err != nil {
			t.Fatalf("%s: %v", peer, err)
		}
		if p != (Principal{Name: "fibril", Method: MethodDefaultLoopback}) {
			t.Fatalf("%s: principal %+v", peer, p)
		}
	}
	for _, peer := range []netip.Addr{remote4, netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("::")} {
		p, err := a.Check(ctx, DefaultUser, DefaultPassword, peer)
		wantDenied(t, p, err, "only accepted from loopback")
	}
	// No client address: a stream through the inter-broker transport.
	p, err := a.Check(ctx, DefaultUser, DefaultPassword, netip.Addr{})
	wantDenied(t, p, err, "never through the inter-broker transport")
	// Wrong password for the default name gets the generic message.
	p, err = a.Check(ctx, DefaultUser, "guess", loopback4)
	wantDenied(t, p, err, "unknown user or wrong password")
}

func TestDefaultPairDisabledByConfig(t *testing.T) {
	a, _ := newAuth(t, "", false)
	p, err := a.Check(context.Background(), DefaultUser, DefaultPassword, loopback4)
	wantDenied(t, p, err, "allow_default_loopback")
}

// A stored user named fibril takes over the name: step 2 decides, with its
// own password, from anywhere; fibril/fibril stops working even locally.
func TestDefaultPairDisabledByRealUser(t *testing.T) {
	ctx := context.Background()
	a, s := newAuth(t, "", true)
	if _, err := a.Check(ctx, DefaultUser, DefaultPassword, loopback4); err != nil {
		t.Fatalf("default pair before the real user: %v", err)
	}
	if err := s.Add(DefaultUser, "real-secret"); err != nil {
		t.Fatal(err)
	}
	p, err := a.Check(ctx, DefaultUser, DefaultPassword, loopback4)
	wantDenied(t, p, err, "unknown user or wrong password")
	p, err = a.Check(ctx, DefaultUser, "real-secret", remote4)
	if err != nil || p != (Principal{Name: "fibril", Method: MethodPassword}) {
		t.Fatalf("real fibril user: %+v, %v", p, err)
	}
	// Removing the real user brings the default back.
	if err := s.Remove(DefaultUser); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Check(ctx, DefaultUser, DefaultPassword, loopback4); err != nil {
		t.Fatalf("default pair after removal: %v", err)
	}
}

// Every password path costs exactly one argon2 verification, so timing
// cannot tell an unknown user from a wrong password (S-146).
func TestOneVerificationPerAttempt(t *testing.T) {
	ctx := context.Background()
	a, _ := newAuth(t, "", true, "alice")
	n := countVerifications(t)
	cases := []struct {
		name, user, pw string
		peer           netip.Addr
	}{
		{"right password", "alice", "alice-pw", remote4},
		{"wrong password", "alice", "x", remote4},
		{"unknown user", "nobody", "x", remote4},
		{"empty user", "", "", remote4},
		{"reserved non-node name", "@admin", "x", remote4},
		{"default pair local", DefaultUser, DefaultPassword, loopback4},
		{"default pair remote", DefaultUser, DefaultPassword, remote4},
		{"default name wrong pw", DefaultUser, "x", loopback4},
	}
	for _, c := range cases {
		before := n.Load()
		_, _ = a.Check(ctx, c.user, c.pw, c.peer)
		if got := n.Load() - before; got != 1 {
			t.Errorf("%s: %d verifications, want 1", c.name, got)
		}
	}
}

// The store is never locked while argon2 runs: admin changes and listings
// complete while a verification is parked inside the hash.
func TestNoLockHeldDuringVerification(t *testing.T) {
	a, s := newAuth(t, "", true, "alice")
	entered, release := make(chan struct{}), make(chan struct{})
	verifyHook = func() { entered <- struct{}{}; <-release }
	t.Cleanup(func() { verifyHook = nil })

	done := make(chan error, 1)
	go func() {
		_, err := a.Check(context.Background(), "alice", "alice-pw", remote4)
		done <- err
	}()
	<-entered
	changed := make(chan error, 1)
	go func() {
		if err := s.Add("bob", "pw"); err != nil {
			changed <- err
			return
		}
		_ = s.List()
		changed <- s.Remove("alice")
	}()
	select {
	case err := <-changed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("store changes blocked behind a running verification")
	}
	close(release)
	// The verification started on the snapshot that still held alice.
	if err := <-done; err != nil {
		t.Fatalf("in-flight login: %v", err)
	}
}

func TestConcurrencyCapHonoursContext(t *testing.T) {
	s, _ := openTemp(t)
	_ = s.Add("alice", "alice-pw")
	a := NewAuthenticator(Options{Store: s, MaxConcurrent: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	verifyHook = func() { entered <- struct{}{}; <-release }
	t.Cleanup(func() { verifyHook = nil })
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = a.Check(context.Background(), "alice", "alice-pw", remote4)
	}()
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := a.Check(ctx, "alice", "alice-pw", remote4)
	if !errors.Is(err, core.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting login: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	close(release)
	<-first
}

func TestCheckCertificate(t *testing.T) {
	a, _ := newAuth(t, "s", true, "alice")
	if p, ok := a.CheckCertificate("alice"); !ok || p != (Principal{Name: "alice", Method: MethodCertificate}) {
		t.Fatalf("alice: %+v %v", p, ok)
	}
	for _, id := range []string{"", "@node", "@alice", "bob", DefaultUser} {
		if p, ok := a.CheckCertificate(id); ok {
			t.Errorf("identity %q mapped to %+v", id, p)
		}
	}
}

func TestSameAndRecheck(t *testing.T) {
	ctx := context.Background()
	a, _ := newAuth(t, "sec", true, "alice", "bob")
	alicePw := Principal{Name: "alice", Method: MethodPassword}
	aliceCert := Principal{Name: "alice", Method: MethodCertificate}
	builtin := Principal{Name: "fibril", Method: MethodDefaultLoopback}
	realFibril := Principal{Name: "fibril", Method: MethodPassword}
	switch {
	case !alicePw.Same(aliceCert):
		t.Error("certificate and password logins of alice differ")
	case alicePw.Same(Principal{Name: "bob", Method: MethodPassword}):
		t.Error("alice same as bob")
	case builtin.Same(realFibril):
		t.Error("built-in fibril same as a stored fibril")
	case nodePrincipal.Same(Principal{Name: "@node", Method: MethodPassword}):
		t.Error("node same as a non-node principal")
	case (Principal{}).Same(Principal{}):
		t.Error("zero principals are the same")
	case !builtin.Same(builtin) || !nodePrincipal.Same(nodePrincipal):
		t.Error("principal not same as itself")
	}

	if p, err := a.Recheck(ctx, aliceCert, "alice", "alice-pw", remote4); err != nil || p.Name != "alice" {
		t.Fatalf("same principal recheck: %+v %v", p, err)
	}
	p, err := a.Recheck(ctx, aliceCert, "bob", "bob-pw", remote4)
	wantDenied(t, p, err, "different principal")
	p, err = a.Recheck(ctx, aliceCert, "alice", "wrong", remote4)
	wantDenied(t, p, err, "wrong password")
	if _, err := a.Recheck(ctx, nodePrincipal, NodePrincipal, "sec", remote4); err != nil {
		t.Fatalf("node recheck: %v", err)
	}
}

func TestNilStore(t *testing.T) {
	a := NewAuthenticator(Options{AllowDefaultLoopback: true})
	if _, err := a.Check(context.Background(), DefaultUser, DefaultPassword, loopback4); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.CheckCertificate("alice"); ok {
		t.Fatal("nil store mapped a certificate")
	}
}
