package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Peer TLS is the material brokers use between themselves (raft, the
// inter-broker transport): every node presents a certificate signed by a
// CA the whole cluster trusts, and each side checks that the other's
// certificate names the node id it expects (ids, never addresses,
// identify members: an address can move or be shared by a balancer).
//
// The node id travels in a URI SAN, urn:fibril:node:<id>. A URI rather than
// a DNS name because node ids are not host names (they may hold '_' and
// need not resolve), and because Identity maps a certificate's first DNS
// SAN to a client user name: a peer certificate must never double as a
// login. For the same reason the subject CN of a minted peer certificate
// is "@node:<id>", which Identity refuses ('@' names never map).

// NodeURIPrefix starts the URI SAN that names a node.
const NodeURIPrefix = "urn:fibril:node:"

// PeerALPN is the TLS application protocol brokers offer one another. On a
// port that clients and peers share, the listener recognises a peer by it
// and answers with the peer certificate and mutual TLS (SharedConfig); a
// client offering anything else gets the client-facing certificate.
const PeerALPN = "fibril-peer/1"

// Files of auto peer material in PeerOptions.Dir.
const (
	PeerCAFile   = "peer-ca.pem" // copy of the cluster CA certificate (no key)
	PeerFile     = "peer.pem"    // this node's certificate, minted from the cluster CA
	PeerKeyFile  = "peer.key"    // its key
	peerAutoWhat = "peer TLS (auto cluster CA)"
)

// PeerOptions are the inputs of LoadPeer. Exactly one source is used:
// explicit files (CAFile, CertFile and KeyFile all set) or auto
// (ClusterCAPath and Dir set).
type PeerOptions struct {
	// NodeID is this broker's id; it must appear in the certificate.
	NodeID string

	// CAFile is tls.peer_ca_path: the PEM bundle peers are verified
	// against. CertFile and KeyFile are tls.cert_path / tls.key_path, the
	// operator's pair, which must carry the node's URI SAN.
	CAFile, CertFile, KeyFile string

	// ClusterCAPath is a PEM file holding the cluster CA certificate and its
	// key, shared by every node of a dev cluster or test. When it does not
	// exist, the first node creates it atomically (a complete file appears
	// at once, and a node that loses the race loads the winner's CA).
	ClusterCAPath string
	// Dir receives this node's minted material (PeerCAFile, PeerFile,
	// PeerKeyFile); typically <data_dir>/tls.
	Dir string

	// Logger receives what was generated or minted; nil discards it.
	Logger *slog.Logger

	now func() time.Time // tests move the clock
}

func (o PeerOptions) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

// PeerFiles locates the PEM files of loaded peer material (the shape of
// plugins.PeerTLS, which this package does not import).
type PeerFiles struct {
	CAFile, CertFile, KeyFile string
}

// Peer is loaded peer TLS material for one node. Its certificate follows
// its files (peer_reload.go): replaced on disk, it serves the next
// handshakes, so every holder — the transports, raft, the broker — picks
// a rotated certificate up without a restart. The CA pool is fixed.
type Peer struct {
	nodeID string
	files  PeerFiles
	pool   *x509.CertPool
	log    *slog.Logger
	now    func() time.Time
	reload peerReload
}

// LoadPeer loads or mints the peer material described by opts and checks
// that the certificate names opts.NodeID. Errors name the config key or
// file at fault.
func LoadPeer(opts PeerOptions) (*Peer, error) {
	if opts.NodeID == "" {
		return nil, errors.New("peer TLS: the node id is empty")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	explicit := opts.CAFile != "" || opts.CertFile != "" || opts.KeyFile != ""
	auto := opts.ClusterCAPath != "" || opts.Dir != ""
	switch {
	case explicit && auto:
		return nil, errors.New("peer TLS: configure explicit files (tls.peer_ca_path, tls.cert_path, tls.key_path) or an auto cluster CA, not both")
	case explicit:
		return loadExplicitPeer(opts)
	case auto:
		if opts.ClusterCAPath == "" || opts.Dir == "" {
			return nil, errors.New("peer TLS: the auto cluster CA needs both the CA path and the node's directory")
		}
		return loadAutoPeer(opts, log)
	}
	return nil, errors.New("peer TLS: no material configured: set tls.peer_ca_path, tls.cert_path and tls.key_path, or use an auto cluster CA")
}

func loadExplicitPeer(opts PeerOptions) (*Peer, error) {
	switch {
	case opts.CAFile == "":
		return nil, errors.New("tls.peer_ca_path must be set for inter-broker TLS: peers are verified against it")
	case opts.CertFile == "" || opts.KeyFile == "":
		return nil, errors.New("tls.cert_path and tls.key_path must be set for inter-broker TLS")
	}
	pool, err := loadPool("tls.peer_ca_path", opts.CAFile)
	if err != nil {
		return nil, err
	}
	pair, err := loadPair("tls.cert_path", opts.CertFile, "tls.key_path", opts.KeyFile)
	if err != nil {
		return nil, err
	}
	what := "tls.cert_path " + opts.CertFile
	if err := checkValidity(what, pair.Leaf, opts.clock()); err != nil {
		return nil, err
	}
	if got := CertNodeID(pair.Leaf); got != opts.NodeID {
		return nil, fmt.Errorf("%s: the certificate must name this node in a URI SAN %s%s (it names %q); peers verify it", what, NodeURIPrefix, opts.NodeID, got)
	}
	if _, err := pair.Leaf.Verify(peerVerifyOptions(pool, pair, x509.ExtKeyUsageAny, opts.clock())); err != nil {
		return nil, fmt.Errorf("%s does not verify against tls.peer_ca_path %s: %w", what, opts.CAFile, err)
	}
	return newPeer(opts, PeerFiles{CAFile: opts.CAFile, CertFile: opts.CertFile, KeyFile: opts.KeyFile}, pair, pool), nil
}

func loadAutoPeer(opts PeerOptions, log *slog.Logger) (*Peer, error) {
	now := opts.clock()
	ca, err := openClusterCA(opts.ClusterCAPath, now, log)
	if err != nil {
		return nil, err
	}
	if err := mkdirPrivate(opts.Dir); err != nil {
		return nil, fmt.Errorf("%s: create %s: %w", peerAutoWhat, opts.Dir, err)
	}
	files := PeerFiles{
		CAFile:   filepath.Join(opts.Dir, PeerCAFile),
		CertFile: filepath.Join(opts.Dir, PeerFile),
		KeyFile:  filepath.Join(opts.Dir, PeerKeyFile),
	}
	if err := writeIfChanged(files.CAFile, encodeCert(ca.cert.Raw), 0o644); err != nil {
		return nil, fmt.Errorf("%s: write %s: %w", peerAutoWhat, files.CAFile, err)
	}
	pair, reason := reusablePeerPair(files, ca.cert, opts.NodeID, now)
	if pair == nil {
		if pair, err = mintPeer(files, ca, opts.NodeID, now); err != nil {
			return nil, err
		}
		log.Info("tls: minted a peer certificate", "reason", reason, "node", opts.NodeID,
			"file", files.CertFile, "not_after", pair.Leaf.NotAfter.UTC())
	}
	// The peer certificate is presented with the cluster CA after it, as
	// generated client-listener material is (S-152), and the file holds
	// that chain: transports and plugins load it from there. A file from
	// before holds the leaf alone and is rewritten once.
	pair = ca.chain(pair)
	if err := writeIfChanged(files.CertFile, append(encodeCert(pair.Certificate[0]), encodeCert(ca.cert.Raw)...), 0o644); err != nil {
		return nil, fmt.Errorf("%s: write %s: %w", peerAutoWhat, files.CertFile, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return newPeer(opts, files, pair, pool), nil
}

// reusablePeerPair returns the existing pair when it still fits (signed by
// the CA, valid beyond renewBefore, naming the node), else nil and why not.
func reusablePeerPair(files PeerFiles, ca *x509.Certificate, nodeID string, now time.Time) (*tls.Certificate, string) {
	if !exists(files.CertFile) && !exists(files.KeyFile) {
		return nil, "no peer certificate yet"
	}
	pair, err := loadPair(peerAutoWhat, files.CertFile, peerAutoWhat, files.KeyFile)
	switch {
	case err != nil:
		return nil, err.Error()
	case pair.Leaf.CheckSignatureFrom(ca) != nil:
		return nil, PeerFile + " is not signed by the cluster CA"
	case checkValidity(PeerFile, pair.Leaf, now) != nil || pair.Leaf.NotAfter.Sub(now) < renewBefore:
		return nil, PeerFile + " expired or expires soon"
	case CertNodeID(pair.Leaf) != nodeID:
		return nil, fmt.Sprintf("%s names node %q, not %q", PeerFile, CertNodeID(pair.Leaf), nodeID)
	}
	return pair, ""
}

func mintPeer(files PeerFiles, ca *autoCA, nodeID string, now time.Time) (*tls.Certificate, error) {
	// Loopback IPs let tools such as openssl s_client talk to a dev
	// cluster; peers themselves check only the node URI.
	tmpl, err := leafTemplate(now, ca.cert, "@node:"+nodeID, serverSANs(nil).loopbackIPs())
	if err != nil {
		return nil, err
	}
	tmpl.URIs = []*url.URL{NodeURI(nodeID)}
	certPEM, keyPEM, err := mintLeaf(tmpl, ca.cert, ca.key)
	if err != nil {
		return nil, fmt.Errorf("%s: mint the peer certificate: %w", peerAutoWhat, err)
	}
	certPEM = append(certPEM, encodeCert(ca.cert.Raw)...) // the chain it is presented with
	// Key first, as for server.pem: a crash between the writes leaves a
	// mismatched pair, which the next start re-mints.
	if err := writeFileAtomic(files.KeyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("%s: write %s: %w", peerAutoWhat, files.KeyFile, err)
	}
	if err := writeFileAtomic(files.CertFile, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("%s: write %s: %w", peerAutoWhat, files.CertFile, err)
	}
	return keyPair(certPEM, keyPEM)
}

// loopbackIPs keeps only the IP SANs (serverSANs(nil) yields localhost and
// the loopback addresses); a peer certificate carries no DNS names.
func (s sans) loopbackIPs() sans { return sans{ips: s.ips} }

// NodeURI returns the URI SAN naming node id.
func NodeURI(id string) *url.URL {
	return &url.URL{Scheme: "urn", Opaque: strings.TrimPrefix(NodeURIPrefix, "urn:") + id}
}

// CertNodeID returns the node id a certificate names in its URI SAN, or ""
// when it names none or more than one (an ambiguous certificate names
// nobody). It does not verify the certificate.
func CertNodeID(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	var id string
	for _, u := range cert.URIs {
		if rest, ok := strings.CutPrefix(u.String(), NodeURIPrefix); ok && rest != "" {
			if id != "" {
				return ""
			}
			id = rest
		}
	}
	return id
}

// PeerNodeID returns the node id of a connection's verified peer
// certificate, or "". Only verified chains count, so use it on the server
// side (ServerConfig verifies client certificates); a client side using
// ClientConfig has verified the chain in VerifyConnection and may read
// CertNodeID(cs.PeerCertificates[0]).
func PeerNodeID(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return ""
	}
	return CertNodeID(cs.PeerCertificates[0])
}

// NodeID is the node the material belongs to.
func (p *Peer) NodeID() string { return p.nodeID }

// Files returns the PEM files, for handing to a plugin as plugins.PeerTLS.
func (p *Peer) Files() PeerFiles { return p.files }

// CAPool returns a fresh pool of the CAs peers are verified against.
func (p *Peer) CAPool() *x509.CertPool { return p.pool.Clone() }

// ServerConfig is the tls.Config for accepting peers: TLS 1.3 (both ends
// are Fibril brokers, so there is no older client to serve), a client
// certificate is required and verified against the peer CA, and it must
// name a node. Which node is the caller's check (PeerNodeID), since only
// the application layer knows whom the peer claims to be.
func (p *Peer) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		NextProtos:     []string{PeerALPN},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.current(), nil },
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      p.pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if PeerNodeID(cs) == "" {
				return errors.New("peer TLS: the client certificate names no node (" + NodeURIPrefix + "<id> URI SAN)")
			}
			return nil
		},
	}
}

