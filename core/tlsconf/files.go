package tlsconf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// writeFileAtomic writes data to path with the given mode so that a crash
// leaves the old file or the new one: temporary file in the same
// directory, fsync, rename, directory fsync. Private keys go through here
// with mode 0600, so they are never readable by others, even briefly.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(mode); err == nil {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// exists reports whether path exists; errors other than "does not exist"
// count as existing so that the caller's read reports them.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
