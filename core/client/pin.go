package client

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// PinnedTLS returns a TLS configuration (for Options.TLS or ConnConfig.TLS)
// that trusts a broker by one pinned SHA-256 certificate fingerprint, the
// way every Fibril SDK pins (S-152): the connection is accepted when the
// pinned certificate is the leaf the broker presents, or a certificate of
// the chain it presents that the leaf verifies against (path validation
// with that certificate as the only root, validity dates included). No
// host name is checked: the pin, not the name, identifies the broker.
//
// A broker with tls.auto_self_signed logs its CA's fingerprint and presents
// its leaf followed by that CA, so pinning the CA trusts every broker
// minted from it; pinning a leaf trusts that one certificate. The
// fingerprint is hex, with or without colons (AB:CD:… as the broker logs
// it, or abcd…), in either case.
func PinnedTLS(fingerprint string) (*tls.Config, error) {
	pin, err := parseFingerprint(fingerprint)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is checked against the pin in VerifyConnection instead
		// of the system roots and the host name.
		InsecureSkipVerify: true, //nolint:gosec // replaced by the pin check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			return checkPin(pin, cs.PeerCertificates)
		},
	}, nil
}

// parseFingerprint decodes a SHA-256 fingerprint in hex, colons allowed.
func parseFingerprint(s string) ([]byte, error) {
	h := strings.ReplaceAll(strings.TrimSpace(s), ":", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("fibril client: %q is not a SHA-256 fingerprint (64 hex digits, colons allowed)", s)
	}
	return b, nil
}

// errPinMismatch is the SDKs' answer when no presented certificate is the
// pinned one.
var errPinMismatch = errors.New("fibril client: no certificate in the presented chain matches the pinned fingerprint")

// checkPin accepts chain (leaf first, as presented) when the leaf is the
// pinned certificate, or when a later certificate is, and the leaf
// verifies against it as the root (the presented certificates between
// serve as intermediates).
func checkPin(pin []byte, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("fibril client: the broker presented no certificate")
	}
	leaf := chain[0]
	if matches(pin, leaf) {
		return nil
	}
	for i, c := range chain[1:] {
		if !matches(pin, c) {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(c)
		inter := x509.NewCertPool()
		for j, o := range chain[1:] {
			if j != i {
				inter.AddCert(o)
			}
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			return fmt.Errorf("fibril client: the pinned certificate is in the presented chain but the broker's certificate does not verify against it: %w", err)
		}
		return nil
	}
	return errPinMismatch
}

func matches(pin []byte, c *x509.Certificate) bool {
	sum := sha256.Sum256(c.Raw)
	return subtle.ConstantTimeCompare(pin, sum[:]) == 1
}
