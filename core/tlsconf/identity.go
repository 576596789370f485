package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
)

// Identity returns the name a client certificate claims (S-154): its first
// DNS SAN, else its subject CN. Identities starting with '@' never map —
// principals such as @node authenticate with the cluster secret only, so a
// certificate must not be able to claim one — and yield "". Whether the
// name is a stored user is the auth package's decision.
func Identity(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	id := cert.Subject.CommonName
	if len(cert.DNSNames) > 0 {
		id = cert.DNSNames[0]
	}
	if strings.HasPrefix(id, "@") {
		return ""
	}
	return id
}

// PeerIdentity returns the Identity of a connection's client certificate,
// or "" when the client sent none or it did not verify. Only verified
// chains count: under client_auth = request an unverified certificate
// fails the handshake anyway, but checking here keeps a misconfigured
// tls.Config (InsecureSkipVerify-style settings) from turning into a login.
func PeerIdentity(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return ""
	}
	return Identity(cs.PeerCertificates[0])
}
