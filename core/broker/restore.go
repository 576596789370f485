package broker

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Restore makes dataDir — which must not exist, or be empty — a data
// directory holding the backup that r carries (a tar archive written by
// POST /admin/api/backup, `fibrilctl backup`): a broker started on it
// recovers the backup's partitions, catalog, users and runtime settings
// (docs/deploy.md#backup-and-restore). The archive is unpacked next to
// dataDir first and renamed into place at the end, so a failure leaves
// nothing half restored. It returns the backup's manifest.
func Restore(dataDir string, r io.Reader) (*BackupManifest, error) {
	if entries, err := os.ReadDir(dataDir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("restore: server.data_dir %s is not empty: restore into a new directory (the broker's data stays where it is)", dataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("restore: %w", err)
	}
	tmp := strings.TrimRight(dataDir, string(filepath.Separator)) + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	m, err := unpackBackup(tmp, r)
	if err == nil {
		err = writeDataFormat(filepath.Join(tmp, dataFormatFile), m.Format)
	}
	if err == nil {
		_ = os.Remove(dataDir) // empty, or absent
		err = os.Rename(tmp, dataDir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("restore: %w", err)
	}
	return m, nil
}

// unpackBackup writes the archive's files under dir: regular files and
// directories only, at relative paths that stay inside dir; the first
// entry must be the manifest, of a format this build reads.
func unpackBackup(dir string, r io.Reader) (*BackupManifest, error) {
	tr := tar.NewReader(r)
	var m *BackupManifest
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a backup archive: %w", err)
		}
		name := path.Clean(h.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		if m == nil {
			if name != "backup.json" {
				return nil, fmt.Errorf("not a backup archive: it does not start with backup.json")
			}
			m = &BackupManifest{}
			if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(m); err != nil {
				return nil, fmt.Errorf("backup.json: %w", err)
			}
			if m.Format > dataFormat || m.Format <= 0 {
				return nil, fmt.Errorf("the backup has data format %d (written by fibril %s); this build reads formats up to %d", m.Format, m.WrittenBy, dataFormat)
			}
		}
		if name == "cluster.json" {
			name = restoredClusterFile // applied when a broker joins a cluster (restoreClusterMetadata)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return nil, err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(f, tr)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("archive entry %q is not a file or a directory", h.Name)
		}
	}
	if m == nil {
		return nil, errors.New("not a backup archive: it is empty")
	}
	return m, nil
}
