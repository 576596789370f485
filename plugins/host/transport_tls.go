package host

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// A stream's TLS handshake happens in the plugin, so the host cannot hand
// out the *tls.Conn's ConnectionState; the announcement carries what
// callers read from it (version, cipher suite, ALPN, server name, the
// peer's certificates and verified chains), and the host stream rebuilds a
// tls.ConnectionState from that (core.TLSStater).

// tlsStateFromProto rebuilds the connection state a plugin described.
// Certificates that do not parse are left out (they were verified, if at
// all, in the plugin).
func tlsStateFromProto(p *pluginpb.TLSState) tls.ConnectionState {
	cs := tls.ConnectionState{
		Version: uint16(p.GetVersion()), CipherSuite: uint16(p.GetCipherSuite()),
		NegotiatedProtocol: p.GetNegotiatedProtocol(), ServerName: p.GetServerName(),
		DidResume: p.GetDidResume(), HandshakeComplete: true,
	}
	cs.PeerCertificates = parseCerts(p.GetPeerCertificates())
	for _, chain := range p.GetVerifiedChains() {
		if certs := parseCerts(chain.GetCerts()); len(certs) > 0 {
			cs.VerifiedChains = append(cs.VerifiedChains, certs)
		}
	}
	return cs
}

func parseCerts(ders [][]byte) []*x509.Certificate {
	var out []*x509.Certificate
	for _, der := range ders {
		if c, err := x509.ParseCertificate(der); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// tlsHostStream is a host stream whose plugin-side stream ran a TLS
// handshake. Plain streams lack the method, so a type assertion on
// core.TLSStater tells them apart, as with the built-in transports.
type tlsHostStream struct {
	*hostStream
	state tls.ConnectionState
}

var _ core.TLSStater = tlsHostStream{}

func (s tlsHostStream) ConnectionState() tls.ConnectionState { return s.state }
