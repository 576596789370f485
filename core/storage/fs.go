package storage

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// FS is the filesystem seam. The partition performs every file and
// directory operation through it, so a test can substitute a filesystem
// that models power loss (see package faultfs).
//
// The durability model the partition relies on is the POSIX one:
//   - File.Sync makes the file's content and size durable (every byte
//     written before the call can be read back after a power loss); it need
//     not make other metadata (timestamps) durable — fdatasync suffices;
//   - creating, renaming or removing a directory entry is durable only after
//     SyncDir of the parent directory.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_CREATE,
	// O_EXCL, O_TRUNC are the ones used).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// ReadDir lists the entry names of dir, sorted.
	ReadDir(dir string) ([]string, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm fs.FileMode) error
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
}

// File is an open file. Positions are explicit: the partition tracks its
// own write positions, so no file offset state is shared between readers
// and the writer.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes the content and size durable (see FS). OSFS implements it
	// with fdatasync on Linux, fsync elsewhere.
	Sync() error
	Truncate(size int64) error
	Size() (int64, error)
	Close() error
}

// OSFS is the real operating-system filesystem.
type OSFS struct{}

type osFile struct{ *os.File }

// Sync implements File with dataSync: fdatasync on Linux (fs_linux.go),
// fsync elsewhere. Directories keep a real fsync (SyncDir).
func (f osFile) Sync() error { return dataSync(f.File) }

func (f osFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// SyncDir implements FS: fsync on the directory itself is what makes new,
// renamed and removed entries survive a power loss on Linux filesystems.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return serr
	}
	return cerr
}

// ReplaceFile makes dir/name hold exactly data, crash-safely: it writes
// dir/name.tmp, fsyncs it, renames it over name and fsyncs the directory,
// so after a power loss at any point name is the old file (or absent) or
// the new one whole, never a torn mix. For small files written rarely:
// the catalog, a partition's id, its quarantine marker.
func ReplaceFile(fsys FS, dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}
