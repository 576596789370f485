package auth

import "github.com/fibrilgo/fibril/core/config"

// Startup warnings, exported so the caller and tests can match them.
const (
	// WarnPlaintextPasswords is S-148.
	WarnPlaintextPasswords = "users exist but TLS is off: passwords cross the network in clear; enable tls.enabled (tls.auto_self_signed = true is enough to start)"
	// WarnDefaultLoginExposed flags the loopback rule's blind spot.
	WarnDefaultLoginExposed = "the built-in fibril/fibril login is enabled and the broker listener is not loopback-only — a same-host load balancer or proxy makes every client look local; set auth.allow_default_loopback = false, or create a real user named fibril (which replaces the built-in pair)"
)

// StartupWarnings returns the warnings the broker logs loudly at start about
// its authentication setup. The default-login warning applies only while
// that login can actually succeed (enabled and no stored fibril user).
func StartupWarnings(cfg config.Config, store *Store) []string {
	var out []string
	if store != nil && store.Len() > 0 && !cfg.TLS.Enabled {
		out = append(out, WarnPlaintextPasswords)
	}
	defaultLive := cfg.Auth.AllowDefaultLoopback && (store == nil || !store.Has(DefaultUser))
	if defaultLive && !LoopbackOnly(cfg.Broker.Listener.Bind) {
		out = append(out, WarnDefaultLoginExposed)
	}
	return out
}
