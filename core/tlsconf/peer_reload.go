package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// peerCheckEvery is how often, at most, a handshake looks whether the
// peer certificate's files changed: a stat of two files, so handshakes
// (rare between brokers: links are long-lived) never wait on a read.
const peerCheckEvery = time.Second

// peerReload is a Peer's serving certificate and what its files looked
// like when it was read.
type peerReload struct {
	cur     atomic.Pointer[tls.Certificate]
	checked atomic.Int64 // unix nanos of the last look at the files
	mu      sync.Mutex   // one reload at a time
	stamp   fileStamp    // the files as last read (or last refused)
}

// fileStamp identifies a version of the certificate and key files.
type fileStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

func stampOf(f PeerFiles) (fileStamp, error) {
	c, err := os.Stat(f.CertFile)
	if err != nil {
		return fileStamp{}, err
	}
	k, err := os.Stat(f.KeyFile)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{certMod: c.ModTime(), keyMod: k.ModTime(), certSize: c.Size(), keySize: k.Size()}, nil
}

func newPeer(opts PeerOptions, files PeerFiles, pair *tls.Certificate, pool *x509.CertPool) *Peer {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Peer{nodeID: opts.NodeID, files: files, pool: pool, log: log, now: opts.clock}
	p.reload.cur.Store(pair)
	p.reload.stamp, _ = stampOf(files)
	p.reload.checked.Store(time.Now().UnixNano())
	return p
}

// current is the certificate to present: the loaded one, replaced first
// when its files changed since (looked at once per peerCheckEvery).
func (p *Peer) current() *tls.Certificate {
	if last := p.reload.checked.Load(); time.Since(time.Unix(0, last)) >= peerCheckEvery &&
		p.reload.checked.CompareAndSwap(last, time.Now().UnixNano()) {
		_, _ = p.refresh(false)
	}
	return p.reload.cur.Load()
}

// Reload reads the peer certificate from its files now (SIGHUP, the admin
// API's TLS reload): a pair that loads, is valid, names this node and
// verifies against the peer CA replaces the serving one; otherwise the
// serving one stays and the error says why. It reports whether the
// certificate changed.
func (p *Peer) Reload() (changed bool, err error) {
	if p == nil {
		return false, nil
	}
	return p.refresh(true)
}

// refresh loads the files when they changed since they were last read
// (always when force), and swaps the certificate in if it passes.
func (p *Peer) refresh(force bool) (bool, error) {
	r := &p.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := stampOf(p.files)
	if err != nil {
		if force {
			return false, fmt.Errorf("peer TLS: %w", err)
		}
		return false, nil // a rotation in progress; the next look sees it whole
	}
	if st == r.stamp && !force {
		return false, nil
	}
	r.stamp = st // a pair that fails is not tried again until the files change
	pair, err := p.loadCurrent()
	if err != nil {
		p.log.Warn("tls: the peer certificate files changed but are refused; the previous certificate keeps serving", "err", err)
		return false, err
	}
	if old := r.cur.Load(); old != nil && string(old.Certificate[0]) == string(pair.Certificate[0]) {
		return false, nil
	}
	r.cur.Store(pair)
	p.log.Info("tls: peer certificate reloaded", "file", p.files.CertFile, "leaf_sha256", sha256Hex(pair.Certificate[0]),
		"not_after", pair.Leaf.NotAfter.UTC())
	return true, nil
}

// loadCurrent reads and checks the pair in p's files.
func (p *Peer) loadCurrent() (*tls.Certificate, error) {
	what := "peer certificate " + p.files.CertFile
	pair, err := loadPair("tls.cert_path", p.files.CertFile, "tls.key_path", p.files.KeyFile)
	if err != nil {
		return nil, err
	}
	now := p.now()
	if err := checkValidity(what, pair.Leaf, now); err != nil {
		return nil, err
	}
	if got := CertNodeID(pair.Leaf); got != p.nodeID {
		return nil, fmt.Errorf("%s names node %q, not this node %q", what, got, p.nodeID)
	}
	if _, err := pair.Leaf.Verify(peerVerifyOptions(p.pool, pair, x509.ExtKeyUsageAny, now)); err != nil {
		return nil, fmt.Errorf("%s does not verify against the peer CA: %w", what, err)
	}
	return pair, nil
}
