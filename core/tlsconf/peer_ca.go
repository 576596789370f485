package tlsconf

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// The auto cluster CA is one PEM file holding the CA certificate and its
// key. One file rather than ca.pem + ca.key because several nodes may
// start at once against the same path: the file must appear complete or
// not at all, and two files cannot appear together atomically.
//
// Creation writes a temporary file beside the target, fsyncs it and then
// hard-links it into place. link(2) fails when the name exists, exactly
// like open(O_CREAT|O_EXCL), but the content is complete before the name
// appears, so a node that loses the race never reads a half-written CA;
// it loads the winner's. Every node of the cluster thus agrees on one CA.

// openClusterCA loads the cluster CA at path, creating it when absent.
func openClusterCA(path string, now time.Time, log *slog.Logger) (*autoCA, error) {
	for range 2 {
		ca, err := readClusterCA(path, now)
		if !errors.Is(err, fs.ErrNotExist) {
			return ca, err
		}
		created, err := createClusterCA(path, now)
		if err != nil {
			return nil, err
		}
		if created {
			log.Info("tls: generated the peer cluster CA", "file", path)
		}
	}
	return nil, fmt.Errorf("%s: %s vanished while it was being created", peerAutoWhat, path)
}

// readClusterCA reads the CA certificate and key from one PEM file. A
// missing file returns an error wrapping fs.ErrNotExist.
func readClusterCA(path string, now time.Time) (*autoCA, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s %s: %w", peerAutoWhat, path, err)
	}
	certs, data, err := readCerts(peerAutoWhat, path)
	if err != nil {
		return nil, err
	}
	cert := certs[0]
	if !cert.IsCA {
		return nil, fmt.Errorf("%s %s: the first certificate is not a CA", peerAutoWhat, path)
	}
	if err := checkValidity(peerAutoWhat+" "+path, cert, now); err != nil {
		return nil, err
	}
	if _, err := readKey(peerAutoWhat, path); err != nil {
		return nil, err
	}
	// X509KeyPair skips blocks of the other kind, so the one file serves
	// as both arguments.
	pair, err := tls.X509KeyPair(data, data)
	if err != nil {
		return nil, fmt.Errorf("%s %s: the key does not belong to the CA certificate: %w", peerAutoWhat, path, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s %s: unsupported key type %T", peerAutoWhat, path, pair.PrivateKey)
	}
	return &autoCA{dir: filepath.Dir(path), cert: cert, key: signer}, nil
}

// createClusterCA generates a CA and links it into place; created is false
// when another node got there first (its CA is then the one to load).
func createClusterCA(path string, now time.Time) (created bool, err error) {
	dir := filepath.Dir(path)
	if err := mkdirPrivate(dir); err != nil {
		return false, fmt.Errorf("%s: create %s: %w", peerAutoWhat, dir, err)
	}
	cert, key, err := mintCA(now)
	if err != nil {
		return false, fmt.Errorf("%s: generate the CA: %w", peerAutoWhat, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return false, err
	}
	data := append(encodeCert(cert.Raw), keyPEM...)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("%s: %w", peerAutoWhat, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err = f.Chmod(0o600); err == nil {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("%s: write %s: %w", peerAutoWhat, tmp, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("%s: create %s: %w", peerAutoWhat, path, err)
	}
	return true, syncDir(dir)
}

func mkdirPrivate(dir string) error { return os.MkdirAll(dir, 0o700) }

// writeIfChanged rewrites path only when its content differs, so a
// restart does not touch files that are already right.
func writeIfChanged(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return writeFileAtomic(path, data, mode)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