// ClientConfig is the tls.Config for dialing a peer. The server's chain is
// verified against the peer CA and its certificate must name expectNode
// (any node when expectNode is "": the caller then reads the id with
// CertNodeID and checks it itself). Host-name verification is replaced by
// this node-id check, because peers are identified by id, not address.
func (p *Peer) ClientConfig(expectNode string) *tls.Config {
	pool := p.pool
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{PeerALPN},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return p.current(), nil
		},
		// Verification happens in VerifyConnection below, by node id.
		InsecureSkipVerify: true, //nolint:gosec // replaced by the chain + node id check
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer TLS: the server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			opts := x509.VerifyOptions{
				Roots:         pool,
				Intermediates: x509.NewCertPool(),
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := leaf.Verify(opts); err != nil {
				return fmt.Errorf("peer TLS: the server certificate does not verify against the peer CA: %w", err)
			}
			got := CertNodeID(leaf)
			switch {
			case got == "":
				return errors.New("peer TLS: the server certificate names no node (" + NodeURIPrefix + "<id> URI SAN)")
			case expectNode != "" && got != expectNode:
				return fmt.Errorf("peer TLS: the server certificate names node %q, expected %q", got, expectNode)
			}
			return nil
		},
	}
}

func peerVerifyOptions(pool *x509.CertPool, pair *tls.Certificate, usage x509.ExtKeyUsage, now time.Time) x509.VerifyOptions {
	opts := x509.VerifyOptions{
		Roots:         pool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
		CurrentTime:   now,
	}
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			opts.Intermediates.AddCert(c)
		}
	}
	return opts
}

