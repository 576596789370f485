package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Lifetimes of generated material (S-150). The CA lives long because every
// client that pins its fingerprint must be updated when it changes; the
// server certificate lives a year and is re-minted from the CA well before
// it expires, at a restart or a reload.
const (
	caLifetime     = 10 * 365 * 24 * time.Hour
	serverLifetime = 365 * 24 * time.Hour
	// renewBefore is how close to expiry a certificate counts as expiring:
	// operator certificates warn, generated server certificates re-mint.
	renewBefore = 30 * 24 * time.Hour
	// backdate tolerates clients whose clocks run a little behind.
	backdate = time.Hour
)

// newKey generates an ECDSA P-256 key: small, fast to verify, and
// supported by every TLS stack the SDKs use.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// mintCA creates a self-signed CA that may sign leaf certificates only.
func mintCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tag := make([]byte, 4)
	_, _ = rand.Read(tag)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The random tag tells one deployment's CA from another's in
		// certificate viewers; the fingerprint is what clients trust.
		Subject:               pkix.Name{Organization: []string{"Fibril"}, CommonName: "Fibril broker CA " + hex.EncodeToString(tag)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// sans is the subject alternative names of a server certificate.
type sans struct {
	dns []string
	ips []net.IP
}

// leafTemplate describes a leaf certificate signed by ca. Server
// certificates carry both server and client authentication usages because
// a broker presents the same certificate when it dials its peers (S-155).
func leafTemplate(now time.Time, ca *x509.Certificate, cn string, names sans) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(serverLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter // a leaf cannot outlive its issuer
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Fibril"}, CommonName: cn},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     names.dns,
		IPAddresses:  names.ips,
	}, nil
}

// mintLeaf signs tmpl with the CA over a fresh key and returns the PEM
// certificate and PEM key.
func mintLeaf(tmpl, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
