//go:build !linux

package storage

import "os"

// dataSync is a plain fsync where fdatasync is not used (see fs_linux.go).
func dataSync(f *os.File) error { return f.Sync() }

// startWriteback does nothing where sync_file_range is missing: the
// checkpoint's fsync does all the work (see fs_linux.go).
func startWriteback(File) {}
