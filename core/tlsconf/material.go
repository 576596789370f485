package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Material is the broker's loaded TLS material. The serving pair sits
// behind an atomic pointer that every handshake reads through
// GetCertificate, so Reload swaps it without touching established
// connections (they keep the certificate they negotiated, S-153). A nil
// *Material means TLS is off: ServerConfig and AdminConfig return nil.
type Material struct {
	opts       Options
	log        *slog.Logger
	names      sans
	ca         *autoCA // nil when the pair comes from tls.cert_path/key_path
	caFP       string
	clientAuth tls.ClientAuthType
	clientCAs  *x509.CertPool
	cur        atomic.Pointer[tls.Certificate]
	reloadMu   sync.Mutex
}

// Load prepares the TLS material described by opts. It returns (nil, nil)
// when tls.enabled is false. Exactly one certificate source must be
// configured: tls.cert_path + tls.key_path, or tls.auto_self_signed
// (config validation already enforces this; Load re-checks because it may
// be handed a hand-built config). Every error names the config key and
// file involved; Load never falls back to plaintext.
func Load(opts Options) (*Material, error) {
	if !opts.TLS.Enabled {
		return nil, nil
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := opts.TLS
	m := &Material{opts: opts, log: log, names: serverSANs(opts.Hosts)}
	var err error
	if m.clientAuth, err = clientAuthType(t.ClientAuth); err != nil {
		return nil, err
	}
	now := opts.clock()
	files := t.CertPath != "" || t.KeyPath != ""
	var pair *tls.Certificate
	switch {
	case files && t.AutoSelfSigned:
		return nil, errors.New("tls: configure exactly one certificate source: tls.cert_path + tls.key_path, or tls.auto_self_signed, not both")
	case files:
		if t.CertPath == "" || t.KeyPath == "" {
			return nil, errors.New("tls.cert_path and tls.key_path must be set together")
		}
		if pair, err = m.loadFiles(now); err != nil {
			return nil, err
		}
	case t.AutoSelfSigned:
		if opts.DataDir == "" {
			return nil, errors.New("tls.auto_self_signed needs server.data_dir to keep the generated CA")
		}
		if m.ca, err = openAutoCA(filepath.Join(opts.DataDir, DirName), now, log); err != nil {
			return nil, err
		}
		m.caFP = Fingerprint(m.ca.cert.Raw)
		log.Info("tls: CA fingerprint (pin it in clients, or give them ca.pem)",
			"sha256", m.caFP, "file", m.ca.path(CAFile))
		if pair, err = m.ca.ensureServer(m.names, now, log); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("tls.enabled needs a certificate source: tls.cert_path + tls.key_path, or tls.auto_self_signed = true")
	}
	if m.clientAuth != tls.NoClientCert {
		if m.clientCAs, err = m.clientPool(); err != nil {
			return nil, err
		}
	}
	m.cur.Store(pair)
	log.Info("tls: serving certificate", "leaf_sha256", sha256Hex(pair.Certificate[0]),
		"dns", pair.Leaf.DNSNames, "ips", pair.Leaf.IPAddresses, "not_after", pair.Leaf.NotAfter.UTC(),
		"client_auth", t.ClientAuth)
	return m, nil
}

// loadFiles reads and checks the operator's pair.
func (m *Material) loadFiles(now time.Time) (*tls.Certificate, error) {
	t := m.opts.TLS
	pair, err := loadPair("tls.cert_path", t.CertPath, "tls.key_path", t.KeyPath)
	if err != nil {
		return nil, err
	}
	warn, err := checkServerLeaf("tls.cert_path "+t.CertPath, pair.Leaf, now)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		m.log.Warn("tls: " + warn)
	}
	if w := keyModeWarning("tls.key_path", t.KeyPath); w != "" {
		m.log.Warn("tls: " + w)
	}
	return pair, nil
}

