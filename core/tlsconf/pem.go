package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Every error about a file names the config key and the path, because the
// operator fixes it there ("tls.key_path /etc/fibril/key.pem: …").

// readCerts reads every CERTIFICATE block of a PEM file.
func readCerts(key, path string) ([]*x509.Certificate, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: cannot read: %w", key, path, err)
	}
	var certs []*x509.Certificate
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: certificate %d does not parse: %w", key, path, len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("%s %s: no PEM CERTIFICATE block found (is it a PEM file, and not the key?)", key, path)
	}
	return certs, data, nil
}

// readKey reads a PEM private key file and checks it holds an unencrypted
// private key, so the error says what is wrong instead of the generic
// "failed to find PRIVATE KEY block".
func readKey(key, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: cannot read: %w", key, path, err)
	}
	var types []string
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch {
		case b.Type == "ENCRYPTED PRIVATE KEY" || b.Headers["Proc-Type"] != "":
			return nil, fmt.Errorf("%s %s: the key is encrypted; store it unencrypted with mode 0600 (e.g. openssl pkey -in key.pem -out plain.pem)", key, path)
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			return data, nil
		}
		types = append(types, b.Type)
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("%s %s: not a PEM file", key, path)
	}
	return nil, fmt.Errorf("%s %s: no PEM private key block found (found %s)", key, path, strings.Join(types, ", "))
}

// loadPair loads a certificate chain and its key. Mismatch and parse
// errors name both files.
func loadPair(certKey, certPath, keyKey, keyPath string) (*tls.Certificate, error) {
	_, certPEM, err := readCerts(certKey, certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readKey(keyKey, keyPath)
	if err != nil {
		return nil, err
	}
	pair, err := keyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, fmt.Errorf("%s %s does not match the certificate in %s %s", keyKey, keyPath, certKey, certPath)
		}
		return nil, fmt.Errorf("%s %s with %s %s: %w", certKey, certPath, keyKey, keyPath, err)
	}
	return pair, nil
}

// keyPair is tls.X509KeyPair with Leaf always set (it is unset under
// GODEBUG=x509keypairleaf=0), since expiry and SAN checks read it.
func keyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}

// checkServerLeaf applies the serving rules to a leaf: it must be valid now
// and usable for server authentication; it returns a warning when it
// expires within renewBefore.
func checkServerLeaf(what string, leaf *x509.Certificate, now time.Time) (warning string, err error) {
	if err := checkValidity(what, leaf, now); err != nil {
		return "", err
	}
	if len(leaf.ExtKeyUsage) > 0 &&
		!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) &&
		!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return "", fmt.Errorf("%s: the certificate is not valid for TLS servers (its extended key usage lacks serverAuth)", what)
	}
	if left := leaf.NotAfter.Sub(now); left < renewBefore {
		return fmt.Sprintf("%s: the certificate expires in %d days (%s); renew it and reload", what, int(left.Hours()/24), leaf.NotAfter.UTC().Format(time.RFC3339)), nil
	}
	return "", nil
}

func checkValidity(what string, c *x509.Certificate, now time.Time) error {
	switch {
	case now.After(c.NotAfter):
		return fmt.Errorf("%s: the certificate expired on %s", what, c.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(c.NotBefore):
		return fmt.Errorf("%s: the certificate is not valid before %s (check the clock)", what, c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// loadPool reads a CA bundle for verifying client certificates.
func loadPool(key, path string) (*x509.CertPool, error) {
	certs, _, err := readCerts(key, path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// keyModeWarning returns a warning when a private key file is accessible
// to every user on the host. Group access is left alone: packaged setups
// commonly share keys with a service group (0640).
func keyModeWarning(key, path string) string {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o007 == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s is accessible to every user on this host (mode %04o); chmod 600 it", key, path, st.Mode().Perm())
}
