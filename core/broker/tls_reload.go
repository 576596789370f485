package broker

import (
	"github.com/fibrilgo/fibril/core"
)

// ReloadTLS re-reads the serving certificate of the client and admin
// listeners (S-153): the operator's files, or in automatic mode a pair
// minted again when the old one no longer fits. New connections get the
// new certificate; open ones keep theirs. Material that does not load is
// refused, logged, and the previous certificate keeps serving. It runs on
// SIGHUP (cmd/fibril) and on POST /admin/api/tls/reload.
//
// The inter-broker (peer) certificate is not reloaded: transports and
// plugins load it when they open, so it changes with a rolling restart.
func (b *Broker) ReloadTLS() (any, error) {
	if b.tls == nil {
		return nil, core.Errorf(core.ErrBadRequest, "TLS is off (tls.enabled = false): there is nothing to reload")
	}
	sum, err := b.tls.Reload()
	if err != nil {
		return nil, core.Errorf(core.ErrBadRequest, "the new TLS material is refused and the previous certificate keeps serving: %v", err)
	}
	return map[string]any{"leaf_sha256": sum, "not_after": b.tls.NotAfter().UTC(),
		"reloaded":     []string{"client listener", "admin listener"},
		"not_reloaded": map[string]string{"peer": "the inter-broker certificate changes with a restart (drain, restart, next broker)"}}, nil
}