// VerifyNode checks the client certificate of a connection this broker
// accepted on a listener that did not verify it against the peer CA (the
// client listener when peers share it and the client did not offer
// PeerALPN): the chain must verify against the peer CA and the leaf must
// name a node. It returns that node id.
func (p *Peer) VerifyNode(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("no client certificate was presented")
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{
		Roots:         p.pool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return "", fmt.Errorf("the client certificate does not verify against the peer CA: %w", err)
	}
	id := CertNodeID(leaf)
	if id == "" {
		return "", errors.New("the client certificate names no node (" + NodeURIPrefix + "<id> URI SAN)")
	}
	return id, nil
}

// SharedConfig adapts the client listener's TLS config (client) to a port
// that peers share: a ClientHello offering PeerALPN gets this node's peer
// certificate and must present a peer certificate that verifies against
// the peer CA and names a node (ServerConfig); any other ClientHello gets
// client, except that a client certificate is requested even when
// tls.client_auth asks for none, so a peer that does not offer PeerALPN can
// still prove itself (VerifyNode) when it logs in as @node. Clients
// without certificates are unaffected.
func (p *Peer) SharedConfig(client *tls.Config) *tls.Config {
	peer := p.ServerConfig()
	clientSide := client.Clone()
	if clientSide.ClientAuth == tls.NoClientCert {
		clientSide.ClientAuth = tls.RequestClientCert
	}
	return &tls.Config{
		MinVersion: client.MinVersion,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			for _, proto := range hello.SupportedProtos {
				if proto == PeerALPN {
					return peer, nil
				}
			}
			return clientSide, nil
		},
	}
}
