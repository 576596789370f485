package auth

import (
	"strings"

	"github.com/fibrilgo/fibril/core/config"
)

// WarnPlaintextPasswords is the startup warning of S-148, exported so the
// caller and tests can match it.
const WarnPlaintextPasswords = "users exist but TLS is off: passwords cross the network in clear; enable tls.enabled (tls.auto_self_signed = true is enough to start)"

// WarnDefaultLoginExposed is the warning about the loopback rule's blind
// spot: a same-host load balancer or proxy in front of a listener makes
// every connection through it look local. listeners names the keys of the
// listeners that are not loopback-only, as "key (address)".
func WarnDefaultLoginExposed(listeners ...string) string {
	verb := " is"
	if len(listeners) > 1 {
		verb = " are"
	}
	return "the built-in fibril/fibril login is enabled and " + strings.Join(listeners, " and ") + verb +
		" not loopback-only — a same-host load balancer or proxy makes every connection look local; set auth.allow_default_loopback = false, or create a real user named fibril (which replaces the built-in pair)"
}

// StartupWarnings returns the warnings the broker logs loudly at start about
// its authentication setup. The default-login warning applies only while
// that login can actually succeed (enabled and no stored fibril user), and
// looks at every listener that serves the client protocol: the client
// listener, and the peer listener when it has its own address. The peer
// listener refuses the built-in login by itself (S-146); the warning does
// not rely on that, so a proxy put in front of either listener is named.
func StartupWarnings(cfg config.Config, store *Store) []string {
	var out []string
	if store != nil && store.Len() > 0 && !cfg.TLS.Enabled {
		out = append(out, WarnPlaintextPasswords)
	}
	defaultLive := cfg.Auth.AllowDefaultLoopback && (store == nil || !store.Has(DefaultUser))
	if !defaultLive {
		return out
	}
	var exposed []string
	if b := cfg.Broker.Listener.Bind; !LoopbackOnly(b) {
		exposed = append(exposed, "broker.listener.bind ("+b+")")
	}
	// Empty: peers use the client listener or its address, checked above.
	if b := cfg.Broker.PeerListener.Bind; b != "" && !LoopbackOnly(b) {
		exposed = append(exposed, "broker.peer_listener.bind ("+b+")")
	}
	if len(exposed) > 0 {
		out = append(out, WarnDefaultLoginExposed(exposed...))
	}
	return out
}
