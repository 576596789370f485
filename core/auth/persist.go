package auth

import (
	"fmt"
	"os"
	"path/filepath"
)

// beforeRename, when set by a test, runs after the temporary file is
// written and synced but before it replaces the store file; an error
// simulates a crash at that point.
var beforeRename func(tmp string) error

// writeFileAtomic replaces path with data so that a crash at any point
// leaves either the old file or the new one, never a mix or nothing:
// write a temporary file in the same directory (mode 0600: it holds
// password hashes), fsync it, rename it over path, then fsync the
// directory so the rename itself is durable.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if beforeRename != nil {
		if err := beforeRename(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// tempPattern names temporary files after the target so that leftovers
// from a crash are recognisable and removed by the next OpenStore.
func tempPattern(path string) string { return "." + filepath.Base(path) + ".tmp-*" }

// removeLeftovers deletes temporary files a crash left behind. They never
// hold the authoritative copy: the rename is the commit point.
func removeLeftovers(path string) {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), tempPattern(path)))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}
