package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/fibrilgo/fibril/core"
)

// Denial messages. They travel to the client in AUTH_ERR, so each says what
// to do next; none reveals whether a username exists.
const (
	msgWrongPassword  = "unknown user or wrong password; create a user with `fibrilctl users add`"
	msgDefaultRemote  = "the built-in fibril/fibril login is only accepted from loopback; create a user with `fibrilctl users add` to connect from another host"
	msgDefaultPeer    = "the built-in fibril/fibril login is only accepted from loopback clients, never through the inter-broker transport; create a user with `fibrilctl users add`"
	msgDefaultOff     = "the built-in fibril/fibril login is disabled (auth.allow_default_loopback = false); create a user with `fibrilctl users add`"
	msgNoSecret       = "@node login refused: this broker has no cluster secret; set FIBRIL_CLUSTER_SECRET (or coordination.secret_path, or write <data_dir>/cluster.secret) to the same value on every node"
	msgWrongSecret    = "@node login refused: wrong cluster secret; every node must have the same FIBRIL_CLUSTER_SECRET"
	msgOtherPrincipal = "these credentials belong to a different principal than the one this session is authenticated as; reconnect without resuming to switch identity"
)

// Options configure an Authenticator.
type Options struct {
	// Store holds the users; nil means no users.
	Store *Store
	// ClusterSecret is the resolved cluster secret (ResolveClusterSecret);
	// nil refuses every @node login.
	ClusterSecret []byte
	// AllowDefaultLoopback is auth.allow_default_loopback.
	AllowDefaultLoopback bool
	// MaxConcurrent caps argon2 verifications running at once; further
	// logins wait (bounded by their context). Each verification holds
	// m (19 MiB by default) of memory, so the cap is what keeps a reconnect
	// storm from allocating memory per client. Default: GOMAXPROCS, at
	// least 2 — more would only add memory, not throughput, since one
	// verification keeps one core busy.
	MaxConcurrent int
}

// Authenticator applies the password decision order of S-146. It is safe
// for concurrent use. It deliberately keeps no cache of successful
// verifications: a cache would let a stolen session replay skip the hash.
type Authenticator struct {
	store        *Store
	secretSum    [sha256.Size]byte
	hasSecret    bool
	allowDefault bool
	sem          chan struct{}
	dummy        phc
}

// NewAuthenticator builds an Authenticator. It keeps only a SHA-256 digest
// of the cluster secret, which is all the constant-time check needs.
func NewAuthenticator(o Options) *Authenticator {
	n := o.MaxConcurrent
	if n <= 0 {
		n = max(2, runtime.GOMAXPROCS(0))
	}
	a := &Authenticator{
		store:        o.Store,
		allowDefault: o.AllowDefaultLoopback,
		sem:          make(chan struct{}, n),
		dummy:        dummyHash(),
	}
	if o.Store == nil {
		a.store = &Store{}
		a.store.cur.Store(&userSet{})
	}
	if len(o.ClusterSecret) > 0 {
		a.secretSum, a.hasSecret = sha256.Sum256(o.ClusterSecret), true
	}
	return a
}

// Check authenticates username/password from a client address, in the
// order S-146 fixes. peer is the client socket's IP; the zero Addr means
// the connection has no client address — a stream that arrived through
// the inter-broker transport, whose remote end is a peer broker (or a
// proxy in front of the peer listener), never a loopback client:
//
//  1. "@node" is compared (constant time) with the cluster secret and
//     yields the node principal; without a configured secret it is denied.
//  2. A stored user is verified with argon2id.
//  3. Otherwise "fibril"/"fibril" is accepted when the peer is loopback and
//     auth.allow_default_loopback is on. A stored user named fibril has
//     already been decided in step 2, which is how a real user disables it.
//
// Every non-@node attempt costs exactly one argon2 verification, including
// unknown users (against a dummy hash) and the built-in pair, so response
// time does not reveal which names exist. On failure the Principal is zero
// and the error wraps core.ErrUnauthorized with a message for the client;
// if ctx ends while waiting for a verification slot the error wraps
// core.ErrUnavailable and ctx.Err().
func (a *Authenticator) Check(ctx context.Context, username, password string, peer netip.Addr) (Principal, error) {
	if username == NodePrincipal {
		return a.checkNode(password)
	}
	if err := a.acquire(ctx); err != nil {
		return Principal{}, err
	}
	defer func() { <-a.sem }()

	if h, ok := a.store.lookup(username); ok {
		if verify(password, h) {
			return Principal{Name: username, Method: MethodPassword}, nil
		}
		return Principal{}, deny(msgWrongPassword)
	}
	verify(password, a.dummy) // same cost as a real user; the result is meaningless
	if username == DefaultUser && subtle.ConstantTimeCompare([]byte(password), []byte(DefaultPassword)) == 1 {
		switch {
		case !a.allowDefault:
			return Principal{}, deny(msgDefaultOff)
		case !peer.IsValid():
			return Principal{}, deny(msgDefaultPeer)
		case !IsLoopback(peer):
			return Principal{}, deny(msgDefaultRemote)
		}
		return Principal{Name: DefaultUser, Method: MethodDefaultLoopback}, nil
	}
	return Principal{}, deny(msgWrongPassword)
}

// Recheck is AUTH on a connection that is already authenticated as
// current (a resumed session or a certificate login, S-9): the credentials
// must verify and name the same principal. The caller answers AUTH_OK on
// success and AUTH_ERR 401 plus close on any error.
func (a *Authenticator) Recheck(ctx context.Context, current Principal, username, password string, peer netip.Addr) (Principal, error) {
	p, err := a.Check(ctx, username, password, peer)
	if err != nil {
		return Principal{}, err
	}
	if !p.Same(current) {
		return Principal{}, deny(msgOtherPrincipal)
	}
	return p, nil
}

// CheckCertificate maps a verified client certificate's identity (see
// tlsconf.Identity) to a stored user (S-154). It reports false for an
// empty or '@'-prefixed identity and for names with no stored user; the
// connection then stays unauthenticated and may still send AUTH. The
// built-in fibril login is never reachable by certificate.
func (a *Authenticator) CheckCertificate(identity string) (Principal, bool) {
	if identity == "" || identity[0] == '@' || !a.store.Has(identity) {
		return Principal{}, false
	}
	return Principal{Name: identity, Method: MethodCertificate}, true
}

// HasClusterSecret reports whether @node logins can succeed.
func (a *Authenticator) HasClusterSecret() bool { return a.hasSecret }

func (a *Authenticator) checkNode(secret string) (Principal, error) {
	if !a.hasSecret {
		return Principal{}, deny(msgNoSecret)
	}
	// Comparing fixed-size digests keeps the comparison constant-time in
	// the secret's length too.
	got := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], a.secretSum[:]) != 1 {
		return Principal{}, deny(msgWrongSecret)
	}
	return nodePrincipal, nil
}

func (a *Authenticator) acquire(ctx context.Context) error {
	select {
	case a.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case a.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("too many logins in progress: %w (%w)", core.ErrUnavailable, ctx.Err())
	}
}

func deny(msg string) error { return core.Errorf(core.ErrUnauthorized, "%s", msg) }
