package broker

import (
	"github.com/fibrilgo/fibril/core"
)

// ReloadTLS re-reads the TLS material from its files: the serving
// certificate of the client and admin listeners (S-153: the operator's
// files, or in automatic mode a pair minted again when the old one no
// longer fits), and the inter-broker certificate. New connections get the
// new certificates; open ones keep theirs. Material that does not load is
// refused, logged, and the previous certificate keeps serving. It runs on
// SIGHUP (cmd/fibril) and on POST /admin/api/tls/reload.
//
// The transports and raft hold the inter-broker certificate too; they
// read its files again by themselves when they change (tlsconf.Peer), so
// a reload here and their next handshake agree. CAs are not reloaded.
func (b *Broker) ReloadTLS() (any, error) {
	if b.tls == nil && b.peer == nil {
		return nil, core.Errorf(core.ErrBadRequest, "TLS is off (tls.enabled = false): there is nothing to reload")
	}
	out := map[string]any{}
	var reloaded []string
	if b.tls != nil {
		sum, err := b.tls.Reload()
		if err != nil {
			return nil, core.Errorf(core.ErrBadRequest, "the new TLS material is refused and the previous certificate keeps serving: %v", err)
		}
		out["leaf_sha256"], out["not_after"] = sum, b.tls.NotAfter().UTC()
		reloaded = append(reloaded, "client listener", "admin listener")
	}
	if b.peer != nil {
		changed, err := b.peer.Reload()
		if err != nil {
			return nil, core.Errorf(core.ErrBadRequest, "the new inter-broker certificate is refused and the previous one keeps serving: %v", err)
		}
		out["peer_changed"], out["peer_not_after"] = changed, b.peer.NotAfter().UTC()
		reloaded = append(reloaded, "inter-broker")
	}
	out["reloaded"] = reloaded
	return out, nil
}
