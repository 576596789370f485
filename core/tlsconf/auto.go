package tlsconf

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Layout of <data_dir>/tls in auto_self_signed mode (S-150).
const (
	DirName       = "tls"
	CAFile        = "ca.pem"     // the CA certificate clients trust or pin
	CAKeyFile     = "ca.key"     // its key; may be kept offline once server.pem exists
	ServerFile    = "server.pem" // the serving certificate, minted from the CA
	ServerKeyFile = "server.key"
)

const autoKey = "tls.auto_self_signed"

// autoCA is the CA of auto_self_signed mode: generated on first boot or
// copied in by the operator (one CA shared by a cluster, so clients trust
// every node through one fingerprint).
type autoCA struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer // nil when ca.key is absent
}

func (ca *autoCA) path(name string) string { return filepath.Join(ca.dir, name) }

// openAutoCA loads the CA from dir, generating one when the directory has
// no CA at all. Half-present states (a key without its certificate, a
// server certificate without the CA) are errors rather than a silent new
// CA: a new CA changes the fingerprint every client pins.
func openAutoCA(dir string, now time.Time, log *slog.Logger) (*autoCA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: create %s: %w", autoKey, dir, err)
	}
	ca := &autoCA{dir: dir}
	certPath, keyPath := ca.path(CAFile), ca.path(CAKeyFile)
	hasCert, hasKey := exists(certPath), exists(keyPath)
	switch {
	case !hasCert && !hasKey:
		for _, f := range []string{ServerFile, ServerKeyFile} {
			if exists(ca.path(f)) {
				return nil, fmt.Errorf("%s: %s exists but %s does not; restore the CA files, or delete %s and %s to generate a new CA (clients pinning the old fingerprint must then be updated)",
					autoKey, ca.path(f), CAFile, ServerFile, ServerKeyFile)
			}
		}
		return ca, ca.generate(now, log)
	case !hasCert:
		return nil, fmt.Errorf("%s: %s exists without %s; copy the CA certificate there too, or delete %s to generate a new CA", autoKey, keyPath, CAFile, CAKeyFile)
	}
	certs, certPEM, err := readCerts(autoKey, certPath)
	if err != nil {
		return nil, err
	}
	ca.cert = certs[0]
	if !ca.cert.IsCA {
		return nil, fmt.Errorf("%s %s: the certificate is not a CA (basic constraints CA:FALSE)", autoKey, certPath)
	}
	if err := checkValidity(autoKey+" "+certPath, ca.cert, now); err != nil {
		return nil, fmt.Errorf("%w; delete the files in %s to generate a new CA (clients pinning the old fingerprint must then be updated)", err, dir)
	}
	if left := ca.cert.NotAfter.Sub(now); left < renewBefore {
		log.Warn("tls: the CA expires soon; rotating it needs new client trust and a rolling restart",
			"file", certPath, "not_after", ca.cert.NotAfter.UTC())
	}
	if !hasKey {
		log.Info("tls: no CA key present; the server certificate can be served but not re-minted", "missing", keyPath)
		return ca, nil
	}
	keyPEM, err := readKey(autoKey, keyPath)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %s does not belong to %s: %w", autoKey, keyPath, certPath, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s %s: unsupported key type %T", autoKey, keyPath, pair.PrivateKey)
	}
	ca.key = signer
	return ca, nil
}