// clientPool is the CA set client certificates verify against (S-154):
// tls.client_ca_path, else the generated CA. Operator certificates have
// no generated CA, so they need client_ca_path.
func (m *Material) clientPool() (*x509.CertPool, error) {
	if p := m.opts.TLS.ClientCAPath; p != "" {
		return loadPool("tls.client_ca_path", p)
	}
	if m.ca != nil {
		return m.CAPool(), nil
	}
	return nil, fmt.Errorf("tls.client_auth = %s needs tls.client_ca_path: with tls.cert_path there is no generated CA to verify client certificates against", m.opts.TLS.ClientAuth)
}

// ServerConfig returns a fresh tls.Config for the broker listener: TLS 1.2
// or later, the current pair via GetCertificate (so Reload applies to new
// handshakes), and the client-certificate policy of tls.client_auth. The
// caller may modify the returned value.
func (m *Material) ServerConfig() *tls.Config {
	if m == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: m.getCertificate,
		ClientAuth:     m.clientAuth,
		ClientCAs:      m.clientCAs,
	}
}

// AdminConfig returns the tls.Config for the admin HTTP listener (S-156),
// or nil when tls.admin_enabled is false or TLS is off. The admin API
// authenticates with HTTP credentials, so it asks for no client
// certificate.
func (m *Material) AdminConfig() *tls.Config {
	if m == nil || !m.opts.TLS.AdminEnabled {
		return nil
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: m.getCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}

// GetClientCertificate presents the serving pair when this broker dials a
// peer (S-155), so any peer client_auth setting accepts it.
func (m *Material) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return m.cur.Load(), nil
}

func (m *Material) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return m.cur.Load(), nil
}

// Reload re-reads the serving pair (S-153): the operator's files, or in
// auto mode the files under <data_dir>/tls, re-minted from the CA when
// they no longer fit. New material is validated before it is swapped in;
// on any error the previous pair keeps serving and the error says why.
// The CA and client CA set are not reloaded (CA rotation needs a rolling
// restart). It returns the new leaf's SHA-256 (plain lower-case hex).
func (m *Material) Reload() (leafSHA256 string, err error) {
	if m == nil {
		return "", errors.New("tls: TLS is off (tls.enabled = false); nothing to reload")
	}
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	now := m.opts.clock()
	var pair *tls.Certificate
	if m.ca != nil {
		pair, err = m.ca.ensureServer(m.names, now, m.log)
	} else {
		pair, err = m.loadFiles(now)
	}
	if err != nil {
		m.log.Warn("tls: reload rejected; the previous certificate keeps serving", "err", err)
		return "", err
	}
	m.cur.Store(pair)
	sum := sha256Hex(pair.Certificate[0])
	m.log.Info("tls: certificate reloaded", "leaf_sha256", sum, "not_after", pair.Leaf.NotAfter.UTC())
	return sum, nil
}

// LeafSHA256 returns the SHA-256 of the serving certificate as plain
// lower-case hex (the admin API's leaf_sha256), or "" when TLS is off.
func (m *Material) LeafSHA256() string {
	if m == nil {
		return ""
	}
	return sha256Hex(m.cur.Load().Certificate[0])
}

// NotAfter returns the serving certificate's expiry (for the node's
// heartbeat labels, S-131); zero when TLS is off.
func (m *Material) NotAfter() time.Time {
	if m == nil {
		return time.Time{}
	}
	return m.cur.Load().Leaf.NotAfter
}

// CAFingerprint returns the auto CA's SHA-256 fingerprint in colon form,
// or "" for operator certificates (their CA is not known here) and when
// TLS is off.
func (m *Material) CAFingerprint() string {
	if m == nil {
		return ""
	}
	return m.caFP
}

// CAPool returns a pool holding the auto CA, for verifying peers when
// tls.peer_ca_path is unset (S-155); nil for operator certificates.
func (m *Material) CAPool() *x509.CertPool {
	if m == nil || m.ca == nil {
		return nil
	}
	p := x509.NewCertPool()
	p.AddCert(m.ca.cert)
	return p
}
