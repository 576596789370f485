package plugins

import (
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// A stream's TLS handshake happens in the plugin, so the host cannot hand
// out the *tls.Conn's ConnectionState; the announcement carries what
// callers read from it (version, cipher suite, ALPN, server name, the
// peer's certificates and verified chains), and the host stream rebuilds a
// tls.ConnectionState from that (core.TLSStater).

// tlsStateToProto describes st's handshake, or nil when st ran none.
func tlsStateToProto(st core.Stream) *pluginpb.TLSState {
	ts, ok := st.(core.TLSStater)
	if !ok {
		return nil
	}
	cs := ts.ConnectionState()
	out := &pluginpb.TLSState{
		Version: uint32(cs.Version), CipherSuite: uint32(cs.CipherSuite),
		NegotiatedProtocol: cs.NegotiatedProtocol, ServerName: cs.ServerName, DidResume: cs.DidResume,
	}
	for _, c := range cs.PeerCertificates {
		out.PeerCertificates = append(out.PeerCertificates, c.Raw)
	}
	for _, chain := range cs.VerifiedChains {
		pc := &pluginpb.CertChain{}
		for _, c := range chain {
			pc.Certs = append(pc.Certs, c.Raw)
		}
		out.VerifiedChains = append(out.VerifiedChains, pc)
	}
	return out
}