func (ca *autoCA) generate(now time.Time, log *slog.Logger) error {
	cert, key, err := mintCA(now)
	if err != nil {
		return fmt.Errorf("%s: generate CA: %w", autoKey, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return err
	}
	// Key first: a crash between the two writes leaves ca.key alone, which
	// openAutoCA reports instead of minting over it.
	if err := writeFileAtomic(ca.path(CAKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("%s: write %s: %w", autoKey, ca.path(CAKeyFile), err)
	}
	if err := writeFileAtomic(ca.path(CAFile), encodeCert(cert.Raw), 0o644); err != nil {
		return fmt.Errorf("%s: write %s: %w", autoKey, ca.path(CAFile), err)
	}
	ca.cert, ca.key = cert, key
	log.Info("tls: generated a new CA; give clients its fingerprint or ca.pem", "file", ca.path(CAFile), "not_after", cert.NotAfter.UTC())
	return nil
}

// ensureServer returns the server pair from the directory, minting a new
// one from the CA when it is missing, unreadable, not signed by this CA,
// expiring within renewBefore, or not covering every requested SAN.
// Without ca.key a pair that still works is served with a warning; one
// that does not is an error.
func (ca *autoCA) ensureServer(want sans, now time.Time, log *slog.Logger) (*tls.Certificate, error) {
	certPath, keyPath := ca.path(ServerFile), ca.path(ServerKeyFile)
	var reason string
	var usable *tls.Certificate
	if exists(certPath) || exists(keyPath) {
		pair, err := loadPair(autoKey, certPath, autoKey, keyPath)
		if err != nil {
			reason = err.Error()
		} else if reason = ca.unusable(pair.Leaf, now); reason == "" {
			usable = ca.chain(pair)
			reason = renewReason(pair.Leaf, want, now)
			if reason == "" {
				return usable, nil
			}
		}
	} else {
		reason = "no server certificate yet"
	}
	if ca.key == nil {
		if usable != nil {
			log.Warn("tls: the server certificate needs re-minting but "+CAKeyFile+" is absent; serving it as is", "reason", reason, "dir", ca.dir)
			return usable, nil
		}
		return nil, fmt.Errorf("%s: %s, and %s is absent so a new server certificate cannot be minted; copy the CA key to %s or provide %s and %s",
			autoKey, reason, CAKeyFile, ca.dir, ServerFile, ServerKeyFile)
	}
	return ca.mintServer(want, now, reason, log)
}

func (ca *autoCA) mintServer(want sans, now time.Time, reason string, log *slog.Logger) (*tls.Certificate, error) {
	tmpl, err := leafTemplate(now, ca.cert, want.dns[0], want)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := mintLeaf(tmpl, ca.cert, ca.key)
	if err != nil {
		return nil, fmt.Errorf("%s: mint server certificate: %w", autoKey, err)
	}
	certPEM = append(certPEM, encodeCert(ca.cert.Raw)...) // the file holds the chain it is served with
	// Key first: after a crash between the writes the old certificate no
	// longer matches the key, and the next start re-mints.
	if err := writeFileAtomic(ca.path(ServerKeyFile), keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("%s: write %s: %w", autoKey, ca.path(ServerKeyFile), err)
	}
	if err := writeFileAtomic(ca.path(ServerFile), certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("%s: write %s: %w", autoKey, ca.path(ServerFile), err)
	}
	pair, err := keyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	log.Info("tls: minted a server certificate", "reason", reason, "file", ca.path(ServerFile),
		"dns", want.dns, "ips", want.ips, "not_after", pair.Leaf.NotAfter.UTC())
	return ca.chain(pair), nil
}

// chain makes pair present its leaf followed by this CA, whatever the
// certificate file held after the leaf (an older server.pem holds the
// leaf alone). SDKs that pin the CA fingerprint the broker logs accept
// the CA only when it is in the presented chain and signed the leaf
// (S-152); clients that trust ca.pem are not affected.
func (ca *autoCA) chain(pair *tls.Certificate) *tls.Certificate {
	pair.Certificate = [][]byte{pair.Certificate[0], ca.cert.Raw}
	return pair
}

// unusable says why a server certificate cannot be served at all, or "".
func (ca *autoCA) unusable(leaf *x509.Certificate, now time.Time) string {
	if leaf.CheckSignatureFrom(ca.cert) != nil {
		return ServerFile + " is not signed by " + CAFile
	}
	if err := checkValidity(ServerFile, leaf, now); err != nil {
		return err.Error()
	}
	return ""
}

// renewReason says why a servable certificate should be replaced, or "".
func renewReason(leaf *x509.Certificate, want sans, now time.Time) string {
	if leaf.NotAfter.Sub(now) < renewBefore {
		return fmt.Sprintf("%s expires on %s", ServerFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if missing := uncovered(leaf, want); len(missing) > 0 {
		return fmt.Sprintf("%s does not cover %s", ServerFile, strings.Join(missing, ", "))
	}
	return ""
}

// uncovered lists the wanted SANs a certificate lacks. Extra SANs are
// fine: dropping an advertise host does not force a new certificate.
func uncovered(c *x509.Certificate, want sans) []string {
	var missing []string
	for _, n := range want.dns {
		if !slices.ContainsFunc(c.DNSNames, func(d string) bool { return strings.EqualFold(d, n) }) {
			missing = append(missing, n)
		}
	}
	for _, ip := range want.ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			missing = append(missing, ip.String())
		}
	}
	return missing
}
